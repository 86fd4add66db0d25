// Issue 44: at the platform's descriptor limit the agent's engine calls failed with EMFILE, the
// owner's destroy answered 200 and the container kept running, unbilled, its GPUs held
// "stopping": the control plane retried only on a reconnect, and the agent awaited its first
// failed stop forever. Now a failed stop is tried again (agent/instance-stop.ts) and the control
// plane retries the removal from its tick until the host confirms (control-plane/instances/
// lifecycle.ts retryRemovals); meanwhile another account's launch runs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Runtime } from '../../agent/runtime.js';
import { waitFor } from '../helpers.js';
import { instanceGroups, startPlatform, startTestAgent, waitStatus } from './harness.js';

test('destroy stops the instance for real when the runtime fails at first (EMFILE), retried until it is gone', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const owner = await p.account('flood@example.com', { credits: 10 });
  const tpl = await p.template(owner.id);
  await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: owner.key, body: {} });
  const ready = await waitStatus(p, owner.key, 'ready');
  const id = String(ready.instance_id);
  assert.equal(instanceGroups(agent.handle.agentId, id).length, 1);

  // The runtime's stop fails the first 3 times, as the engine calls did at the descriptor limit.
  const runtime = (agent.handle.supervisor as unknown as { runtime: Runtime }).runtime;
  const realStop = runtime.stop.bind(runtime);
  let calls = 0;
  runtime.stop = async (ref, graceMs) => {
    calls++;
    if (calls <= 3) throw Object.assign(new Error('connect EMFILE /var/run/docker.sock'), { code: 'EMFILE' });
    return realStop(ref, graceMs);
  };

  const del = await p.call('DELETE', '/api/notebook/current', { key: owner.key });
  assert.equal(del.status, 200);
  assert.equal(del.body.status, 'stopping', 'not stopped while the host has not removed it');
  // Another account launches meanwhile.
  const other = await p.account('other@example.com', { credits: 10 });
  await p.call('POST', `/api/templates/${(await p.template(other.id)).id}/launch`, { key: other.key, body: {} });
  await waitStatus(p, other.key, 'ready');

  // The owner's instance ends for real: retried past the failures, its processes gone.
  await waitStatus(p, owner.key, 'stopped', 60_000);
  assert.ok(calls >= 4, `stop tried ${calls} times`);
  await waitFor(() => instanceGroups(agent.handle.agentId, id).length === 0);
  assert.equal(agent.handle.supervisor.get(id), undefined, 'removed from the agent');
});
