// `rc agent`: bad options exit with status 2 and a clear message; the token file is generated.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { createAgentClient } from '../../agent/client.js';
import { RC_JS, spawnAgent, tempDir } from './harness.js';
import { chooseRuntime } from '../../agent/cli.js';
import { DOCKER_SOCKET, dockerAvailable } from '../helpers.js';

const rc = (args: string[], env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [RC_JS, 'agent', ...args], { encoding: 'utf8', env: { ...process.env, RC_LOG_LEVEL: 'silent', ...env }, timeout: 20_000 });

test('rc agent rejects bad options with exit status 2', (t) => {
  const dir = tempDir(t);
  for (const [args, message] of [
    [['--port', 'abc'], /--port must be an integer/],
    [['--port', '70000'], /--port must be at most 65535/],
    [['--runtime', 'vm'], /--runtime must be auto, process or docker/],
    [['--gpus=-1'], /--gpus must be an integer >= 0/],
    [['--bogus'], /Unknown option/],
    [['--token-file', join(dir, 'missing')], /--token-file: cannot read/],
  ] as const) {
    const r = rc([...args, '--data-dir', dir]);
    assert.equal(r.status, 2, `${args.join(' ')}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
  const help = rc(['--help']);
  assert.equal(help.status, 0);
  assert.match(help.stdout, /Usage: rc agent/);
  const badToken = rc(['--data-dir', dir, '--port', '0'], { RC_AGENT_TOKEN: 'short' });
  assert.equal(badToken.status, 1);
  assert.match(badToken.stderr, /RC_AGENT_TOKEN|agentToken/);
});

test('without RC_AGENT_TOKEN the agent generates a token file (mode 0600) that clients use', async (t) => {
  const dataDir = tempDir(t);
  const { child, address } = await spawnAgent(t, dataDir, '', { RC_AGENT_TOKEN: '' });
  t.after(() => child.kill('SIGKILL'));
  const tokenFile = join(dataDir, 'agent', 'token');
  assert.equal(statSync(tokenFile).mode & 0o777, 0o600);
  const client = createAgentClient({ address, token: readFileSync(tokenFile, 'utf8').trim() });
  t.after(() => client.close());
  assert.equal((await client.getHost()).gpus.length, 4);
});

test('runtime auto: docker when an engine answers, else process with the warning that it is for one trusted user', async (t) => {
  const warnings: string[] = [];
  assert.equal(await chooseRuntime('auto', join(tempDir(t), 'no-engine.sock'), (m) => warnings.push(m)), 'process');
  assert.equal(warnings.length, 1);
  assert.match(warnings[0]!, /host processes.*one trusted user/);
  assert.equal(await chooseRuntime('docker', '/nonexistent.sock', (m) => warnings.push(m)), 'docker', 'an explicit choice is kept');
  if (await dockerAvailable(t)) assert.equal(await chooseRuntime('auto', DOCKER_SOCKET, (m) => warnings.push(m)), 'docker');
});
