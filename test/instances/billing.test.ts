// Billing at the configured rate, lifetime, idle timeout and a balance reaching zero, with a
// fake clock (the tick is called directly; its timer is set far out) and a real agent + sim.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../../lib/clock.js';
import { waitFor } from '../helpers.js';
import { instanceGroups, startPlatform, startTestAgent, waitStatus } from './harness.js';

const HOUR = 3_600_000;
const manualTick = { instanceTickMs: 24 * HOUR };

test('billing: rate x GPUs, per period with idempotency keys, stops at destroy', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: { ...manualTick, instanceCreditsPerGpuHour: 3, instanceBillingPeriodSec: 60, instanceIdleTimeoutSec: 86_400 },
  });
  const me = await p.account('bill@example.com', { credits: 100 });
  const r = await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: 2 } });
  assert.equal(r.body.credits_per_hour, 6);
  const id = r.body.instance_id as string;
  await waitStatus(p, me.key, 'ready');

  clock.advance(2 * HOUR + 30_500); // 2 h, 30.5 s
  await p.instances.service.tick();
  await p.instances.service.tick(); // a repeated tick writes nothing more
  const usage = async () => (await p.store.ledger.entries(me.id)).filter((e) => e.kind === 'instance_usage');
  assert.equal((await usage()).length, 120); // complete periods only
  assert.equal(await p.store.ledger.balance(me.id), 100 - 12);
  const status = (await p.call('GET', '/api/notebook/status', { key: me.key })).body;
  assert.equal(status.credits_spent, Math.round((6_000_000 * 7231) / 3600) / 1e6); // accrued per second, 7231 s started

  const del = await p.call('DELETE', '/api/notebook/current', { key: me.key });
  assert.equal(del.status, 200);
  const total = Math.round((6_000_000 * 7231) / 3600) / 1e6;
  assert.equal((await usage()).length, 121); // the final partial period
  assert.ok(Math.abs((await p.store.ledger.balance(me.id)) - (100 - total)) < 1e-9);
  assert.equal(new Set((await usage()).map((e) => e.idempotencyKey)).size, 121);
  assert.equal((await usage())[120]!.idempotencyKey, `usage:${id}:120`);
  assert.ok((await usage()).every((e) => e.ref === id));

  // Time after the destroy costs nothing.
  clock.advance(5 * HOUR);
  await p.instances.service.tick();
  assert.equal((await usage()).length, 121);
  const after = (await p.call('GET', '/api/notebook/status', { key: me.key })).body;
  assert.equal(after.credits_spent, total);
});

test('lifetime, idle timeout and an exhausted balance destroy the instance with a reason', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: { ...manualTick, instanceMaxLifetimeSec: 3 * 3600, instanceIdleTimeoutSec: 600 },
  });
  const svc = p.instances.service;
  const me = await p.account('life@example.com', { credits: 100 });
  const tpl = await p.template(me.id);
  const launch = async () => (await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).body.instance_id as string;

  // Idle: activity within the timeout keeps it; 600 s without any ends it.
  let id = await launch();
  await waitStatus(p, me.key, 'ready');
  for (let i = 0; i < 4; i++) {
    clock.advance(500_000);
    p.instances.recordActivity(id);
    await svc.tick();
    assert.equal((await svc.instances.get(id))!.state, 'ready');
  }
  clock.advance(599_000);
  await svc.tick();
  assert.equal((await svc.instances.get(id))!.state, 'ready');
  clock.advance(1_000);
  await svc.tick();
  let s = await waitStatus(p, me.key, 'stopped');
  assert.equal(s.reason, 'idle_timeout');
  await waitFor(() => instanceGroups(agent.handle.agentId, id).length === 0);

  // Lifetime: activity does not extend it.
  id = await launch();
  await waitStatus(p, me.key, 'ready');
  for (let i = 0; i < 3 * 6 - 1; i++) {
    clock.advance(HOUR / 6);
    p.instances.recordActivity(id);
    await svc.tick();
  }
  assert.equal((await svc.instances.get(id))!.state, 'ready');
  clock.advance(HOUR / 6);
  await svc.tick();
  s = await waitStatus(p, me.key, 'stopped');
  assert.equal(s.reason, 'lifetime_exceeded');
  assert.match(s.detail, /10800 s/);

  // Balance: 2 credits at 1 credit per GPU-hour last 2 hours.
  const poor = await p.account('poor@example.com', { credits: 2 });
  const pid = (await p.call('POST', `/api/templates/${(await p.template(poor.id)).id}/launch`, { key: poor.key, body: {} })).body.instance_id as string;
  await waitStatus(p, poor.key, 'ready');
  clock.advance(HOUR + 59 * 60_000);
  p.instances.recordActivity(pid);
  await svc.tick();
  assert.equal((await svc.instances.get(pid))!.state, 'ready');
  clock.advance(60_000);
  p.instances.recordActivity(pid);
  await svc.tick();
  s = await waitStatus(p, poor.key, 'stopped');
  assert.equal(s.reason, 'insufficient_credits');
  assert.ok(Math.abs(await p.store.ledger.balance(poor.id)) < 1e-9);
  // And it cannot launch again.
  assert.deepEqual((await p.call('POST', `/api/templates/${(await p.template(poor.id)).id}/launch`, { key: poor.key, body: {} })).body, {
    detail: 'Insufficient credits',
  });
});

test('billing runs from ready: a launch that never became ready costs nothing, start-up time is free', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: { ...manualTick, instanceCreditsPerGpuHour: 1, instanceBillingPeriodSec: 60, instanceIdleTimeoutSec: 86_400 },
  });
  const me = await p.account('never-ready@example.com', { credits: 100 });
  const usage = async () => (await p.store.ledger.entries(me.id)).filter((e) => e.kind === 'instance_usage');

  // Pending for an hour (by the control plane's clock), then the start fails: nothing is charged.
  const failing = await p.template(me.id, { instance_type: 'custom', app_port: 7860, start_command: 'sleep 1; echo broken; exit 3' });
  await p.call('POST', `/api/templates/${failing.id}/launch`, { key: me.key, body: {} });
  clock.advance(HOUR);
  await p.instances.service.tick();
  const failed = await waitStatus(p, me.key, 'failed');
  assert.equal(failed.credits_spent, 0);
  assert.equal((await usage()).length, 0);
  assert.equal(await p.store.ledger.balance(me.id), 100);

  // Destroyed while pending: nothing either.
  const slow = await p.template(me.id, { instance_type: 'custom', app_port: 7860, start_command: 'exec sleep 60' });
  await p.call('POST', `/api/templates/${slow.id}/launch`, { key: me.key, body: {} });
  clock.advance(HOUR);
  await p.instances.service.tick();
  assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 200);
  assert.equal((await usage()).length, 0);
  assert.equal(await p.store.ledger.balance(me.id), 100);

  // Half an hour pending, then ready, then an hour: exactly one hour is charged.
  await waitFor(async () => (await p.call('GET', '/api/notebook/status', { key: me.key })).body.status === 'stopped');
  await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: {} });
  clock.advance(HOUR / 2);
  await p.instances.service.tick();
  assert.equal((await usage()).length, 0);
  await waitStatus(p, me.key, 'ready');
  clock.advance(HOUR);
  await p.instances.service.tick();
  assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 200);
  assert.ok(Math.abs((await p.store.ledger.balance(me.id)) - 99) < 1e-9, `balance ${await p.store.ledger.balance(me.id)}`);
});
