// One host agent watched by two control planes on one database (issue 43: "two replicas watching
// one agent never start an instance twice or lose a status"). Each control plane dials every
// agent and folds its reports; these are the orders of events that used to go wrong:
// - B reconciles with the host (after a restart or a redial) while A places an instance there:
//   B's listing misses the instance, and B used to judge it from the database read after that
//   listing: failed as lost, then removed by "everything else goes" (the agent's Reconcile);
// - a start (B resending one from its reconciliation) that reaches the host after A destroyed the
//   instance used to start it again, running unbilled where the database says stopped;
// - B folding the same `ready` report as A used to move ready_at, from which billing counts.
// Both control planes are in this process on one SQLite file (as two processes would have it);
// the hooks below only choose the order in which real calls to the real agent happen.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Placement } from '../../control-plane/instances/placement.js';
import { waitFor } from '../helpers.js';
import { startPlatform, startTestAgent, waitStatus } from './harness.js';

test('a control plane reconciling with a host while another places an instance there neither fails nor removes it', async (t) => {
  const agent = await startTestAgent(t);
  const a = await startPlatform(t, { agents: [agent.config] });
  const me = await a.account('placed-meanwhile@example.com', { credits: 100 });
  const template = await a.template(me.id);
  await waitFor(() => a.instances.service.agents.get('host-a')?.connected, 10_000);
  // B starts later (a restart): it reads the database, then lists the host; between that listing
  // and the rest of its reconciliation, A places an instance on the host and it becomes ready.
  const b = await startPlatform(t, { dir: a.dir, agents: [agent.config], manual: true });
  const conn = b.instances.service.agents.get('host-a')!;
  const client = conn.client;
  const list = client.list.bind(client);
  let instanceId: string | undefined;
  client.list = async () => {
    const listing = await list();
    if (instanceId === undefined) {
      const r = await a.call('POST', `/api/templates/${template.id}/launch`, { key: me.key, body: { gpu_count: 1 } });
      assert.equal(r.status, 200, JSON.stringify(r.body));
      instanceId = r.body.instance_id as string;
      await waitStatus(a, me.key, 'ready');
    }
    return listing;
  };
  b.instances.start();
  await waitFor(() => instanceId !== undefined && conn.connected && !conn.reconciling, 30_000);
  // B's reconciliation is over: the instance is still ready, on the host and running.
  const row = (await b.store.instances.get(instanceId!))!;
  assert.equal(row.state, 'ready', `${row.state}: ${row.message} ${row.reason ?? ''}`);
  assert.deepEqual(
    agent.handle.supervisor.list().map((i) => [i.instanceId, i.state]),
    [[instanceId, 'ready']],
  );
  assert.equal((await waitStatus(b, me.key, 'ready')).instance_id, instanceId, 'both control planes answer ready');
});

test('a start that reaches the host after its instance was destroyed through another control plane is removed again', async (t) => {
  const agent = await startTestAgent(t);
  const a = await startPlatform(t, { agents: [agent.config] });
  const b = await startPlatform(t, { dir: a.dir, agents: [agent.config] });
  const me = await a.account('late-start@example.com', { credits: 100 });
  const r = await a.call('POST', `/api/templates/${(await a.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: 1 } });
  await waitStatus(a, me.key, 'ready');
  const id = r.body.instance_id as string;
  const stale = (await b.store.instances.get(id))!; // B's view when it decided to (re)send the start
  assert.equal((await a.call('DELETE', '/api/notebook/current', { key: me.key })).status, 200);
  await waitStatus(a, me.key, 'stopped');
  await waitFor(() => agent.handle.supervisor.list().length === 0, 10_000);
  const destroyed = (await b.store.instances.get(id))!;

  // B's start arrives now, after A's remove: the host starts it again, and B removes it at once.
  const conn = b.instances.service.agents.get('host-a')!;
  await waitFor(() => conn.connected, 10_000);
  const placement = (b.instances.service as unknown as { placement: Placement }).placement; // the start a reconciliation resends
  await placement.sendStart(conn, stale);
  assert.deepEqual(agent.handle.supervisor.list(), [], 'nothing runs on the host that the database says is gone');
  const after = (await b.store.instances.get(id))!;
  assert.deepEqual(
    [after.state, after.ended_at, after.billed_periods],
    [destroyed.state, destroyed.ended_at, destroyed.billed_periods],
    'stopped where the destroy ended it',
  );
});

test('the move to ready happens once: a second fold of the same report does not move ready_at (billing counts from it)', async (t) => {
  const agent = await startTestAgent(t);
  const a = await startPlatform(t, { agents: [agent.config] });
  const me = await a.account('ready-once@example.com', { credits: 100 });
  const r = await a.call('POST', `/api/templates/${(await a.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: 1 } });
  await waitStatus(a, me.key, 'ready');
  const id = r.body.instance_id as string;
  const ready = (await a.store.instances.get(id))!;
  const later = ready.ready_at! + 5_000;
  // What applyReady writes for a pending instance, narrowed to pending: no row moves.
  assert.equal(await a.store.instances.transition(id, 'ready', 'ready', later, { ready_at: later, last_activity_at: later }, ['pending']), undefined);
  assert.equal((await a.store.instances.get(id))!.ready_at, ready.ready_at);
  // Without the narrowing, ready -> ready with a new message is allowed: the guard above is what holds.
  assert.equal((await a.store.instances.transition(id, 'ready', 'ready', later, { ready_at: later }))?.ready_at, later);
});
