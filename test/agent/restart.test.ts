// Reconciliation: `rc agent` killed with SIGKILL and started again on the same data dir adopts its
// running instances (same process, not duplicated, not orphaned); unwanted instances are removed;
// a lost control plane makes the agent stop its instances itself.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { createAgentClient } from '../../agent/client.js';
import { isAlive } from '../../agent/procfs.js';
import { waitFor } from '../helpers.js';
import {
  collectEvents,
  instanceGroups,
  killAgentProcesses,
  killChild,
  newToken,
  simCommand,
  spawnAgent,
  startTestAgent,
  tempDir,
  waitForState,
} from './harness.js';

test('an agent killed while an instance runs adopts it on restart; a later stop stops the real process group', async (t) => {
  const dataDir = tempDir(t);
  const token = newToken();
  const first = await spawnAgent(t, dataDir, token);
  t.after(() => killAgentProcesses(first.agentId));
  const c1 = createAgentClient({ address: first.address, token });
  t.after(() => c1.close());
  await c1.start({ instanceId: 'survivor', startCommand: simCommand('m'), ports: [8000], gpuCount: 2 });
  await c1.start({ instanceId: 'doomed', startCommand: 'exec sleep 60' });
  const before = await waitForState(c1, 'survivor', 'ready');
  await waitForState(c1, 'doomed', 'ready');
  const pid = Number(before.runtimeId);
  const lastSeq = Math.max(...(await c1.list()).map((i) => i.seq));
  c1.close();

  await killChild(first.child);
  assert.ok(isAlive(pid), 'the instance outlives the agent');
  // While the agent is down, one instance dies.
  const doomedGroups = instanceGroups(first.agentId, 'doomed');
  assert.equal(doomedGroups.length, 1);
  process.kill(-doomedGroups[0]!, 'SIGKILL');
  await waitFor(() => instanceGroups(first.agentId, 'doomed').length === 0);

  const second = await spawnAgent(t, dataDir, token);
  assert.equal(second.agentId, first.agentId, 'the agent id lives in the data dir');
  const c2 = createAgentClient({ address: second.address, token });
  t.after(() => c2.close());
  const after = (await c2.list()).find((i) => i.instanceId === 'survivor')!;
  assert.equal(after.state, 'ready', 'still ready');
  assert.equal(after.runtimeId, before.runtimeId, 'the same process');
  assert.deepEqual(after.gpus, before.gpus);
  assert.deepEqual(instanceGroups(first.agentId, 'survivor'), [pid], 'not duplicated');
  const [endpoint] = after.endpoints;
  assert.equal((await fetch(`http://${endpoint!.host}:${endpoint!.hostPort}/health`)).status, 200, 'still serving on the same port');

  const doomed = await waitForState(c2, 'doomed', 'failed');
  assert.equal(doomed.reason, 'lost');
  assert.ok(doomed.seq > lastSeq, 'sequence numbers continue across restarts');

  // The adopted instance's GPUs stay taken.
  assert.equal((await c2.getHost()).freeGpus, 2);
  // Logs of the adopted instance are still served (from its file): the sim's ready line.
  const lines: string[] = [];
  for await (const l of c2.logs('survivor', { tail: 5 })) lines.push(l);
  assert.ok(
    lines.some((l) => l.includes('"model":"m"')),
    lines.join('\n'),
  );

  const stopped = await c2.stop('survivor');
  assert.equal(stopped.state, 'stopped');
  assert.equal(isAlive(pid), false, 'the real process is stopped');
  assert.deepEqual(instanceGroups(first.agentId, 'survivor'), []);
  assert.equal((await c2.getHost()).freeGpus, 4);
});

test('an adopted instance that exits later is reported failed (exited)', async (t) => {
  const dataDir = tempDir(t);
  const token = newToken();
  const first = await spawnAgent(t, dataDir, token);
  t.after(() => killAgentProcesses(first.agentId));
  const c1 = createAgentClient({ address: first.address, token });
  t.after(() => c1.close());
  await c1.start({ instanceId: 'short', startCommand: 'exec sleep 60' });
  const info = await waitForState(c1, 'short', 'ready');
  await killChild(first.child);
  const second = await spawnAgent(t, dataDir, token);
  const c2 = createAgentClient({ address: second.address, token });
  t.after(() => c2.close());
  assert.equal((await c2.list())[0]!.state, 'ready');
  process.kill(-Number(info.runtimeId), 'SIGKILL');
  const failed = await waitForState(c2, 'short', 'failed');
  assert.equal(failed.reason, 'exited');
  assert.match(failed.detail, /exit status unknown/);
});

test('reconcile stops and removes the instances the control plane no longer wants', async (t) => {
  const { agent, client } = await startTestAgent(t, { stopGraceMs: 500 });
  await client.start({ instanceId: 'keep', startCommand: 'exec sleep 60' });
  await client.start({ instanceId: 'drop', startCommand: 'exec sleep 60', gpuCount: 1 });
  await waitForState(client, 'keep', 'ready');
  const drop = await waitForState(client, 'drop', 'ready');
  const watch = collectEvents(client, drop.seq);
  t.after(watch.stop);

  const result = await client.reconcile(['keep', 'ghost']);
  assert.deepEqual(result, { removedInstanceIds: ['drop'], unknownInstanceIds: ['ghost'] });
  assert.deepEqual(
    (await client.list()).map((i) => [i.instanceId, i.state]),
    [['keep', 'ready']],
  );
  assert.equal(isAlive(Number(drop.runtimeId)), false);
  assert.deepEqual(instanceGroups(agent.agentId, 'drop'), []);
  assert.equal((await client.getHost()).freeGpus, 4);
  await waitFor(() => watch.events().some((e) => e.state === 'removed'));
  assert.deepEqual(
    watch.events().map((e) => [e.state, e.reason]),
    [
      ['stopping', ''],
      ['stopped', 'unwanted'],
      ['removed', ''],
    ],
  );
  // Repeating it changes nothing.
  assert.deepEqual(await client.reconcile(['keep']), { removedInstanceIds: [], unknownInstanceIds: [] });
});

test('after losing the control plane for longer than the setting, the agent stops its instances', async (t) => {
  const { client } = await startTestAgent(t, { lostControlPlaneGraceMs: 600, stopGraceMs: 500 });
  // An open watch stream counts as the control plane being there.
  const watch = collectEvents(client);
  await client.start({ instanceId: 'lonely', startCommand: 'exec sleep 60' });
  const ready = await waitForState(client, 'lonely', 'ready');
  await new Promise((r) => setTimeout(r, 1200));
  assert.equal((await client.list())[0]!.state, 'ready', 'not stopped while the watch stream is open');
  watch.stop();
  // Now silence: no calls, no stream. Poll the pid rather than the agent (a call would count as contact).
  await waitFor(() => !isAlive(Number(ready.runtimeId)), 15_000, 100);
  const info = await waitForState(client, 'lonely', 'stopped');
  assert.equal(info.reason, 'control_plane_lost');
});

test('a second agent on the same data dir is refused', async (t) => {
  const { dataDir } = await startTestAgent(t);
  const { startAgent } = await import('../../agent/server.js');
  await assert.rejects(startAgent({ token: newToken(), dataDir, port: 0 }), { code: 'RC_ERR_AGENT_DATA_DIR_LOCKED' });
});

test('a process of this agent that the state file does not account for is killed at start (no orphan)', async (t) => {
  const dataDir = tempDir(t);
  const token = newToken();
  const { startAgent } = await import('../../agent/server.js');
  const { createLogger } = await import('../../lib/log.js');
  const opts = {
    token,
    dataDir,
    port: 0,
    gpus: { detect: 'configured' as const, count: 4 },
    logger: createLogger('silent'),
    lostControlPlaneGraceMs: 0,
    stopGraceMs: 500,
  };
  const first = await startAgent(opts);
  t.after(() => killAgentProcesses(first.agentId));
  const c1 = createAgentClient({ address: first.address, token });
  await c1.start({ instanceId: 'stray', startCommand: 'exec sleep 60' });
  const info = await waitForState(c1, 'stray', 'ready');
  c1.close();
  await first.close();
  assert.ok(isAlive(Number(info.runtimeId)), 'closing the agent leaves instances running');
  // As if the agent had crashed between starting the process and recording it.
  const { readFileSync, writeFileSync } = await import('node:fs');
  const statePath = join(dataDir, 'state.json');
  const state = JSON.parse(readFileSync(statePath, 'utf8')) as { instances: Record<string, unknown> };
  delete state.instances.stray;
  writeFileSync(statePath, JSON.stringify(state));

  const second = await startAgent(opts);
  t.after(() => second.close());
  assert.equal(isAlive(Number(info.runtimeId)), false, 'the orphan was stopped');
  assert.deepEqual(instanceGroups(second.agentId, 'stray'), []);
  assert.deepEqual(second.supervisor.list(), []);
});
