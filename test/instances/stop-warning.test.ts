// Before the platform stops an instance for idleness or its lifetime, the owner is warned (issue
// 41): the status object's stop_warning (reason, when, seconds left) within
// RC_INSTANCE_STOP_WARNING_SEC, announced to the status streams by an instance.changed event when it
// begins and when activity clears it; an ended instance says who or what stopped it (stopped_by).
// A real agent and sim, a fake clock (the tick is called directly).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../../lib/clock.js';
import { startPlatform, startTestAgent, waitStatus } from './harness.js';

const HOUR = 3_600_000;

test('a stop warning before the idle and lifetime stops, cleared by activity; stopped_by says why it ended', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: { instanceTickMs: 24 * HOUR, instanceIdleTimeoutSec: 600, instanceStopWarningSec: 120, instanceMaxLifetimeSec: 3600 },
  });
  const svc = p.instances.service;
  const me = await p.account('warned@example.com', { credits: 100 });
  const tpl = await p.template(me.id);
  const launch = async () => (await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  const status = async () => (await p.call('GET', '/api/notebook/status', { key: me.key })).body;
  const changes = (id: string) => p.events.filter((e) => e.type === 'instance.changed' && e.instanceId === id).length;

  let id = await launch();
  await waitStatus(p, me.key, 'ready');
  assert.equal((await status()).stop_warning, null);
  assert.equal((await status()).stopped_by, null);

  // 130 s before the idle stop: no warning yet; 110 s before: warned, and the streams told once.
  clock.advance(470_000);
  await svc.tick();
  assert.equal((await status()).stop_warning, null);
  let before = changes(id);
  clock.advance(20_000);
  await svc.tick();
  assert.deepEqual((await status()).stop_warning, { reason: 'idle', stops_at: new Date(clock.now() + 110_000).toISOString(), seconds_left: 110 });
  assert.equal(changes(id), before + 1, 'the warning is announced');
  await svc.tick();
  assert.equal(changes(id), before + 1, 'once');

  // Activity clears it (announced again).
  before = changes(id);
  p.instances.recordActivity(id);
  await svc.tick();
  assert.equal((await status()).stop_warning, null);
  assert.equal(changes(id), before + 1);

  // The lifetime comes before the idle timeout when the instance stays busy: warned as lifetime.
  for (const step of [490_000, 490_000, 490_000, 490_000, 490_000, 490_000, 80_000]) {
    clock.advance(step); // to about 3,510 s after placement: 90 s of its 3,600 left
    p.instances.recordActivity(id);
    await svc.tick();
  }
  const near = await status();
  assert.equal(near.status, 'ready');
  assert.equal(near.stop_warning?.reason, 'lifetime', JSON.stringify(near));
  assert.ok(near.stop_warning.seconds_left <= 120);
  clock.advance(near.stop_warning.seconds_left * 1000);
  await svc.tick();
  const ended = await waitStatus(p, me.key, 'stopped');
  assert.equal(ended.reason, 'lifetime_exceeded');
  assert.equal(ended.stopped_by, 'lifetime');
  assert.equal(ended.stop_warning, null);

  // Idle all the way: stopped_by idle. The owner's destroy: owner.
  id = await launch();
  await waitStatus(p, me.key, 'ready');
  clock.advance(600_000);
  await svc.tick();
  assert.equal((await waitStatus(p, me.key, 'stopped')).stopped_by, 'idle');
  id = await launch();
  await waitStatus(p, me.key, 'ready');
  assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 200);
  assert.equal((await waitStatus(p, me.key, 'stopped')).stopped_by, 'owner');
  assert.ok(id);
});

test('RC_INSTANCE_STOP_WARNING_SEC=0: no warning at all', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: { instanceTickMs: 24 * HOUR, instanceIdleTimeoutSec: 600, instanceStopWarningSec: 0 },
  });
  const me = await p.account('quiet@example.com', { credits: 100 });
  await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: {} });
  await waitStatus(p, me.key, 'ready');
  clock.advance(599_000);
  await p.instances.service.tick();
  assert.equal((await p.call('GET', '/api/notebook/status', { key: me.key })).body.stop_warning, null);
});
