// `rc gateway` as a child process: config file catalog, keys file, reload on SIGHUP and on file
// change, clean stop, bad input.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { startSim, type SimServer } from '../../sim/server.js';
import { waitFor } from '../helpers.js';
import { spawnRc, stop } from './fixture.js';

describe('rc gateway', () => {
  let dir: string;
  let sim: SimServer;
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rc-gw-cli-'));
    sim = await startSim({ model: 'm', fast: true, logger: createLogger('silent') });
  });
  after(async () => {
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('serves the RC_CONFIG catalog with the keys file, reloads on SIGHUP and file change, stops on SIGTERM', async () => {
    const key = generateKey();
    const keysFile = join(dir, 'keys.json');
    writeFileSync(keysFile, JSON.stringify([{ keyHash: hashKey(key), accountId: 3 }]));
    const configFile = join(dir, 'config.json');
    writeFileSync(configFile, JSON.stringify({ models: [{ name: 'm', upstreams: [sim.url] }] }));
    const gw = await spawnRc(['gateway', '--port', '0', '--keys-file', keysFile], { RC_CONFIG: configFile, REDIS_URL: '' });
    try {
      const url = gw.ready.gateway as string;
      assert.match(url, /^http:\/\/127\.0\.0\.1:\d+$/);
      const client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
      assert.deepEqual(
        (await client.models.list()).data.map((m) => m.id),
        ['m'],
      );
      const c = await client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      assert.equal(c.object, 'chat.completion');
      const ids = async () => (await client.models.list()).data.map((m) => m.id);

      // SIGHUP reload.
      writeFileSync(
        configFile,
        JSON.stringify({
          models: [
            { name: 'm', upstreams: [sim.url] },
            { name: 'm2', servedName: 'm', upstreams: [sim.url] },
          ],
        }),
      );
      gw.child.kill('SIGHUP');
      await waitFor(async () => (await ids()).includes('m2'));
      // File change alone reloads too.
      writeFileSync(configFile, JSON.stringify({ models: [{ name: 'm3', servedName: 'm', upstreams: [sim.url] }] }));
      await waitFor(async () => (await ids()).join() === 'm3');
      // A broken file keeps the current catalog.
      writeFileSync(configFile, '{ not json');
      gw.child.kill('SIGHUP');
      await new Promise((r) => setTimeout(r, 300));
      assert.deepEqual(await ids(), ['m3']);
      assert.equal(gw.child.exitCode, null);
    } finally {
      assert.equal(await stop(gw.child), 0);
    }
  });

  it('starts with the limit overrides of the keys file', async () => {
    const key = generateKey();
    const keysFile = join(dir, 'limited-keys.json');
    writeFileSync(keysFile, JSON.stringify([{ keyHash: hashKey(key), accountId: 9, limits: { rpm: 1 } }]));
    const configFile = join(dir, 'limited-config.json');
    writeFileSync(configFile, JSON.stringify({ models: [{ name: 'm', upstreams: [sim.url] }] }));
    const gw = await spawnRc(['gateway', '--port', '0', '--keys-file', keysFile], { RC_CONFIG: configFile, REDIS_URL: '', RC_MODEL_RPM: '1000' });
    try {
      const client = new OpenAI({ apiKey: key, baseURL: `${gw.ready.gateway as string}/v1`, maxRetries: 0 });
      const ask = () => client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      assert.equal((await ask()).object, 'chat.completion');
      await assert.rejects(
        ask(),
        (err: unknown) => (err as { status?: number; code?: string }).status === 429 && (err as { code?: string }).code === 'request_rate_limit_exceeded',
      );
    } finally {
      assert.equal(await stop(gw.child), 0);
    }
  });

  it('exits non-zero with a clear message on bad input', async () => {
    const bad = join(dir, 'bad-keys.json');
    writeFileSync(bad, JSON.stringify([{ keyHash: 'nothex', accountId: 1 }]));
    await assert.rejects(spawnRc(['gateway', '--port', '0', '--keys-file', bad], { RC_CONFIG: '', REDIS_URL: '' }), /keys file .*keyHash/);
    const badLimits = join(dir, 'bad-limits.json');
    writeFileSync(badLimits, JSON.stringify([{ keyHash: hashKey(generateKey()), accountId: 1, limits: { rpm: -1 } }]));
    await assert.rejects(spawnRc(['gateway', '--port', '0', '--keys-file', badLimits], { RC_CONFIG: '', REDIS_URL: '' }), /keys file .*limits\.rpm/);
    await assert.rejects(spawnRc(['gateway', '--port', 'abc'], { RC_CONFIG: '', REDIS_URL: '' }), /--port must be an integer/);
    await assert.rejects(spawnRc(['gateway', '--nope'], { RC_CONFIG: '', REDIS_URL: '' }), /Unknown option/);
  });
});
