// Launch rules without a host: every error with SPEC's status and message, the order of the
// checks, the database-enforced single active instance under concurrent launches, launch rate
// windows with Retry-After, launch verification, the FIFO queue, the state table and the
// billing arithmetic.
import { isUniqueViolation } from '../../control-plane/sql.js';
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { accruedMicros, pendingCharges } from '../../control-plane/instances/billing.js';
import { allowedFrom, canTransition, STATES, TRANSITIONS } from '../../control-plane/instances/states.js';
import { adminToken } from '../../control-plane/secrets.js';
import { FakeClock } from '../../lib/clock.js';
import { startPlatform } from './harness.js';

test('launch errors: SPEC status and message for each rule', async (t) => {
  const p = await startPlatform(t);
  const me = await p.account('me@example.com', { credits: 3 });
  const tpl = await p.template(me.id);
  const launch = (body: unknown, key = me.key, id = tpl.id) => p.call('POST', `/api/templates/${id}/launch`, { key, body });

  // No credential, bad key.
  assert.equal((await p.call('POST', `/api/templates/${tpl.id}/launch`, { body: {} })).status, 401);
  assert.equal((await launch({}, 'rc-' + 'A'.repeat(43))).status, 401);

  // Unverified: 403 account_not_verified before anything else (even a bad gpu_count). The
  // unverified account has no key, so it signs in with a session.
  await p.account('new@example.com', { verified: false, password: 'password123' });
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'new@example.com', password: 'password123' } });
  assert.equal(login.status, 200);
  const cookie = String(login.headers['set-cookie']).split(';')[0]!;
  const unverified = await p.call('POST', `/api/templates/${tpl.id}/launch`, { cookie, csrf: login.body.csrf_token, body: { gpu_count: 3 } });
  assert.equal(unverified.status, 403);
  assert.equal(unverified.body.detail.code, 'account_not_verified');

  // Template: unknown, malformed, or someone else's private one: 404.
  assert.equal((await launch({}, me.key, 999_999)).status, 404);
  assert.equal((await p.call('POST', '/api/templates/abc/launch', { key: me.key, body: {} })).status, 404);
  const other = await p.account('other@example.com');
  const private_ = await p.template(other.id);
  assert.deepEqual((await launch({}, me.key, private_.id)).body, { detail: 'Template not found' });

  // gpu_count: anything but 1, 2, 4.
  for (const gpu_count of [0, 3, 8, -1, 1.5, '1', true, [1]]) {
    const r = await launch({ gpu_count });
    assert.equal(r.status, 400, `gpu_count ${JSON.stringify(gpu_count)}`);
    assert.deepEqual(r.body, { detail: 'GPU count must be 1, 2, or 4' });
  }
  // Unknown fields and non-object bodies.
  assert.equal((await launch({ gpus: 1 })).status, 400);
  assert.equal((await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, raw: '[1]' })).status, 400);
  assert.equal((await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, raw: '{"gpu_count":' })).status, 400);
  assert.equal((await launch({ launch_verification_token: 42 })).status, 400);

  // Image disabled after the template was made.
  const img = await p.store.images.add('Tmp', 'tmp/image:1');
  const tmp = await p.template(me.id, { image: img.image });
  await p.store.images.disable(img.image);
  assert.deepEqual((await launch({}, me.key, tmp.id)).body, { detail: 'Invalid image selected' });
  assert.equal((await launch({}, me.key, tmp.id)).status, 400);

  // Disk above the ceiling of the GPU count (150 GB needs 2 GPUs).
  const big = await p.template(me.id, { disk_gb: 150 });
  const disk = await launch({ gpu_count: 1 }, me.key, big.id);
  assert.equal(disk.status, 400);
  assert.match(disk.body.detail, /ceiling/);

  // Balance (3) below the GPU count (4).
  assert.deepEqual((await launch({ gpu_count: 4 })).body, { detail: 'Insufficient credits' });

  // Nothing above created an instance.
  assert.equal((await p.call('GET', '/api/notebook/status', { key: me.key })).status, 404);
  assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 404);

  // A launch works; a second is refused while the first is active.
  const ok = await launch({ gpu_count: 2 });
  assert.equal(ok.status, 200);
  assert.equal(ok.body.status, 'pending');
  assert.equal(ok.body.message, 'waiting for capacity (position 1 in the queue)', 'no host has reported yet: it waits');
  assert.equal(ok.body.gpu_count, 2);
  const again = await launch({});
  assert.equal(again.status, 400);
  assert.deepEqual(again.body, { detail: 'Each user can only have one active instance' });
  // No body at all is the defaults (every launch field is optional): refused the same way.
  const empty = await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, raw: '' });
  assert.deepEqual(empty.body, { detail: 'Each user can only have one active instance' });
  const viaRequest = await p.call('POST', '/api/notebook/request', { key: me.key, body: { template_id: tpl.id } });
  assert.deepEqual(viaRequest.body, { detail: 'Each user can only have one active instance' });
});

test('POST /api/notebook/request: body validation and the same status object', async (t) => {
  const p = await startPlatform(t);
  const me = await p.account('req@example.com');
  const tpl = await p.template(me.id, { instance_type: 'gradio', app_port: 7860, start_command: 'true' });
  const req = (body: unknown) => p.call('POST', '/api/notebook/request', { key: me.key, body });
  assert.equal((await req({})).status, 400);
  assert.match((await req({})).body.detail, /template_id/);
  assert.equal((await req({ template_id: 'x' })).status, 400);
  assert.equal((await req({ template_id: -1 })).status, 400);
  assert.equal((await req({ template_id: 123456 })).status, 404);
  assert.deepEqual((await req({ template_id: tpl.id, gpu_count: 3 })).body, { detail: 'GPU count must be 1, 2, or 4' });
  const r = await req({ template_id: tpl.id, gpu_count: 1 });
  assert.equal(r.status, 200);
  for (const k of [
    'instance_id',
    'status',
    'message',
    'reason',
    'detail',
    'template_id',
    'gpu_count',
    'created_at',
    'expires_at',
    'base_url',
    'ssh',
    'credits_spent',
    'credits_per_hour',
  ]) {
    assert.ok(k in r.body, `status object has ${k}`);
  }
  assert.equal(r.body.template_id, tpl.id);
  assert.equal(r.body.dedicated_base_url, null); // gradio is not a serving stack
  assert.match(r.body.base_url, new RegExp(`/api/instances/${r.body.instance_id}/open$`));
  const status = await p.call('GET', '/api/notebook/status', { key: me.key });
  assert.equal(status.body.instance_id, r.body.instance_id);

  // Destroying a queued instance: stopped at once, and a new launch is possible.
  const del = await p.call('DELETE', '/api/notebook/current', { key: me.key });
  assert.equal(del.status, 200);
  assert.equal(del.body.status, 'stopped');
  assert.equal(del.body.credits_spent, 0);
  const second = await req({ template_id: tpl.id });
  assert.equal(second.status, 200);
  assert.notEqual(second.body.instance_id, r.body.instance_id);
});

test('concurrent launches of one account: exactly one wins (database-enforced)', async (t) => {
  const p = await startPlatform(t);
  const me = await p.account('race@example.com');
  const tpl = await p.template(me.id);
  const results = await Promise.all(Array.from({ length: 8 }, () => p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })));
  assert.equal(results.filter((r) => r.status === 200).length, 1);
  for (const r of results.filter((x) => x.status !== 200)) assert.deepEqual(r.body, { detail: 'Each user can only have one active instance' });
  // And the index itself refuses a second active row, whatever the code does.
  const row = (await p.instances.service.instances.active(me.id))!;
  await assert.rejects(
    p.store.sql
      .prepare(
        "INSERT INTO instances (id, account_id, template, gpu_count, disk_gb, state, message, micros_per_hour, period_ms, created_at, updated_at) VALUES ('x', ?, '{}', 1, 100, 'ready', '', 1, 1, 0, 0)",
      )
      .run(row.account_id),
    (err: unknown) => isUniqueViolation(err),
  );
});

test('launch rate windows: 429 with Retry-After = the longest wait', async (t) => {
  const clock = new FakeClock(Date.UTC(2026, 0, 1));
  const p = await startPlatform(t, { clock, settings: { instanceLaunchRate: '60:1,600:3,3600:5' }, manual: true });
  const me = await p.account('rate@example.com', { credits: 1000 });
  const tpl = await p.template(me.id);
  const launchAndDestroy = async () => {
    const r = await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} });
    if (r.status === 200) assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 200);
    return r;
  };
  assert.equal((await launchAndDestroy()).status, 200); // t=0
  let r = await launchAndDestroy(); // t=0: the 1-per-minute window is full
  assert.equal(r.status, 429);
  assert.equal(r.headers['retry-after'], '60');
  assert.match(r.body.detail, /retry after 60 seconds/);
  clock.advance(59_000);
  assert.equal((await launchAndDestroy()).headers['retry-after'], '1');
  clock.advance(1_000); // t=60
  assert.equal((await launchAndDestroy()).status, 200);
  clock.advance(60_000); // t=120
  assert.equal((await launchAndDestroy()).status, 200);
  clock.advance(60_000); // t=180: 3 launches in 10 minutes; the oldest (t=0) leaves the window at t=600
  r = await launchAndDestroy();
  assert.equal(r.status, 429);
  assert.equal(r.headers['retry-after'], String(600 - 180));
  clock.set(Date.UTC(2026, 0, 1) + 600_000); // t=600
  assert.equal((await launchAndDestroy()).status, 200);
  clock.advance(600_000); // t=1200
  assert.equal((await launchAndDestroy()).status, 200); // 5 in the hour now: 0, 60, 120, 600, 1200
  clock.advance(600_000); // t=1800: the hour window (oldest at t=0) is full until t=3600; the 10-minute one is not
  r = await launchAndDestroy();
  assert.equal(r.status, 429);
  assert.equal(r.headers['retry-after'], String(3600 - 1800));
  // Refused launches do not count: once the wait is over, one launch passes.
  clock.set(Date.UTC(2026, 0, 1) + 3600_000);
  assert.equal((await launchAndDestroy()).status, 200);
});

test('launch verification: token required, single use, session-issued; operator switch', async (t) => {
  const p = await startPlatform(t);
  const me = await p.account('lv@example.com', { password: 'password123' });
  const tpl = await p.template(me.id);
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'lv@example.com', password: 'password123' } });
  const session = { cookie: String(login.headers['set-cookie']).split(';')[0]!, csrf: login.body.csrf_token as string };

  // Enable with the key; a key cannot turn it off, a session can.
  assert.deepEqual((await p.call('POST', '/api/profile/launch-verification', { key: me.key, body: { enabled: true } })).body, { launch_verification: true });
  assert.equal((await p.call('POST', '/api/profile/launch-verification', { key: me.key, body: { enabled: false } })).status, 403);
  assert.equal((await p.call('POST', '/api/profile/launch-verification', { key: me.key, body: { enabled: 'yes' } })).status, 400);

  const launch = (body: unknown) => p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body });
  const missing = await launch({});
  assert.equal(missing.status, 403);
  assert.match(missing.body.detail, /launch_verification_token/);
  assert.equal((await launch({ launch_verification_token: 'lvt_wrong' })).status, 403);

  // Tokens come only from a browser session.
  assert.equal((await p.call('POST', '/api/profile/launch-verification-token', { key: me.key, body: {} })).status, 403);
  const issued = await p.call('POST', '/api/profile/launch-verification-token', { ...session, body: {} });
  assert.equal(issued.status, 200);
  const token = issued.body.launch_verification_token as string;
  assert.match(token, /^lvt_/);

  // A refused launch (bad gpu_count) does not use the token up; a successful one does.
  assert.equal((await launch({ launch_verification_token: token, gpu_count: 3 })).status, 400);
  assert.equal((await launch({ launch_verification_token: token })).status, 200);
  await p.call('DELETE', '/api/notebook/current', { key: me.key });
  assert.deepEqual((await launch({ launch_verification_token: token })).body, { detail: 'Invalid or expired launch verification token' });

  // Another account's token is no good.
  const other = await p.account('lv2@example.com');
  const otherTpl = await p.template(other.id);
  await p.call('POST', '/api/profile/launch-verification', { key: other.key, body: { enabled: true } });
  const t2 = (await p.call('POST', '/api/profile/launch-verification-token', { ...session, body: {} })).body.launch_verification_token;
  assert.equal((await p.call('POST', `/api/templates/${otherTpl.id}/launch`, { key: other.key, body: { launch_verification_token: t2 } })).status, 403);

  // The operator: disable, enable and issue a token with the admin token.
  const admin = { 'x-rc-admin-token': adminToken(p.dir), 'content-type': 'application/json' };
  const { request } = await import('undici');
  const op = async (body: unknown) => {
    const r = await request(`${p.cp.url}/api/admin/instances/launch-verification`, { method: 'POST', headers: admin, body: JSON.stringify(body) });
    return { status: r.statusCode, body: (await r.body.json()) as Record<string, unknown> };
  };
  assert.equal((await op({ email: 'nobody@example.com', enabled: true })).status, 404);
  const byOperator = await op({ email: 'lv2@example.com', issue_token: true });
  assert.equal(byOperator.body.launch_verification, true);
  assert.equal(
    (
      await p.call('POST', `/api/templates/${otherTpl.id}/launch`, {
        key: other.key,
        body: { launch_verification_token: byOperator.body.launch_verification_token },
      })
    ).status,
    200,
  );
  assert.equal((await op({ email: 'lv@example.com', enabled: false })).body.launch_verification, false);
  assert.equal((await launch({})).status, 200);
  const noAdmin = await request(`${p.cp.url}/api/admin/instances/launch-verification`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{"email":"lv@example.com"}',
  });
  assert.equal(noAdmin.statusCode, 401);
  await noAdmin.body.dump();
});

test('no host: pending "waiting for capacity", first come first served', async (t) => {
  const p = await startPlatform(t);
  const a = await p.account('a@example.com');
  const b = await p.account('b@example.com');
  const ra = await p.call('POST', `/api/templates/${(await p.template(a.id)).id}/launch`, { key: a.key, body: {} });
  const rb = await p.call('POST', `/api/templates/${(await p.template(b.id)).id}/launch`, { key: b.key, body: {} });
  assert.equal(ra.body.message, 'waiting for capacity (position 1 in the queue)');
  assert.equal(rb.body.message, 'waiting for capacity (position 2 in the queue)');
  assert.deepEqual(
    (await p.instances.service.instances.queue()).map((r) => r.id),
    [ra.body.instance_id, rb.body.instance_id],
  );
  assert.equal(ra.body.host, null);
  assert.equal(p.instances.route(ra.body.instance_id)?.status, 'pending');
  assert.ok(p.events.some((e) => e.type === 'instance.changed' && e.instanceId === ra.body.instance_id));
});

test('state table: only the documented transitions', () => {
  assert.deepEqual(TRANSITIONS, {
    pending: ['ready', 'failed', 'stopping'],
    ready: ['failed', 'stopping'],
    stopping: ['stopped'],
    stopped: [],
    failed: [],
  });
  for (const from of STATES) for (const to of STATES) assert.equal(canTransition(from, to), TRANSITIONS[from].includes(to), `${from} -> ${to}`);
  assert.deepEqual(allowedFrom('ready'), ['pending']);
  assert.deepEqual(allowedFrom('stopped'), ['stopping']);
  assert.deepEqual(allowedFrom('pending'), []);
});

test('state changes in the database refuse undocumented transitions', async (t) => {
  const p = await startPlatform(t);
  const me = await p.account('st@example.com');
  const r = await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: {} });
  const s = p.instances.service.instances;
  const id = r.body.instance_id as string;
  assert.equal(await s.transition(id, 'stopped', 'x', 0), undefined); // pending -> stopped: no
  assert.ok(await s.transition(id, 'ready', 'ready', 0));
  assert.equal(await s.transition(id, 'pending', 'x', 0), undefined); // ready -> pending: no
  assert.ok(await s.transition(id, 'stopping', 'stopping', 0));
  assert.equal(await s.transition(id, 'ready', 'x', 0), undefined);
  assert.equal(await s.transition(id, 'failed', 'x', 0), undefined);
  assert.ok(await s.transition(id, 'stopped', 'stopped', 0));
  assert.equal(await s.transition(id, 'stopped', 'again', 0), undefined); // terminal
  assert.equal((await s.get(id))!.message, 'stopped');
});

test('billing arithmetic: per second, periods add up exactly, final partial period', () => {
  const perHour = 2_000_000; // 2 GPUs at 1 credit per GPU-hour
  assert.equal(accruedMicros(perHour, 0), 0);
  assert.equal(accruedMicros(perHour, 1), Math.round(perHour / 3600)); // a started second counts
  assert.equal(accruedMicros(perHour, 3_600_000), perHour);
  const b = { placedAt: 1000, periodMs: 60_000, microsPerHour: perHour, billedPeriods: 0 };
  const hour = pendingCharges(b, 1000 + 3_600_000, false);
  assert.equal(hour.billedPeriods, 60);
  assert.equal(
    hour.charges.reduce((n, c) => n + c.micros, 0),
    perHour,
  );
  assert.deepEqual(
    hour.charges.map((c) => c.period),
    Array.from({ length: 60 }, (_, i) => i),
  );
  // Nothing complete yet: nothing written, unless final.
  assert.deepEqual(pendingCharges(b, 1000 + 59_999, false), { charges: [], billedPeriods: 0 });
  const final = pendingCharges({ ...b, billedPeriods: 60 }, 1000 + 3_600_000 + 30_500, true);
  assert.deepEqual(final, { charges: [{ period: 60, micros: accruedMicros(perHour, 3_631_000) - perHour }], billedPeriods: 61 });
  // Resuming from a count never repeats a period.
  const rest = pendingCharges({ ...b, billedPeriods: 30 }, 1000 + 3_600_000, false);
  assert.equal(rest.charges[0]!.period, 30);
  assert.equal(rest.charges.length, 30);
});
