// SPEC "Account" endpoints against a real server: /api/me, SSH key, API key rotation, coupon
// redemption (exactly once under concurrency), model usage, cross-account isolation.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { hashKey } from '../../lib/keys.js';
import { KeyDirectory } from '../../gateway/auth/keys.js';
import { storeKeySource } from '../../control-plane/sources.js';
import { API_ERRORS } from '../../control-plane/errors.js';
import { startPlatform, sshKey, type Platform } from './platform.js';

const COUPON_INVALID = API_ERRORS.couponInvalid.message;
const COUPON_REDEEMED = API_ERRORS.couponRedeemed.message;
const REDEMPTION_CLOSED = API_ERRORS.redemptionClosed.message;

let p: Platform;
before(async () => {
  p = await startPlatform();
});
after(async () => {
  await p.close();
});

test('GET /api/me: exactly SPEC profile fields, for the key owner', async () => {
  const a = await p.account('me@x.io', { verified: true, credits: 7.5 });
  const r = await p.call('GET', '/api/me', { key: a.api_token! });
  assert.equal(r.status, 200);
  assert.deepEqual(Object.keys(r.body).sort(), ['api_token', 'credits', 'email', 'id', 'is_editor', 'provider', 'ssh_public_key', 'verified']);
  assert.deepEqual(r.body, {
    id: a.id,
    email: 'me@x.io',
    credits: 7.5,
    verified: true,
    is_editor: false,
    provider: 'password',
    api_token: a.api_token,
    ssh_public_key: null,
  });
  assert.match(String(r.body.api_token), /^rc-[A-Za-z0-9_-]{43}$/);
});

test('credentials: missing, malformed, unknown -> 401 with SPEC messages', async () => {
  const cases: [string, Record<string, string>, string][] = [
    ['no header', {}, 'Unauthorized: No API key provided.'],
    ['empty bearer', { authorization: 'Bearer ' }, 'Unauthorized: No API key provided.'],
    ['basic scheme', { authorization: 'Basic dXNlcjpwYXNz' }, 'Invalid bearer token'],
    ['not our shape', { authorization: 'Bearer sk-1234' }, 'Invalid bearer token'],
    ['unknown key', { authorization: `Bearer rc-${'A'.repeat(43)}` }, 'Invalid bearer token'],
    ['unknown session cookie', { cookie: 'rc_session=nope' }, 'Session expired or invalid; sign in again'],
  ];
  for (const [name, headers, detail] of cases) {
    const r = await p.call('GET', '/api/me', { headers });
    assert.equal(r.status, 401, name);
    assert.deepEqual(r.body, { detail }, name);
  }
});

test('POST /api/profile/ssh-key: valid keys stored, invalid ones 400, "" removes', async () => {
  const a = await p.account('ssh@x.io', { verified: true });
  const key = a.api_token!;
  const good = sshKey('ssh-ed25519');
  let r = await p.call('POST', '/api/profile/ssh-key', { key, body: { ssh_public_key: good + '\n' } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.body, { ssh_public_key: good });
  assert.equal((await p.call('GET', '/api/me', { key })).body.ssh_public_key, good);

  const bad: [string, unknown][] = [
    ['unknown type', { ssh_public_key: 'ssh-foo AAAA' }],
    ['two lines', { ssh_public_key: `${good}\n${good}` }],
    ['too long', { ssh_public_key: sshKey('ssh-rsa', 'x'.repeat(8200)) }],
    ['type mismatch', { ssh_public_key: sshKey('ssh-rsa', 'c', 'ssh-ed25519') }],
    ['not a string', { ssh_public_key: 42 }],
    ['missing field', {}],
    ['unknown field', { ssh_public_key: good, extra: 1 }],
  ];
  for (const [name, body] of bad) {
    r = await p.call('POST', '/api/profile/ssh-key', { key, body });
    assert.equal(r.status, 400, name);
    assert.equal(typeof r.body.detail, 'string', name);
  }
  assert.match((await p.call('POST', '/api/profile/ssh-key', { key, body: { ssh_public_key: 'ssh-foo AAAA' } })).body.detail, /recognised key type/);
  assert.match((await p.call('POST', '/api/profile/ssh-key', { key, body: { extra: 1, ssh_public_key: good } })).body.detail, /Unknown field: extra/);
  // The bad attempts left the stored key alone; "" removes it.
  assert.equal((await p.call('GET', '/api/me', { key })).body.ssh_public_key, good);
  r = await p.call('POST', '/api/profile/ssh-key', { key, body: { ssh_public_key: '' } });
  assert.deepEqual(r.body, { ssh_public_key: null });
  assert.equal((await p.call('GET', '/api/me', { key })).body.ssh_public_key, null);
});

test('POST /api/profile/api-token: new key works, old key refused at once by the platform and a gateway directory; events published', async () => {
  const a = await p.account('rot@x.io', { verified: true });
  const old = a.api_token!;
  const directory = new KeyDirectory();
  await directory.start(storeKeySource(p.cp.store), p.bus);
  try {
    assert.equal(directory.lookup(old), a.id);
    const before = p.events.length;
    const r = await p.call('POST', '/api/profile/api-token', { key: old });
    assert.equal(r.status, 200);
    const fresh = r.body.api_token as string;
    assert.match(fresh, /^rc-[A-Za-z0-9_-]{43}$/);
    assert.notEqual(fresh, old);
    assert.deepEqual(p.events.slice(before), [
      { type: 'key.revoked', keyHash: hashKey(old), accountId: a.id },
      { type: 'key.issued', keyHash: hashKey(fresh), accountId: a.id },
    ]);
    assert.deepEqual((await p.call('GET', '/api/me', { key: old })).body, { detail: 'Invalid bearer token' });
    assert.equal((await p.call('GET', '/api/me', { key: old })).status, 401);
    const me = await p.call('GET', '/api/me', { key: fresh });
    assert.equal(me.status, 200);
    assert.equal(me.body.api_token, fresh);
    assert.equal(directory.lookup(old), undefined);
    assert.equal(directory.lookup(fresh), a.id);
  } finally {
    directory.stop();
  }
});

test('POST /api/credits/redeem: SPEC result and every 400 case', async () => {
  const a = await p.account('coupon-a@x.io', { verified: true, credits: 1 });
  const b = await p.account('coupon-b@x.io', { verified: true });
  const store = p.cp.store;
  const open = await store.coupons.create(10);
  const forB = await store.coupons.create(3, b.id);
  const key = a.api_token!;
  let r = await p.call('POST', '/api/credits/redeem', { key, body: { coupon: open.code } });
  assert.equal(r.status, 200);
  assert.deepEqual(r.body, { credits_added: 10, credits: 11 });
  const cases: [string, unknown, string][] = [
    ['already redeemed', { coupon: open.code }, COUPON_REDEEMED],
    ['unknown code', { coupon: 'RC-NOT-A-CODE' }, COUPON_INVALID],
    // Another account's coupon is the unknown code's answer: a guess learns nothing.
    ["another account's coupon", { coupon: forB.code }, COUPON_INVALID],
  ];
  for (const [name, body, detail] of cases) {
    r = await p.call('POST', '/api/credits/redeem', { key, body });
    assert.equal(r.status, 400, name);
    assert.deepEqual(r.body, { detail }, name);
  }
  for (const body of [{}, { coupon: 5 }, { coupon: '' }, { coupon: 'x', more: true }]) {
    r = await p.call('POST', '/api/credits/redeem', { key, body });
    assert.equal(r.status, 400, JSON.stringify(body));
  }
  assert.equal((await p.call('GET', '/api/me', { key })).body.credits, 11);
  r = await p.call('POST', '/api/credits/redeem', { key: b.api_token!, body: { coupon: forB.code } });
  assert.deepEqual(r.body, { credits_added: 3, credits: 3 });
});

test('POST /api/credits/redeem: concurrent redemptions of one coupon, exactly one wins', async () => {
  const accounts = await Promise.all([0, 1, 2, 3].map((i) => p.account(`race${i}@x.io`, { verified: true })));
  const c = await p.cp.store.coupons.create(4);
  const attempts = accounts.flatMap((a) => [0, 1, 2, 3, 4].map(() => p.call('POST', '/api/credits/redeem', { key: a.api_token!, body: { coupon: c.code } })));
  const results = await Promise.all(attempts);
  const wins = results.filter((r) => r.status === 200);
  assert.equal(wins.length, 1);
  // Losers hear `Invalid coupon code` (someone else redeemed it), or that they redeemed it themselves.
  assert.ok(results.every((r) => r.status === 200 || (r.status === 400 && [COUPON_INVALID, COUPON_REDEEMED].includes(r.body.detail))));
  const balances = await Promise.all(accounts.map(async (a) => (await p.call('GET', '/api/me', { key: a.api_token! })).body.credits));
  assert.deepEqual(balances.sort(), [0, 0, 0, 4]);
});

test('POST /api/credits/redeem: 503 with Retry-After while redemption is closed; the coupon stays valid', async () => {
  const closed = await startPlatform({ settings: { couponRedemption: 'closed', couponRetryAfterSec: 120 } });
  try {
    const a = await closed.account('closed@x.io', { verified: true });
    const c = await closed.cp.store.coupons.create(1);
    const r = await closed.call('POST', '/api/credits/redeem', { key: a.api_token!, body: { coupon: c.code } });
    assert.equal(r.status, 503);
    assert.equal(r.headers['retry-after'], '120');
    assert.deepEqual(r.body, { detail: REDEMPTION_CLOSED });
    assert.equal((await closed.cp.store.coupons.list())[0]!.redeemedBy, null);
  } finally {
    await closed.close();
  }
});

test('GET /api/profile/model-usage: default body from limits; the hook answers when wired', async () => {
  const a = await p.account('usage@x.io', { verified: true });
  await p.cp.store.limits.set({ accountId: a.id, rpm: null, tpm: null, dailyTokens: 1234 });
  const r = await p.call('GET', '/api/profile/model-usage', { key: a.api_token! });
  assert.equal(r.status, 200);
  assert.equal(r.body.daily_cap, 1234);
  assert.equal(r.body.tokens_used, 0);
  assert.equal(r.body.tokens_remaining, 1234);
  assert.match(r.body.day, /^\d{4}-\d{2}-\d{2}$/);
  assert.ok(Date.parse(r.body.resets_at) > Date.now() - 1000);
  assert.deepEqual(
    r.body.by_hour,
    Array.from({ length: 24 }, (_, hour) => ({ hour, tokens: 0, requests: 0, by_model: {} })),
  );
  assert.equal((await p.call('GET', '/api/profile/model-usage')).status, 401);

  const hooked = await startPlatform({ modelUsage: async (id) => ({ account: id, from: 'gates' }) });
  try {
    const b = await hooked.account('hook@x.io', { verified: true });
    assert.deepEqual((await hooked.call('GET', '/api/profile/model-usage', { key: b.api_token! })).body, { account: b.id, from: 'gates' });
  } finally {
    await hooked.close();
  }
});

test('isolation: an account sees and changes only its own profile, key and templates', async () => {
  const a = await p.account('iso-a@x.io', { verified: true });
  const b = await p.account('iso-b@x.io', { verified: true });
  const t = await p.call('POST', '/api/profile/templates', { key: a.api_token!, body: { title: 'mine', image: 'rc/gradio:latest' } });
  assert.equal(t.status, 200);
  assert.equal((await p.call('GET', '/api/me', { key: b.api_token! })).body.email, 'iso-b@x.io');
  assert.deepEqual((await p.call('GET', '/api/profile/templates', { key: b.api_token! })).body.templates, []);
  for (const [method, body] of [
    ['PUT', { title: 'stolen', image: 'rc/gradio:latest' }],
    ['DELETE', undefined],
    ['GET', undefined],
  ] as const) {
    const r = await p.call(method, `/api/profile/templates/${t.body.id}`, { key: b.api_token!, body });
    assert.equal(r.status, 404, method);
    assert.deepEqual(r.body, { detail: 'Template not found' });
  }
  assert.equal((await p.call('GET', `/api/profile/templates/${t.body.id}`, { key: a.api_token! })).body.title, 'mine');
  // Rotating b's key leaves a's untouched.
  await p.call('POST', '/api/profile/api-token', { key: b.api_token! });
  assert.equal((await p.call('GET', '/api/me', { key: a.api_token! })).status, 200);
});
