// The operator API (issue 32): every route of /api/operator/ refuses no credential (401), API keys
// and non-operator sessions (403); operators act with their session and CSRF token; every action is
// in the audit log (the operator's e-mail, or the admin token for the CLI's route); review,
// rejection (disabled, sessions ended, no sign-in), coupon redemption closed (503), bad input 4xx.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { sessionCookieOf, startPlatform, type Platform } from './platform.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const PASSWORD = 'operator password';

async function signIn(p: Platform, email: string): Promise<{ cookie: string; csrf: string; operator: boolean }> {
  const r = await p.call('POST', '/api/auth/login', { body: { email, password: PASSWORD } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { cookie: sessionCookieOf(r), csrf: r.body.csrf_token, operator: r.body.operator };
}

/** The operator routes, from the OpenAPI document (itself generated from the route table). */
async function operatorRoutes(p: Platform): Promise<{ method: string; path: string }[]> {
  const doc = (await p.call('GET', '/api/openapi.json')).body as { paths: Record<string, Record<string, unknown>> };
  return Object.entries(doc.paths)
    .filter(([path]) => path.startsWith('/api/operator/'))
    .flatMap(([path, ops]) =>
      Object.keys(ops).map((method) => ({ method: method.toUpperCase(), path: path.replace('{id}', '1').replace('{op}', 'account.list') })),
    );
}

test('operator routes: 401 without a credential, 403 for keys and non-operators, operators get them', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  const tenant = await p.account('tenant@x.io', { verified: true, password: PASSWORD });
  const op = await p.account('op@x.io', { verified: true, operator: true, password: PASSWORD });
  const tenantSession = await signIn(p, 'tenant@x.io');
  const opSession = await signIn(p, 'op@x.io');
  assert.equal(tenantSession.operator, false);
  assert.equal(opSession.operator, true);
  const routes = await operatorRoutes(p);
  assert.ok(routes.length >= 11, `operator routes: ${routes.map((r) => r.path).join(', ')}`);
  for (const { method, path } of routes) {
    const body = method === 'GET' ? undefined : {};
    const none = await p.call(method, path, { body });
    assert.equal(none.status, 401, `${method} ${path} without a credential`);
    assert.equal(typeof none.body.detail, 'string');
    for (const key of [tenant.api_token!, op.api_token!]) {
      const r = await p.call(method, path, { body, key });
      assert.equal(r.status, 403, `${method} ${path} with a key`);
      assert.match(r.body.detail, /browser session/);
    }
    const r = await p.call(method, path, { body, cookie: tenantSession.cookie, csrf: tenantSession.csrf });
    assert.equal(r.status, 403, `${method} ${path} as a tenant`);
    assert.equal(r.body.detail, 'Operator access only');
    if (path === '/api/operator/events') continue; // a stream: read below
    const ok = await p.call(method, path, { body, cookie: opSession.cookie, csrf: opSession.csrf });
    assert.ok(ok.status === 200 || (path.endsWith('/1') && ok.status === 200), `${method} ${path} as an operator: ${ok.status} ${JSON.stringify(ok.body)}`);
  }
  // Writes need the CSRF token like every session write.
  const noCsrf = await p.call('POST', '/api/operator/account.verify', { body: { email: 'tenant@x.io' }, cookie: opSession.cookie });
  assert.equal(noCsrf.status, 403);
  assert.equal(noCsrf.body.detail.startsWith('Missing or invalid CSRF token'), true);
});

test('operator: review queue, verify, reject (disabled, sessions end), audit log with who, what, target', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('op@x.io', { verified: true, operator: true, password: PASSWORD });
  const op = await signIn(p, 'op@x.io');
  const as = (method: string, path: string, body?: unknown) => p.call(method, path, { body, cookie: op.cookie, csrf: op.csrf });
  for (const email of ['first@x.io', 'second@x.io', 'third@x.io']) {
    assert.equal((await p.call('POST', '/api/auth/signup', { body: { email, password: PASSWORD } })).status, 201);
  }
  const third = await signIn(p, 'third@x.io');
  const queue = (await as('GET', '/api/operator/review')).body.accounts as { email: string; email_verified: boolean | null; created_at: string }[];
  assert.deepEqual(
    queue.map((a) => a.email),
    ['third@x.io', 'second@x.io', 'first@x.io'],
  );
  assert.equal(queue[0]!.email_verified, null, 'with RC_EMAIL_VERIFICATION off nobody was asked to confirm');

  const verified = await as('POST', '/api/operator/account.verify', { email: 'first@x.io' });
  assert.equal(verified.status, 200);
  assert.equal(verified.body.verified, true);
  assert.match(verified.body.api_token, /^rc-/);
  const rejected = await as('POST', '/api/operator/account.reject', { email: 'third@x.io' });
  assert.equal(rejected.status, 200);
  assert.equal(rejected.body.disabled, true);
  assert.deepEqual(
    (await as('GET', '/api/operator/review')).body.accounts.map((a: { email: string }) => a.email),
    ['second@x.io'],
  );
  // The rejected account's session ended at once; it cannot sign in again.
  assert.equal((await p.call('GET', '/api/me', { cookie: third.cookie })).status, 401);
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'third@x.io', password: PASSWORD } });
  assert.equal(login.status, 403);
  assert.match(login.body.detail, /disabled/);
  assert.ok(p.events.some((e) => e.type === 'session.ended'));
  // Rejecting a verified account is a conflict (disable it instead).
  assert.equal((await as('POST', '/api/operator/account.reject', { email: 'first@x.io' })).status, 409);

  // Through the admin token (the CLI's route): audited as the admin token.
  const adminToken = readFileSync(join(p.dir, 'admin.token'), 'utf8').trim();
  const viaToken = await p.call('POST', '/api/admin/account.grant-credits', {
    body: { email: 'first@x.io', credits: 3, reason: 'welcome' },
    headers: { 'x-rc-admin-token': adminToken },
  });
  assert.equal(viaToken.status, 200);

  const audit = (await as('GET', '/api/operator/audit?limit=10')).body;
  const rows = audit.entries.map((e: { actor: string; action: string; target: string }) => [e.actor, e.action, e.target]);
  assert.deepEqual(rows.slice(0, 3), [
    ['admin-token', 'account.grant-credits', 'first@x.io'],
    ['op@x.io', 'account.reject', 'third@x.io'],
    ['op@x.io', 'account.verify', 'first@x.io'],
  ]);
  assert.equal(audit.entries[0].detail.reason, 'welcome');
  assert.ok(!Number.isNaN(Date.parse(audit.entries[0].at)));
  // A refused action is not recorded; listing is not an action.
  await as('POST', '/api/operator/account.list', {});
  assert.equal((await as('GET', '/api/operator/audit')).body.entries.length, audit.entries.length);
  assert.equal((await as('GET', '/api/operator/audit?limit=0')).status, 400);
  assert.equal((await as('GET', '/api/operator/audit?before=x')).status, 400);
});

test('operator: accounts, ledger, coupons and redemption closed, catalogs, usage, bad input', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('op@x.io', { verified: true, operator: true, password: PASSWORD });
  const tenant = await p.account('tenant@x.io', { verified: true, password: PASSWORD, credits: 2 });
  const op = await signIn(p, 'op@x.io');
  const as = (method: string, path: string, body?: unknown) => p.call(method, path, { body, cookie: op.cookie, csrf: op.csrf });

  const found = (await as('GET', '/api/operator/accounts?q=TENANT')).body.accounts;
  assert.deepEqual(
    found.map((a: { email: string }) => a.email),
    ['tenant@x.io'],
  );
  assert.equal((await as('GET', '/api/operator/accounts?q=%25')).body.accounts.length, 0); // % matches itself
  await as('POST', '/api/operator/account.grant-credits', { email: 'tenant@x.io', credits: 5, reason: 'support ticket 7' });
  const detail = (await as('GET', `/api/operator/accounts/${tenant.id}`)).body;
  assert.equal(detail.account.credits, 7);
  assert.equal(detail.ledger[0].ref, 'support ticket 7');
  assert.equal(detail.account.is_operator, false);
  assert.equal(detail.usage_today, null); // no gates wired here
  assert.equal((await as('GET', '/api/operator/accounts/999')).status, 404);
  assert.equal((await as('GET', '/api/operator/accounts/x')).status, 404);
  const limits = await as('POST', '/api/operator/account.set-limits', { email: 'tenant@x.io', rpm: 5 });
  assert.equal(limits.body.limits.rpm, 5);
  const rotated = await as('POST', '/api/operator/account.rotate-key', { email: 'tenant@x.io' });
  assert.equal(rotated.status, 200);
  assert.equal((await p.call('GET', '/api/me', { key: tenant.api_token! })).status, 401);
  await as('POST', '/api/operator/account.revoke-key', { email: 'tenant@x.io' });
  assert.equal((await as('GET', `/api/operator/accounts/${tenant.id}`)).body.account.has_api_token, false);

  // Coupons: created for an account, listed with their redeemed state; redemption closed is SPEC's 503.
  const coupon = (await as('POST', '/api/operator/coupon.create', { credits: 4, email: 'tenant@x.io' })).body;
  const tenantSession = await signIn(p, 'tenant@x.io');
  assert.equal((await as('POST', '/api/operator/coupon.redemption', { open: false })).body.coupon_redemption, 'closed');
  const closed = await p.call('POST', '/api/credits/redeem', { body: { coupon: coupon.code }, cookie: tenantSession.cookie, csrf: tenantSession.csrf });
  assert.equal(closed.status, 503);
  assert.ok(closed.headers['retry-after']);
  await as('POST', '/api/operator/coupon.redemption', { open: true });
  assert.equal(
    (await p.call('POST', '/api/credits/redeem', { body: { coupon: coupon.code }, cookie: tenantSession.cookie, csrf: tenantSession.csrf })).status,
    200,
  );
  const coupons = (await as('GET', '/api/operator/coupons')).body;
  assert.equal(coupons.coupon_redemption, 'open');
  assert.equal(coupons.coupons[0].redeemed_by, 'tenant@x.io');
  assert.equal(coupons.coupons[0].issued_to, 'tenant@x.io');
  // The coupon code (a bearer secret) is not in the audit log.
  assert.ok(!JSON.stringify((await as('GET', '/api/operator/audit')).body).includes(coupon.code));

  // Catalogs and usage.
  assert.equal((await as('POST', '/api/operator/image.add', { name: 'Mine', image: 'me/mine:1' })).status, 200);
  assert.equal((await as('POST', '/api/operator/image.disable', { image: 'me/mine:1' })).body.enabled, false);
  const catalogs = (await as('GET', '/api/operator/catalogs')).body;
  assert.ok(catalogs.images.some((i: { image: string }) => i.image === 'me/mine:1'));
  assert.ok(catalogs.models.length > 0);
  const usage = (await as('GET', '/api/operator/usage')).body;
  assert.equal(usage.instances_by_day.length, 30);
  assert.equal(usage.shared_models, null);

  // Bad input: 4xx with a detail naming the problem.
  const bad: [string, unknown, number, RegExp][] = [
    ['account.grant-credits', { email: 'tenant@x.io' }, 400, /credits/],
    ['account.verify', { email: 'nobody@x.io' }, 404, /No account/],
    ['account.set-operator', { email: 'tenant@x.io', operator: 'yes' }, 400, /operator/],
    ['instance.destroy', { instance_id: 'i-1', reason: 'abuse' }, 409, /running control plane/],
    ['instance.destroy', { instance_id: 'i-1' }, 400, /reason/],
    ['coupon.create', { credits: -1 }, 400, /credits/],
    ['no.such-op', {}, 404, /Unknown admin operation/],
  ];
  for (const [name, body, status, detail] of bad) {
    const r = await as('POST', `/api/operator/${name}`, body);
    assert.equal(r.status, status, `${name} ${JSON.stringify(r.body)}`);
    assert.match(r.body.detail, detail);
  }
  assert.equal(
    (await p.call('POST', '/api/operator/account.list', { raw: '[1]', cookie: op.cookie, csrf: op.csrf, headers: { 'content-type': 'application/json' } }))
      .status,
    400,
  );
});

test('operator events: the review queue as a server-sent event, again after a sign-up', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('op@x.io', { verified: true, operator: true, password: PASSWORD });
  const op = await signIn(p, 'op@x.io');
  const ac = new AbortController();
  t.after(() => ac.abort());
  const res = await fetch(`${p.cp.url}/api/operator/events`, { headers: { cookie: op.cookie }, signal: ac.signal });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /text\/event-stream/);
  const reader = res.body!.getReader();
  let text = '';
  const until = async (re: RegExp) => {
    while (!re.test(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`stream ended before ${re}: ${text}`);
      text += Buffer.from(value).toString();
    }
  };
  await until(/event: review\ndata: \{"accounts":\[\]\}/);
  await until(/event: hosts\n/);
  await until(/event: instances\n/);
  await p.call('POST', '/api/auth/signup', { body: { email: 'new@x.io', password: PASSWORD } });
  await until(/event: review\ndata: \{"accounts":\[\{[^\n]*new@x\.io/);
});

test('operator: disabling an account destroys its active instance (reason account_disabled) when the instance service runs', async (t) => {
  const destroyed: [string, string, string][] = [];
  const p = await startPlatform({
    instances: {
      async destroyById(id: string, reason: string, detail: string) {
        destroyed.push([id, reason, detail]);
        return {};
      },
    },
  });
  t.after(() => p.close());
  await p.account('op@x.io', { verified: true, operator: true, password: PASSWORD });
  const tenant = await p.account('tenant@x.io', { verified: true });
  const template = (await p.cp.store.templates.get(1))!; // a seeded public template
  const snapshot = { ...template, ssh_public_key: null };
  await p.cp.store.instances.insert({
    id: 'inst-1',
    accountId: tenant.id,
    templateId: template.id,
    template: snapshot,
    gpuCount: 1,
    diskGb: 100,
    microsPerHour: 1,
    periodMs: 60_000,
    now: Date.now(),
  });
  const op = await signIn(p, 'op@x.io');
  const listed = (await p.call('GET', '/api/operator/instances', { cookie: op.cookie })).body.instances;
  assert.deepEqual(
    listed.map((i: { instance_id: string; email: string; queued: boolean }) => [i.instance_id, i.email, i.queued]),
    [['inst-1', 'tenant@x.io', true]],
  );
  const r = await p.call('POST', '/api/operator/account.disable', { body: { email: 'tenant@x.io' }, cookie: op.cookie, csrf: op.csrf });
  assert.equal(r.status, 200);
  assert.deepEqual(destroyed, [['inst-1', 'account_disabled', 'The account was disabled by an operator']]);
  // The operator's own destroy passes the reason through; the owner sees it as the status detail.
  await p.call('POST', '/api/operator/instance.destroy', { body: { instance_id: 'inst-1', reason: 'Abuse report 12' }, cookie: op.cookie, csrf: op.csrf });
  assert.deepEqual(destroyed[1], ['inst-1', 'destroyed_by_operator', 'Abuse report 12']);
});
