import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DEFAULT_SIM_MODELS, loadConfig } from '../../lib/config.js';
import { ConfigError } from '../../lib/errors.js';

const dir = mkdtempSync(join(tmpdir(), 'rc-config-'));
after(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, body: string) => {
  const p = join(dir, name);
  writeFileSync(p, body);
  return p;
};

test('defaults: documented ports and the sim catalog', () => {
  const c = loadConfig({});
  assert.equal(c.apiPort, 8080);
  assert.equal(c.gatewayPort, 8090);
  assert.equal(c.agentPort, 7070);
  assert.equal(c.dataDir, './data');
  assert.equal(c.redisUrl, '');
  assert.deepEqual(c.models, DEFAULT_SIM_MODELS);
  assert.equal(c.defaultModels, true);
});

test('environment overrides the file, the file overrides defaults', () => {
  const p = file('a.json', JSON.stringify({ gatewayPort: 9999, apiPort: 7000, models: [{ name: 'm', upstreams: ['http://127.0.0.1:9000'] }] }));
  const c = loadConfig({ RC_CONFIG: p, RC_GATEWAY_PORT: '8123', RC_MODEL_RPM: '5' });
  assert.equal(c.gatewayPort, 8123);
  assert.equal(c.apiPort, 7000);
  assert.equal(c.modelRpm, 5);
  assert.equal(c.defaultModels, false);
  assert.equal(c.models[0]!.name, 'm');
  assert.deepEqual(c.models[0]!.upstreams, ['http://127.0.0.1:9000']);
  assert.equal(c.models[0]!.tools, true);
});

const bad: [string, NodeJS.ProcessEnv, RegExp][] = [
  ['port not a number', { RC_API_PORT: 'eighty' }, /apiPort \(environment variable RC_API_PORT\)/],
  ['port out of range', { RC_GATEWAY_PORT: '70000' }, /gatewayPort/],
  ['negative rpm', { RC_MODEL_RPM: '-1' }, /modelRpm/],
  ['redis url scheme', { REDIS_URL: 'http://x' }, /redisUrl/],
  ['log level', { RC_LOG_LEVEL: 'loud' }, /logLevel/],
  ['missing file', { RC_CONFIG: join(dir, 'nope.json') }, /RC_CONFIG: cannot read/],
  ['broken json', { RC_CONFIG: file('b.json', '{') }, /not valid JSON/],
  ['bad model url', { RC_CONFIG: file('c.json', '{"models":[{"name":"m","upstreams":["ftp://x"]}]}') }, /models\.0\.upstreams\.0/],
  ['unknown model key', { RC_CONFIG: file('d.json', '{"models":[{"name":"m","colour":"red"}]}') }, /colour/],
  ['duplicate model', { RC_CONFIG: file('e.json', '{"models":[{"name":"m"},{"name":"m"}]}') }, /duplicate name m/],
  ['unknown setting', { RC_CONFIG: file('f.json', '{"gatewayPortt":1}') }, /unknown setting gatewayPortt/],
  ['bad file value', { RC_CONFIG: file('g.json', '{"apiPort":"x"}') }, /apiPort \(RC_CONFIG key apiPort\)/],
  ['proxy base URL on an IP address', { RC_PROXY_PUBLIC_URL: 'http://10.0.0.1:8081' }, /RC_PROXY_PUBLIC_URL.*not an IP address/],
];
for (const [name, env, msg] of bad) {
  test(`a bad value stops start-up and names the setting: ${name}`, () => {
    assert.throws(
      () => loadConfig(env),
      (err: unknown) => err instanceof ConfigError && msg.test(err.message),
    );
  });
}

test('RC_SIM_FLAVOUR takes exactly the flavours the sim speaks (sim/options.ts SIM_FLAVOURS)', async () => {
  const { SIM_FLAVOURS } = await import('../../sim/options.js');
  for (const f of SIM_FLAVOURS) assert.equal(loadConfig({ RC_SIM_FLAVOUR: f }).simFlavour, f);
  assert.equal(loadConfig({}).simFlavour, 'vllm');
  assert.throws(() => loadConfig({ RC_SIM_FLAVOUR: 'tgi' }), ConfigError);
});
