// The console's live API: logs and status as server-sent events (real agent + processes), the
// live balance of GET /api/me (the same figure that stops an instance at zero) and the ledger's
// pages.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../../lib/clock.js';
import { simCommand, startPlatform, startTestAgent, waitStatus } from './harness.js';
import { openSse, type SseEvent } from './sse.js';

const HOUR = 3_600_000;
const isStatus = (pred: (s: any) => boolean) => (e: SseEvent) => e.event === 'status' && pred(JSON.parse(e.data)); // eslint-disable-line @typescript-eslint/no-explicit-any

test('logs: the tail, following until the instance ends, then the saved tail; bad input is 400', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const me = await p.account('logs@example.com');
  const url = (q: string) => `${p.cp.url}/api/notebook/logs${q}`;

  assert.deepEqual((await p.call('GET', '/api/notebook/logs', { key: me.key })).body, { detail: 'No instance' });
  assert.equal((await p.call('GET', '/api/notebook/logs')).status, 401);
  for (const [q, detail] of [
    ['?tail=5000', 'tail: tail must be at most 1000'],
    ['?tail=-1', 'tail: tail must be a whole number'],
    ['?follow=yes', 'follow: follow must be 1 or 0'],
  ]) {
    const r = await p.call('GET', `/api/notebook/logs${q}`, { key: me.key });
    assert.equal(r.status, 400, q);
    assert.deepEqual(r.body, { detail }, q);
  }

  const tpl = await p.template(me.id, { start_command: `echo first-line; echo second-line; ${simCommand()}` });
  const id = (await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  await waitStatus(p, me.key, 'ready');

  // Without follow: the tail, then `end` with the current status.
  const tail = await openSse(url('?tail=1000'), me.key);
  assert.equal(tail.status, 200);
  assert.match(String(tail.headers['content-type']), /^text\/event-stream/);
  await tail.ended;
  const lines = tail.events.filter((e) => e.event === 'log').map((e) => e.data);
  assert.deepEqual(lines.slice(0, 2), ['first-line', 'second-line']);
  assert.deepEqual(tail.events.at(-1), { event: 'end', data: '{"status":"ready","reason":null}' });
  const one = await openSse(url('?tail=1'), me.key);
  await one.ended;
  assert.equal(one.events.filter((e) => e.event === 'log').length, 1);

  // Following: open until the instance ends.
  const follow = await openSse(url('?tail=0&follow=1'), me.key);
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 200);
  await follow.ended;
  assert.equal(follow.events.at(-1)?.event, 'end');
  await waitStatus(p, me.key, 'stopped');

  // The host removed it (its logs with it): the saved tail is served.
  assert.equal(
    agent.handle.supervisor.list().some((i) => i.instanceId === id),
    false,
  );
  const after = await openSse(url('?tail=1000'), me.key);
  await after.ended;
  assert.deepEqual(
    after.events
      .filter((e) => e.event === 'log')
      .slice(0, 2)
      .map((e) => e.data),
    ['first-line', 'second-line'],
  );
  assert.deepEqual(after.events.at(-1), { event: 'end', data: '{"status":"stopped","reason":null}' });
});

test('events: the status object on every change, with the queue position while waiting for capacity', async (t) => {
  const agent = await startTestAgent(t, { gpus: 1 });
  const p = await startPlatform(t, { agents: [agent.config] });
  const a = await p.account('first@example.com');
  const b = await p.account('second@example.com');

  const ea = await openSse(`${p.cp.url}/api/notebook/events`, a.key);
  t.after(() => ea.close());
  assert.equal(ea.status, 200);
  assert.deepEqual(await ea.next(() => true), { event: 'status', data: 'null' }); // never launched
  await p.call('POST', `/api/templates/${(await p.template(a.id)).id}/launch`, { key: a.key, body: {} });
  await ea.next(isStatus((s) => s.status === 'pending' && s.queue_position === null));
  const ready = JSON.parse((await ea.next(isStatus((s) => s.status === 'ready'))).data);
  assert.equal(ready.base_url.endsWith(`/api/instances/${ready.instance_id}/open`), true);

  // The only GPU is taken: b waits first in line.
  await p.call('POST', `/api/templates/${(await p.template(b.id)).id}/launch`, { key: b.key, body: {} });
  const eb = await openSse(`${p.cp.url}/api/notebook/events`, b.key);
  t.after(() => eb.close());
  const queued = JSON.parse((await eb.next(() => true)).data);
  assert.equal(queued.status, 'pending');
  assert.equal(queued.queue_position, 1);
  assert.equal(queued.message, 'waiting for capacity (position 1 in the queue)');
  // a's stream hears nothing of b.
  assert.equal(
    ea.events.some((e) => e.data.includes(queued.instance_id)),
    false,
  );

  await p.call('DELETE', '/api/notebook/current', { key: a.key });
  await ea.next(isStatus((s) => s.status === 'stopped'));
  const placed = JSON.parse((await eb.next(isStatus((s) => s.queue_position === null))).data);
  assert.equal(placed.status === 'pending' || placed.status === 'ready', true);
  await eb.next(isStatus((s) => s.status === 'ready'));
  await p.call('DELETE', '/api/notebook/current', { key: b.key });
  await eb.next(isStatus((s) => s.status === 'stopped'));
  assert.equal((await p.call('GET', '/api/notebook/events')).status, 401);
});

test('GET /api/me credits is live: the ledger minus unwritten usage, and the same figure stops the instance at zero', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  // One period per 2 hours: nothing reaches the ledger before the balance runs out.
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: { instanceTickMs: 24 * HOUR, instanceBillingPeriodSec: 7200, instanceIdleTimeoutSec: 86_400 },
  });
  const me = await p.account('live@example.com', { credits: 1 });
  const credits = async () => (await p.call('GET', '/api/me', { key: me.key })).body.credits as number;
  await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: {} });
  await waitStatus(p, me.key, 'ready');

  clock.advance(1800_000);
  await p.instances.service.tick();
  assert.equal(await p.store.ledger.balance(me.id), 1); // nothing written yet
  assert.equal(await credits(), 0.5); // 1 credit per GPU-hour, half an hour
  const session = (await p.call('GET', '/api/auth/session', { key: me.key })).body;
  assert.equal(session.account.credits, 0.5);

  clock.advance(1799_000);
  await p.instances.service.tick();
  assert.equal(await p.store.ledger.balance(me.id), 1);
  assert.equal(await credits(), Math.round(1e6 / 3600) / 1e6); // one second left
  assert.equal((await p.instances.service.instances.active(me.id))?.state, 'ready');

  clock.advance(1000);
  assert.equal(await credits(), 0);
  await p.instances.service.tick();
  const s = await waitStatus(p, me.key, 'stopped');
  assert.equal(s.reason, 'insufficient_credits');
  assert.equal(await p.store.ledger.balance(me.id), 0);
  assert.equal(await credits(), 0);
});

test("GET /api/credits/ledger: newest first, pages with before, only the caller's entries", async (t) => {
  const p = await startPlatform(t);
  const me = await p.account('ledger@example.com', { credits: 1 });
  const other = await p.account('other@example.com', { credits: 7 });
  for (let i = 1; i <= 4; i++) await p.store.ledger.append({ accountId: me.id, kind: 'grant', credits: i, idempotencyKey: `grant:test:${i}`, ref: `r${i}` });

  const first = await p.call('GET', '/api/credits/ledger?limit=2', { key: me.key });
  assert.equal(first.status, 200);
  assert.deepEqual(
    first.body.entries.map((e: { credits: number }) => e.credits),
    [4, 3],
  );
  assert.deepEqual(Object.keys(first.body.entries[0]).sort(), ['created_at', 'credits', 'id', 'kind', 'ref']);
  assert.equal(first.body.entries[0].ref, 'r4');
  const second = await p.call('GET', `/api/credits/ledger?limit=2&before=${first.body.next_before}`, { key: me.key });
  assert.deepEqual(
    second.body.entries.map((e: { credits: number }) => e.credits),
    [2, 1],
  );
  const last = await p.call('GET', `/api/credits/ledger?limit=2&before=${second.body.next_before}`, { key: me.key });
  assert.deepEqual(
    last.body.entries.map((e: { credits: number }) => e.credits),
    [1],
  ); // the sign-up grant
  assert.equal(last.body.next_before, null);
  const all = await p.call('GET', '/api/credits/ledger', { key: me.key });
  assert.equal(all.body.entries.length, 5);
  assert.equal(all.body.next_before, null);
  assert.deepEqual(
    (await p.call('GET', '/api/credits/ledger', { key: other.key })).body.entries.map((e: { credits: number }) => e.credits),
    [7],
  );

  for (const [q, detail] of [
    ['?limit=0', 'limit: limit must be at least 1'],
    ['?limit=201', 'limit: limit must be at most 200'],
    ['?limit=1.5', 'limit: limit must be a whole number'],
    ['?before=x', 'before: before must be a whole number'],
    ['?before=0', 'before: before must be at least 1'],
  ]) {
    assert.deepEqual((await p.call('GET', `/api/credits/ledger${q}`, { key: me.key })).body, { detail }, q);
  }
  assert.equal((await p.call('GET', '/api/credits/ledger')).status, 401);
});
