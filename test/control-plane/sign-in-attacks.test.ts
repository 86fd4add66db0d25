// Issue 14, "sign-in cannot be guessed", with the attacks as the tests: password guessing (per
// address, per account, distributed), no lock-out of the real user, login CSRF, mass sign-up.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FakeClock } from '../../lib/clock.js';
import { addressKey } from '../../control-plane/auth/rate-limit.js';
import { startPlatform, type Platform, type Reply } from './platform.js';

const PASSWORD = 'correct horse battery';
const login = (p: Platform, email: string, password: string, headers: Record<string, string> = {}) =>
  p.call('POST', '/api/auth/login', { body: { email, password }, headers });
const from = (address: string) => ({ 'x-forwarded-for': `203.0.113.99, ${address}` });

function assert429(r: Reply, code?: string): number {
  assert.equal(r.status, 429, JSON.stringify(r.body));
  const wait = Number(r.headers['retry-after']);
  assert.ok(Number.isInteger(wait) && wait >= 1, `Retry-After ${r.headers['retry-after']}`);
  assert.equal(typeof r.body.detail, 'string');
  if (code) assert.match(r.body.detail, code === 'login' ? /sign-in attempts/ : /sign-ups/);
  return wait;
}

test('attack: 200 wrong passwords from one address are cut off with 429 + Retry-After', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('victim@example.com', { password: PASSWORD });
  const answers = await Promise.all(Array.from({ length: 200 }, (_, i) => login(p, 'victim@example.com', `wrong password ${i}`)));
  const checked = answers.filter((r) => r.status === 401).length;
  assert.ok(checked <= 10, `${checked} passwords were checked`);
  assert.equal(answers.filter((r) => r.status === 429).length, 200 - checked);
  assert429(answers.find((r) => r.status === 429)!, 'login');
  // Another account from the same address is cut off too (password spraying).
  assert429(await login(p, 'other@example.com', 'whatever pw'), 'login');
});

test('attack: guessing one account; the attacker slows itself, never the real user for long', async (t) => {
  const clock = new FakeClock();
  const p = await startPlatform({ clock, settings: { trustProxy: true } });
  t.after(() => p.close());
  await p.account('victim@example.com', { password: PASSWORD });
  // The real user signed in before from their usual address.
  assert.equal((await login(p, 'victim@example.com', PASSWORD, from('192.0.2.7'))).status, 200);

  // One address: 5 free failures, then it waits 1 s, 2 s, ... (the attempts it makes meanwhile are
  // refused without a password check and do not extend the wait).
  for (let i = 0; i < 6; i++) assert.equal((await login(p, 'victim@example.com', `wrong guess ${i}`, from('198.51.100.1'))).status, 401);
  assert.equal(assert429(await login(p, 'victim@example.com', PASSWORD, from('198.51.100.1'))), 1);
  clock.advance(1000);
  assert.equal((await login(p, 'victim@example.com', 'wrong guess 6', from('198.51.100.1'))).status, 401);
  assert.equal(assert429(await login(p, 'victim@example.com', 'wrong guess 7', from('198.51.100.1'))), 2);

  // A distributed guess (many addresses, few tries each) empties the account's failure budget...
  // (7 failures so far; the budget is 20.)
  for (let a = 0; a < 13; a++) assert.equal((await login(p, 'victim@example.com', `wrong guess x${a}`, from(`198.51.100.${10 + a}`))).status, 401);
  const fresh = await login(p, 'victim@example.com', PASSWORD, from('198.51.100.50'));
  const wait = assert429(fresh, 'login');
  assert.ok(wait <= 60, `a new address waits ${wait}s`);
  // ...but the real user's known address still signs in, at once.
  assert.equal((await login(p, 'victim@example.com', PASSWORD, from('192.0.2.7'))).status, 200);
  // And a real user on a new address gets in after at most a minute.
  clock.advance(60_000);
  assert.equal((await login(p, 'victim@example.com', PASSWORD, from('198.51.100.50'))).status, 200);
});

test('attack: login CSRF (cross-origin or non-JSON sign-in, sign-up and logout are refused)', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('attacker@example.com', { password: PASSWORD });
  const body = JSON.stringify({ email: 'attacker@example.com', password: PASSWORD });
  const own = new URL(p.cp.url).origin;

  // The form a page on evil.example can submit without a preflight.
  const plain = await p.call('POST', '/api/auth/login', { raw: body, headers: { 'content-type': 'text/plain', origin: 'http://evil.example' } });
  assert.equal(plain.status, 415);
  assert.equal(plain.headers['set-cookie'], undefined);
  const form = await p.call('POST', '/api/auth/login', { raw: body, headers: { 'content-type': 'application/x-www-form-urlencoded' } });
  assert.equal(form.status, 415);
  assert.equal((await p.call('POST', '/api/auth/login', { raw: body })).status, 415, 'a body without Content-Type');
  const crossSite: Record<string, string>[] = [
    { origin: 'http://evil.example' },
    { origin: 'null' },
    { 'sec-fetch-site': 'cross-site' },
    { 'sec-fetch-site': 'same-site' },
    { origin: `${own.replace(/:\d+$/, '')}:1` },
  ];
  for (const headers of crossSite) {
    for (const path of ['/api/auth/login', '/api/auth/signup']) {
      const r = await p.call('POST', path, { body: { email: 'attacker@example.com', password: PASSWORD }, headers });
      assert.equal(r.status, 403, `${path} ${JSON.stringify(headers)}`);
      assert.match(r.body.detail, /Cross-origin/);
      assert.equal(r.headers['set-cookie'], undefined);
    }
  }
  // The platform's own pages and non-browser clients sign in.
  const ok = await login(p, 'attacker@example.com', PASSWORD, { origin: own, 'sec-fetch-site': 'same-origin' });
  assert.equal(ok.status, 200);
  const cookie = String(ok.headers['set-cookie']).split(';')[0]!;
  // Logout: cross-origin or non-JSON refused (the session stays), own origin works.
  const session = { cookie, csrf: ok.body.csrf_token as string };
  assert.equal((await p.call('POST', '/api/auth/logout', { ...session, headers: { origin: 'http://evil.example' } })).status, 403);
  assert.equal((await p.call('POST', '/api/auth/logout', { ...session, raw: 'x', headers: { 'content-type': 'text/plain' } })).status, 415);
  assert.equal((await p.call('GET', '/api/me', { cookie })).status, 200);
  assert.equal((await p.call('POST', '/api/auth/logout', { ...session, headers: { origin: own } })).status, 200);
  assert.equal((await p.call('GET', '/api/me', { cookie })).status, 401);
});

test('attack: one address minting accounts (each with its own daily cap) gets 429 + Retry-After', async (t) => {
  const p = await startPlatform({ settings: { trustProxy: true, signupPerAddressPerHour: 3 } });
  t.after(() => p.close());
  const signup = (i: number, address: string) =>
    p.call('POST', '/api/auth/signup', { body: { email: `sock${i}@example.com`, password: PASSWORD }, headers: from(address) });
  for (let i = 0; i < 3; i++) assert.equal((await signup(i, '198.51.100.1')).status, 201);
  const refused = await signup(3, '198.51.100.1');
  const wait = assert429(refused, 'signup');
  assert.ok(wait > 60 && wait <= 1200, `Retry-After ${wait}`);
  assert.equal(await p.cp.store.accounts.byEmail('sock3@example.com'), undefined);
  assert.equal((await signup(4, '198.51.100.2')).status, 201, 'another address is not affected');
});

test('attack: rotating addresses inside one IPv6 /64 counts as one address', async (t) => {
  assert.equal(addressKey('2001:db8:1:2::1'), addressKey('2001:DB8:1:2:ffff:0:0:9'));
  assert.notEqual(addressKey('2001:db8:1:2::1'), addressKey('2001:db8:1:3::1'));
  assert.equal(addressKey('::ffff:192.0.2.1'), '192.0.2.1');
  assert.equal(addressKey('192.0.2.1'), '192.0.2.1');
  const p = await startPlatform({ settings: { trustProxy: true, loginPerAddressPerMinute: 3 } });
  t.after(() => p.close());
  const statuses: number[] = [];
  for (let i = 1; i <= 5; i++) statuses.push((await login(p, `someone${i}@example.com`, 'wrong password', from(`2001:db8:1:2::${i.toString(16)}`))).status);
  assert.deepEqual(statuses, [401, 401, 401, 429, 429]);
});
