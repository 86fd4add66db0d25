// Sign-up, sign-in, sessions, CSRF, unverified accounts, and bad input on every kind of route.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { API_ERRORS } from '../../control-plane/errors.js';
import { startPlatform, sessionCookieOf, type Platform } from './platform.js';

const CSRF_INVALID = API_ERRORS.csrfInvalid.message;
const LOGIN_FAILED = API_ERRORS.loginFailed.message;

let p: Platform;
before(async () => {
  p = await startPlatform();
});
after(async () => {
  await p.close();
});

test('sign-up: unverified account, HttpOnly SameSite=Lax cookie, CSRF token; no key; 403 account_not_verified with redirect', async () => {
  const r = await p.call('POST', '/api/auth/signup', { body: { email: 'New@X.io', password: 'hunter2hunter2' } });
  assert.equal(r.status, 201);
  const setCookie = ([] as string[]).concat(r.headers['set-cookie'] as string | string[])[0]!;
  assert.match(setCookie, /^rc_session=[A-Za-z0-9_-]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=\d+$/);
  assert.equal(r.body.account.email, 'new@x.io');
  assert.equal(r.body.account.verified, false);
  assert.equal(r.body.account.provider, 'password');
  assert.equal(r.body.account.api_token, null);
  assert.equal(typeof r.body.csrf_token, 'string');
  const cookie = sessionCookieOf(r);
  const me = await p.call('GET', '/api/me', { cookie });
  assert.equal(me.status, 200);
  assert.equal(me.body.api_token, null);
  const tok = await p.call('POST', '/api/profile/api-token', { cookie, csrf: r.body.csrf_token });
  assert.equal(tok.status, 403);
  assert.deepEqual(tok.body, {
    detail: { code: 'account_not_verified', message: 'Your account is under review; this needs a verified account', redirect: '/review' },
  });
  // The same e-mail again (any case): 409.
  const dup = await p.call('POST', '/api/auth/signup', { body: { email: 'new@x.io', password: 'another-password' } });
  assert.equal(dup.status, 409);
  assert.equal(typeof dup.body.detail, 'string');
});

test('sign-in: wrong password and unknown e-mail give the same 401; right password opens a session; logout ends it', async () => {
  await p.account('login@x.io', { verified: true, password: 'right-password' });
  for (const body of [
    { email: 'login@x.io', password: 'wrong-password' },
    { email: 'nobody@x.io', password: 'right-password' },
  ]) {
    const r = await p.call('POST', '/api/auth/login', { body });
    assert.equal(r.status, 401);
    assert.deepEqual(r.body, { detail: LOGIN_FAILED });
  }
  // An account created without a password cannot sign in with one.
  await p.account('nopass@x.io', { verified: true });
  assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'nopass@x.io', password: 'whatever-pass' } })).status, 401);

  const r = await p.call('POST', '/api/auth/login', { body: { email: 'LOGIN@x.io', password: 'right-password' } });
  assert.equal(r.status, 200);
  const cookie = sessionCookieOf(r);
  const csrf = r.body.csrf_token as string;
  const s = await p.call('GET', '/api/auth/session', { cookie });
  assert.equal(s.body.via, 'session');
  assert.equal(s.body.csrf_token, csrf);
  assert.match(s.body.account.api_token, /^rc-/);

  // Cookie-authenticated writes need the CSRF header.
  for (const bad of [undefined, 'wrong', csrf + 'x']) {
    const w = await p.call('POST', '/api/profile/ssh-key', { cookie, csrf: bad, body: { ssh_public_key: '' } });
    assert.equal(w.status, 403, String(bad));
    assert.deepEqual(w.body, { detail: CSRF_INVALID });
  }
  assert.equal((await p.call('POST', '/api/profile/ssh-key', { cookie, csrf, body: { ssh_public_key: '' } })).status, 200);
  // Reads need none; key-authenticated writes need none.
  assert.equal((await p.call('GET', '/api/me', { cookie })).status, 200);

  assert.equal((await p.call('POST', '/api/auth/logout', { cookie })).status, 403);
  const out = await p.call('POST', '/api/auth/logout', { cookie, csrf });
  assert.equal(out.status, 200);
  assert.deepEqual(out.body, { success: true });
  assert.ok(([] as string[]).concat(out.headers['set-cookie'] as string[]).includes('rc_session=; Path=/; Max-Age=0'));
  assert.equal(out.headers['clear-site-data'], '"cookies"');
  assert.equal((await p.call('GET', '/api/me', { cookie })).status, 401);
});

test('cookie Secure flag behind TLS (X-Forwarded-Proto: https) and with cookieSecure=always', async () => {
  await p.account('tls@x.io', { password: 'tls-password' });
  const plain = await p.call('POST', '/api/auth/login', { body: { email: 'tls@x.io', password: 'tls-password' } });
  assert.doesNotMatch(String(plain.headers['set-cookie']), /Secure/);
  const tls = await p.call('POST', '/api/auth/login', { body: { email: 'tls@x.io', password: 'tls-password' }, headers: { 'x-forwarded-proto': 'https' } });
  // Behind TLS the cookie is __Host-rc_session: Secure, Path=/, no Domain.
  assert.match(sessionCookieOf(tls), /^__Host-rc_session=/);
  assert.match(
    ([] as string[]).concat(tls.headers['set-cookie'] as string[])[0]!,
    /^__Host-rc_session=[A-Za-z0-9_-]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=\d+; Secure$/,
  );
  const always = await startPlatform({ settings: { cookieSecure: 'always', signup: 'closed' } });
  try {
    const r = await always.call('POST', '/api/auth/signup', { body: { email: 's@x.io', password: 'password-1' } });
    assert.equal(r.status, 403);
    await always.account('s@x.io', { password: 'password-1' });
    const l = await always.call('POST', '/api/auth/login', { body: { email: 's@x.io', password: 'password-1' } });
    assert.match(([] as string[]).concat(l.headers['set-cookie'] as string[])[0]!, /^__Host-rc_session=.*; Secure$/);
  } finally {
    await always.close();
  }
});

test('sign-up and login input validation: 400 naming the field', async () => {
  const cases: [unknown, RegExp][] = [
    [{ email: 'not-an-email', password: 'password-1' }, /email/],
    [{ email: 'a@x.io', password: 'short' }, /password/],
    [{ email: 'a@x.io' }, /password is required/],
    [{ password: 'password-1' }, /email is required/],
    [{ email: 5, password: 'password-1' }, /email/],
    [{ email: 'a@x.io', password: 'password-1', admin: true }, /Unknown field: admin/],
  ];
  for (const [body, detail] of cases) {
    for (const path of ['/api/auth/signup', '/api/auth/login']) {
      const r = await p.call('POST', path, { body });
      assert.equal(r.status, 400, `${path} ${JSON.stringify(body)}`);
      assert.match(r.body.detail, detail);
    }
  }
});

test('bad input anywhere: broken JSON, non-objects, huge bodies, bad Content-Length -> 4xx {detail}, never 5xx', async () => {
  const a = await p.account('bad@x.io', { verified: true });
  const key = a.api_token!;
  const routes = ['/api/profile/ssh-key', '/api/credits/redeem', '/api/profile/templates', '/api/auth/login', '/api/auth/signup'];
  const raws: [string, string | Buffer, number][] = [
    ['broken JSON', '{"coupon": ', 400],
    ['array', '[1,2]', 400],
    ['number', '42', 400],
    ['null', 'null', 400],
    ['empty', '', 400],
    ['not UTF-8 JSON', Buffer.from([0xff, 0xfe, 0x00]), 400],
    ['huge', JSON.stringify({ coupon: 'x'.repeat(200_000) }), 413],
  ];
  for (const path of routes) {
    for (const [name, raw, status] of raws) {
      const r = await p.call('POST', path, { key, raw, headers: { 'content-type': 'application/json' } });
      assert.equal(r.status, status, `${path} ${name}`);
      assert.equal(typeof r.body.detail, 'string', `${path} ${name}`);
    }
  }
  const wrongTypes = await p.call('POST', '/api/profile/templates', { key, body: { title: 1, image: [], ssh_enabled: 'yes' } });
  assert.equal(wrongTypes.status, 400);
  assert.match(wrongTypes.body.detail, /title/);
  assert.match(wrongTypes.body.detail, /ssh_enabled/);
});

test('unknown paths 404 and wrong methods 405, as JSON', async () => {
  const r = await p.call('GET', '/api/nope');
  assert.equal(r.status, 404);
  assert.deepEqual(r.body, { detail: 'Not Found' });
  const m = await p.call('DELETE', '/api/me');
  assert.equal(m.status, 405);
  assert.equal(m.headers.allow, 'GET');
  assert.equal((await p.call('GET', '/api/health')).status, 200);
});

test('admin API: refused without the data dir token', async () => {
  for (const headers of [{}, { 'x-rc-admin-token': 'guess' }] as Record<string, string>[]) {
    const r = await p.call('POST', '/api/admin/account.list', { body: {}, headers });
    assert.equal(r.status, 401);
  }
  const a = await p.account('notadmin@x.io', { verified: true });
  assert.equal((await p.call('POST', '/api/admin/account.list', { body: {}, key: a.api_token! })).status, 401);
});
