// The process runtime cannot take over the platform: instances run in homes outside the data dir
// (0700), as an unprivileged user when the agent runs as root, and nothing starts while the agent
// is reachable from other machines unless the operator allows it.
import assert from 'node:assert/strict';
import { statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { startAgent } from '../../agent/server.js';
import { createLogger } from '../../lib/log.js';
import { waitFor } from '../helpers.js';
import { newToken, startTestAgent, tempDir, waitForState } from './harness.js';

const asRoot = process.getuid?.() === 0;

test('an instance cannot read the data dir: 0700, homes outside it, another user when the agent is root', async (t) => {
  const { client, dataDir } = await startTestAgent(t);
  assert.equal(statSync(dataDir).mode & 0o777, 0o700);
  await client.start({
    instanceId: 'tenant',
    startCommand: `echo "uid=$(id -u) home=$PWD"; cat ${join(dataDir, 'state.json')} >/dev/null 2>&1 && echo READ-STATE; ls ${dataDir} >/dev/null 2>&1 && echo LIST-DATA; echo PROBE-DONE; exec sleep 30`,
  });
  await waitForState(client, 'tenant', 'ready');
  const out = await waitFor(async () => {
    const lines: string[] = [];
    for await (const l of client.logs('tenant', { tail: 10 })) lines.push(l);
    return lines.includes('PROBE-DONE') ? lines.join('\n') : undefined;
  });
  assert.match(out, new RegExp(`home=${dataDir}-instances/homes/tenant`));
  if (asRoot) {
    assert.doesNotMatch(out, /uid=0\b/, 'not root');
    assert.ok(!out.includes('READ-STATE') && !out.includes('LIST-DATA'), out);
  } else {
    t.diagnostic("not root: instances run as the agent's own user (documented), the uid check is skipped");
  }
});

test('a process-runtime agent reachable from other machines starts nothing unless the operator allows it', async (t) => {
  const refusing = await startTestAgent(t, { host: '0.0.0.0' });
  const { instance } = await refusing.client.start({ instanceId: 'r', startCommand: 'exec sleep 30' });
  const failed = instance.state === 'failed' ? instance : await waitForState(refusing.client, 'r', 'failed');
  assert.equal(failed.reason, 'runtime_refused');
  assert.match(failed.detail, /docker runtime.*RC_AGENT_PROCESS_UNTRUSTED=allow/);

  const allowing = await startTestAgent(t, { host: '0.0.0.0', processUntrusted: 'allow' });
  await allowing.client.start({ instanceId: 'a', startCommand: 'exec sleep 30' });
  await waitForState(allowing.client, 'a', 'ready');
});

test('an agent running as root refuses to start when the instance user does not exist', { skip: !asRoot && 'needs root' }, async (t) => {
  await assert.rejects(
    startAgent({ token: newToken(), dataDir: tempDir(t), port: 0, processUser: 'rc-no-such-user-xyz', logger: createLogger('silent') }),
    /RC_AGENT_PROCESS_USER.*no such user/,
  );
});
