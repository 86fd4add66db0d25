// One session cookie or none (issue 27): a page on another port of the platform's host can add
// its own `rc_session` cookie with a longer path (`document.cookie = "rc_session=...; path=/api"`);
// the browser then sends both, the attacker's first. Every part that reads the cookie must see no
// session at all in such a request, whatever the order and values, and one valid cookie still
// works. Sign-in and sign-out expire the cookies on the API's paths; behind TLS only
// `__Host-rc_session` counts.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { API_ERRORS } from '../../control-plane/errors.js';
import { SEVERAL_COOKIES, singleCookie, sessionCookieToken } from '../../lib/session-cookie.js';
import { startPlatform, sessionCookieOf, sshKey } from './platform.js';

const SESSION_INVALID = API_ERRORS.sessionInvalid.message;

test('singleCookie: one occurrence or none; two of the name in any order, values or spacing are none', () => {
  assert.equal(singleCookie('a=1; rc_session=abc; b=2', 'rc_session'), 'abc');
  assert.equal(singleCookie('rc_session= abc ', 'rc_session'), 'abc');
  assert.equal(singleCookie('rc_session=', 'rc_session'), undefined);
  assert.equal(singleCookie('rc_sessionx=1; xrc_session=2', 'rc_session'), undefined);
  assert.equal(singleCookie('', 'rc_session'), undefined);
  assert.equal(singleCookie('rc_session=a; rc_session=b', 'rc_session'), SEVERAL_COOKIES);
  assert.equal(singleCookie('rc_session=b;rc_session=a', 'rc_session'), SEVERAL_COOKIES);
  assert.equal(singleCookie('rc_session=a; x=1; rc_session=a', 'rc_session'), SEVERAL_COOKIES, 'the same value twice');
  assert.equal(singleCookie('rc_session=a; rc_session=', 'rc_session'), SEVERAL_COOKIES, 'an empty one beside');
  assert.equal(singleCookie('rc_session; rc_session=a', 'rc_session'), SEVERAL_COOKIES, 'a nameless cookie whose text is the name');
  // Behind TLS only __Host-rc_session is read; a plain rc_session beside it is not a second one.
  assert.equal(sessionCookieToken('rc_session=evil; __Host-rc_session=good', true), 'good');
  assert.equal(sessionCookieToken('__Host-rc_session=good', false), undefined);
  assert.equal(sessionCookieToken('__Host-rc_session=a; __Host-rc_session=b', true), SEVERAL_COOKIES);
});

test('two rc_session cookies on the platform API: 401 on /api/me and on writes, never either account; sign-in and sign-out expire the extras', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  const signUp = async (email: string) => {
    const r = await p.call('POST', '/api/auth/signup', { body: { email, password: 'correct horse battery' } });
    assert.equal(r.status, 201);
    return { cookie: sessionCookieOf(r), csrf: r.body.csrf_token as string, id: r.body.account.id as number };
  };
  const victim = await signUp('victim@example.com');
  const attacker = await signUp('attacker@example.com');
  const attackerValue = attacker.cookie.slice('rc_session='.length);

  assert.equal((await p.call('GET', '/api/me', { cookie: victim.cookie })).body.email, 'victim@example.com', 'one valid cookie works');
  for (const cookie of [
    `rc_session=${attackerValue}; ${victim.cookie}`, // the attacker's path=/api cookie is sent first
    `${victim.cookie}; rc_session=${attackerValue}`,
    `rc_session=junk; ${victim.cookie}`,
    `${victim.cookie}; ${victim.cookie}`,
  ]) {
    const me = await p.call('GET', '/api/me', { cookie });
    assert.equal(me.status, 401, cookie);
    assert.deepEqual(me.body, { detail: SESSION_INVALID });
    // A write with the victim's CSRF token and with the attacker's: refused, nothing saved anywhere.
    for (const csrf of [victim.csrf, attacker.csrf]) {
      const w = await p.call('POST', '/api/profile/ssh-key', { cookie, csrf, body: { ssh_public_key: sshKey('ssh-ed25519') } });
      assert.equal(w.status, 401);
    }
    // Public pages treat it as no credential.
    assert.equal((await p.call('GET', '/api/templates', { cookie })).status, 200);
  }
  for (const who of [victim, attacker]) assert.equal((await p.call('GET', '/api/me', { cookie: who.cookie })).body.ssh_public_key, null);

  // Sign-out works without a session: it expires the cookie on every API path and asks the
  // browser to drop the host's cookies.
  const out = await p.call('POST', '/api/auth/logout', { cookie: `rc_session=junk; ${victim.cookie}`, headers: { 'content-type': 'application/json' } });
  assert.equal(out.status, 200);
  assert.equal(out.headers['clear-site-data'], '"cookies"');
  const expired = ([] as string[]).concat(out.headers['set-cookie'] as string[]);
  for (const path of ['/', '/api', '/api/', '/api/me', '/api/profile/', '/api/profile/ssh-key', '/api/auth/login']) {
    assert.ok(expired.includes(`rc_session=; Path=${path}; Max-Age=0`), path);
  }
  // Sign-in sets the new cookie first and expires the same paths, except its own.
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'victim@example.com', password: 'correct horse battery' } });
  const set = ([] as string[]).concat(login.headers['set-cookie'] as string[]);
  assert.match(set[0]!, /^rc_session=[A-Za-z0-9_-]+; Path=\/; HttpOnly/);
  assert.ok(set.includes('rc_session=; Path=/api; Max-Age=0'));
  assert.ok(!set.includes('rc_session=; Path=/; Max-Age=0'));
});

test('behind TLS only __Host-rc_session is read: a tossed rc_session beside it changes nothing', async (t) => {
  const p = await startPlatform({ settings: { cookieSecure: 'always' } });
  t.after(() => p.close());
  const r = await p.call('POST', '/api/auth/signup', { body: { email: 'tls@example.com', password: 'correct horse battery' } });
  const cookie = sessionCookieOf(r);
  assert.match(cookie, /^__Host-rc_session=/);
  const other = await p.call('POST', '/api/auth/signup', { body: { email: 'other@example.com', password: 'correct horse battery' } });
  const otherValue = sessionCookieOf(other).split('=')[1]!;
  assert.equal((await p.call('GET', '/api/me', { cookie: `rc_session=${otherValue}; ${cookie}` })).body.email, 'tls@example.com');
  assert.equal((await p.call('GET', '/api/me', { cookie: `rc_session=${otherValue}` })).status, 401, 'the plain name is no session there');
  assert.equal((await p.call('GET', '/api/me', { cookie: `__Host-rc_session=${otherValue}; ${cookie}` })).status, 401);
});
