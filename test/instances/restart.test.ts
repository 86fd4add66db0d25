// Restarts and failures: the control plane restarted mid-launch and mid-run (reconciled with
// the agent, no double charge, no lost instance); the agent killed (host unreachable, then
// reconciled when it returns) and lost for good (instances fail, leftovers removed on return).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Store } from '../../control-plane/store.js';
import { FakeClock } from '../../lib/clock.js';
import { waitFor } from '../helpers.js';
import { instanceGroups, killChild, newToken, simCommand, spawnAgent, startPlatform, startTestAgent, tempDir, waitStatus } from './harness.js';

const HOUR = 3_600_000;

test('control plane restarted mid-launch and mid-run: same instance, charged exactly once', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const settings = { instanceTickMs: 24 * HOUR, instanceIdleTimeoutSec: 86_400 };
  const p1 = await startPlatform(t, { agents: [agent.config], clock, settings });
  const me = await p1.account('restart@example.com', { credits: 100 });
  const tpl = await p1.template(me.id, { start_command: `sleep 1; ${simCommand()}` });
  const id = (await p1.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  await waitFor(async () => (await p1.instances.service.instances.get(id))!.agent_id !== null);
  assert.equal((await p1.instances.service.instances.get(id))!.state, 'pending');
  await p1.stop(); // mid-launch

  const p2 = await startPlatform(t, { agents: [agent.config], clock, settings, dir: p1.dir });
  const ready = await waitStatus(p2, me.key, 'ready');
  assert.equal(ready.instance_id, id);
  assert.equal(instanceGroups(agent.handle.agentId, id).length, 1);
  clock.advance(90 * 60_000);
  await p2.instances.service.tick();
  await p2.stop(); // mid-run

  clock.advance(30 * 60_000); // the instance ran on while no control plane was up
  const p3 = await startPlatform(t, { agents: [agent.config], clock, settings, dir: p1.dir });
  await waitFor(async () => (await p3.call('GET', '/api/notebook/status', { key: me.key })).body.status === 'ready');
  await p3.instances.service.tick();
  await p3.instances.service.tick();
  const usage = async () => (await p3.store.ledger.entries(me.id)).filter((e) => e.kind === 'instance_usage');
  assert.equal((await usage()).length, 120);
  assert.equal(new Set((await usage()).map((e) => e.idempotencyKey)).size, 120);
  assert.equal(await p3.store.ledger.balance(me.id), 98); // 2 hours at 1 credit per GPU-hour, nothing skipped, nothing twice
  assert.equal(instanceGroups(agent.handle.agentId, id).length, 1); // never restarted

  await p3.call('DELETE', '/api/notebook/current', { key: me.key });
  await waitStatus(p3, me.key, 'stopped');
  assert.equal(await p3.store.ledger.balance(me.id), 98);
  await waitFor(() => instanceGroups(agent.handle.agentId, id).length === 0);
});

test('a destroy the agent never heard of: finished by the restarted control plane', async (t) => {
  const agent = await startTestAgent(t);
  const p1 = await startPlatform(t, { agents: [agent.config] });
  const me = await p1.account('late@example.com');
  const id = (await p1.call('POST', `/api/templates/${(await p1.template(me.id)).id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  await waitStatus(p1, me.key, 'ready');
  await p1.stop();
  // The destroy was recorded (stopping) but the agent never heard of it: a restarted control plane finishes it.
  const store = await Store.open({ dataDir: p1.dir });
  await store.sql.prepare("UPDATE instances SET state = 'stopping', message = 'stopping', ended_at = ? WHERE id = ?").run(Date.now(), id);
  await store.close();
  const p2 = await startPlatform(t, { agents: [agent.config], dir: p1.dir });
  await waitStatus(p2, me.key, 'stopped');
  await waitFor(() => instanceGroups(agent.handle.agentId, id).length === 0);
  assert.equal(agent.handle.supervisor.list().length, 0);
});

test('agent killed: "host unreachable", then reconciled when it comes back', async (t) => {
  const dataDir = tempDir(t, 'rc-inst-agent-');
  const token = newToken();
  let a = await spawnAgent(t, dataDir, token);
  const port = Number(a.address.split(':').pop());
  const p = await startPlatform(t, {
    agents: [{ id: 'host-a', address: a.address, token }],
    settings: { instanceHostUnreachableMs: 300, instanceHostLostMs: 120_000 },
  });
  const me = await p.account('killed@example.com');
  const id = (await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  const ready = await waitStatus(p, me.key, 'ready');
  const portBefore = p.instances.route(id)!.port;
  assert.ok(portBefore);

  await killChild(a.child);
  const unreachable = await waitFor(async () => {
    const s = (await p.call('GET', '/api/notebook/status', { key: me.key })).body;
    return s.message === 'host unreachable' ? s : undefined;
  });
  assert.equal(unreachable.status, 'ready'); // the instance itself still runs
  assert.equal(instanceGroups(a.agentId, id).length, 1);

  a = await spawnAgent(t, dataDir, token, port); // same data dir: adopts the instance
  const back = await waitFor(async () => {
    const s = (await p.call('GET', '/api/notebook/status', { key: me.key })).body;
    return s.message === 'ready' ? s : undefined;
  }, 15_000);
  assert.equal(back.status, 'ready');
  assert.equal(back.instance_id, id);
  assert.deepEqual(back.ssh, ready.ssh);
  assert.equal(p.instances.route(id)!.port, portBefore); // adopted, not restarted

  await p.call('DELETE', '/api/notebook/current', { key: me.key });
  await waitStatus(p, me.key, 'stopped');
  await waitFor(() => instanceGroups(a.agentId, id).length === 0);
});

test('agent gone longer than instanceHostLostMs: failed host_lost; leftovers removed on return', async (t) => {
  const dataDir = tempDir(t, 'rc-inst-agent-');
  const token = newToken();
  let a = await spawnAgent(t, dataDir, token);
  const port = Number(a.address.split(':').pop());
  const p = await startPlatform(t, {
    agents: [{ id: 'host-a', address: a.address, token }],
    settings: { instanceHostUnreachableMs: 200, instanceHostLostMs: 800 },
  });
  const me = await p.account('lost@example.com', { credits: 10 });
  const tpl = await p.template(me.id);
  const id = (await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  await waitStatus(p, me.key, 'ready');
  await killChild(a.child);
  const failed = await waitStatus(p, me.key, 'failed');
  assert.equal(failed.reason, 'host_lost');
  assert.ok(failed.ended_at);
  // Billing stopped, and the account may launch again (it waits for capacity: no host answers).
  const relaunch = await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} });
  assert.equal(relaunch.body.message, 'waiting for capacity (position 1 in the queue)');

  a = await spawnAgent(t, dataDir, token, port);
  await waitFor(() => instanceGroups(a.agentId, id).length === 0, 15_000); // the lost instance is removed
  const next = await waitStatus(p, me.key, 'ready');
  assert.equal(next.instance_id, relaunch.body.instance_id);
});
