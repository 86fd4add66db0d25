// `rc host` end to end: spawned against the database alone (changes apply at the next start) and
// against a running platform (through the admin API: the host is dialled at once).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runRcCli, waitFor } from '../helpers.js';
import { startPlatform, startTestAgent, tempDir } from './harness.js';

const rc = (dataDir: string, args: string[]) => runRcCli(dataDir, ['host', ...args]);

test('rc host without a running platform: the registry in the database; usage errors exit 2', async (t) => {
  const dir = tempDir(t, 'rc-host-cli-');
  const tokenFile = join(dir, 'agent-token');
  writeFileSync(tokenFile, 'x'.repeat(32) + '\n');

  const added = await rc(dir, ['add', '--name', 'gpu-1', '--address', '10.213.0.2:7070', '--token-file', tokenFile, '--init']);
  assert.equal(added.code, 0, added.stderr);
  assert.equal(added.json.state, 'unknown');
  assert.equal(added.json.address, '10.213.0.2:7070');
  assert.equal((await rc(dir, ['add', '--name', 'gpu-2', '--address', '10.213.0.3:7070', '--token', 'y'.repeat(20)])).code, 0);
  assert.deepEqual(
    (await rc(dir, ['list'])).json.hosts.map((h: { name: string }) => h.name),
    ['gpu-1', 'gpu-2'],
  );
  assert.equal((await rc(dir, ['drain', 'gpu-1'])).json.state, 'draining');
  assert.equal((await rc(dir, ['resume', '--name', 'gpu-1'])).json.state, 'unknown');
  assert.deepEqual((await rc(dir, ['remove', 'gpu-2'])).json, { removed: 'gpu-2', ended_instances: [] });

  for (const args of [
    ['add', '--name', 'x', '--address', '10.0.0.1:1'], // no token
    ['add', '--name', 'x', '--address', '10.0.0.1:1', '--token', 'y'.repeat(20), '--token-file', tokenFile],
    ['add', '--name', 'x', '--address', '10.0.0.1:1', '--token-file', join(dir, 'missing')],
    ['drain'],
    ['drain', 'a', 'b'],
    ['drain', 'a', '--name', 'a'],
    ['bogus'],
  ]) {
    const r = await rc(dir, args);
    assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
  }
  const unknown = await rc(dir, ['remove', 'nope']);
  assert.equal(unknown.code, 1);
  assert.match(unknown.stderr, /No host named nope/);
  const badAddress = await rc(dir, ['add', '--name', 'x', '--address', 'nowhere', '--token', 'y'.repeat(20)]);
  assert.equal(badAddress.code, 2, 'a value the operation refuses is a usage error');
  assert.match(badAddress.stderr, /address must be host:port/);
});

test('rc host against a running platform: the added host is dialled at once', async (t) => {
  const a = await startTestAgent(t, { gpus: 2 });
  const p = await startPlatform(t);
  const tokenFile = join(p.dir, 'agent-token');
  writeFileSync(tokenFile, a.config.token + '\n');
  const added = await rc(p.dir, ['add', '--name', 'live', '--address', a.config.address, '--token-file', tokenFile]);
  assert.equal(added.code, 0, added.stderr);
  const host = await waitFor(async () => {
    const h = (await rc(p.dir, ['list'])).json.hosts[0];
    return h.state === 'connected' ? h : undefined;
  });
  assert.equal(host.gpus_total, 2);
  assert.equal(host.registered, true);
});
