// Coupon codes cannot be guessed (issue 44: no attempt limit, 4-character custom codes, one fell
// in 107,000 tries): redemption attempts are limited per account and per client address (429
// `{detail}` with Retry-After; a right code is refused too once the limit is reached, and other
// accounts on other addresses are not affected), a wrong guess gets one answer whatever made it
// wrong, and custom codes need a minimum entropy, from the operator API and the CLI alike.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { API_ERRORS } from '../../control-plane/errors.js';
import { codeEntropyBits, MIN_CUSTOM_CODE_BITS, newCouponCode } from '../../control-plane/ledger.js';
import { runRcCli } from '../helpers.js';
import { sessionCookieOf, startPlatform } from './platform.js';

const INVALID = API_ERRORS.couponInvalid.message;
const LIMITED = API_ERRORS.couponRateLimited.message;

test('redemption attempts: per account, then per client address; 429 {detail} with Retry-After; others unaffected', async (t) => {
  const p = await startPlatform({ settings: { couponAttemptsPerAccountPerHour: 3, couponAttemptsPerAddressPerHour: 5, trustProxy: true } });
  t.after(() => p.close());
  const a = await p.account('guesser@x.io', { verified: true });
  const b = await p.account('second@x.io', { verified: true });
  const c = await p.account('elsewhere@x.io', { verified: true });
  const real = await p.cp.store.coupons.create(7);
  const from = (address: string) => ({ 'x-forwarded-for': address });
  const redeem = (key: string, coupon: string, address: string) => p.call('POST', '/api/credits/redeem', { key, body: { coupon }, headers: from(address) });

  for (let i = 0; i < 3; i++) {
    const r = await redeem(a.api_token!, `RC-GUESS-${i}`, '203.0.113.7');
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { detail: INVALID });
  }
  // The account's limit: even the right code is refused now, and costs no lookup (the coupon stays).
  const limited = await redeem(a.api_token!, real.code, '198.51.100.1');
  assert.equal(limited.status, 429);
  assert.deepEqual(limited.body, { detail: LIMITED });
  assert.match(String(limited.headers['retry-after']), /^[1-9][0-9]*$/);
  assert.equal((await p.cp.store.coupons.list())[0]!.redeemedBy, null);

  // The address's limit: another account on the same address has 2 attempts left (5 - 3).
  for (let i = 0; i < 2; i++) assert.equal((await redeem(b.api_token!, `RC-OTHER-${i}`, '203.0.113.7')).status, 400);
  const byAddress = await redeem(b.api_token!, real.code, '203.0.113.7');
  assert.equal(byAddress.status, 429);
  assert.deepEqual(byAddress.body, { detail: LIMITED });

  // Another account on another address is not affected, and redeems.
  const ok = await redeem(c.api_token!, real.code, '192.0.2.50');
  assert.equal(ok.status, 200);
  assert.deepEqual(ok.body, { credits_added: 7, credits: 7 });
});

test('a wrong guess gets one answer: unknown, issued to another account, or redeemed by someone else', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  const a = await p.account('a@x.io', { verified: true });
  const b = await p.account('b@x.io', { verified: true });
  const store = p.cp.store;
  const forB = await store.coupons.create(2, b.id);
  const taken = await store.coupons.create(3);
  assert.equal((await p.call('POST', '/api/credits/redeem', { key: b.api_token!, body: { coupon: taken.code } })).status, 200);
  const answers = [];
  for (const coupon of [newCouponCode(), forB.code, taken.code])
    answers.push(await p.call('POST', '/api/credits/redeem', { key: a.api_token!, body: { coupon } }));
  for (const r of answers) {
    assert.equal(r.status, 400);
    assert.deepEqual(r.body, { detail: INVALID });
    assert.deepEqual(Object.keys(r.headers).sort(), Object.keys(answers[0]!.headers).sort(), 'the same headers');
  }
});

test('custom coupon codes need a minimum entropy: refused short or patterned, from the operator API and the CLI', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('op@x.io', { verified: true, operator: true, password: 'operator password' });
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'op@x.io', password: 'operator password' } });
  const as = { cookie: sessionCookieOf(login), csrf: login.body.csrf_token as string };

  const guessable = ['ABCD', 'WELCOME2026', 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'abcdefghijklmnopqrstuvwxyz', 'Summer2026', 'Ab12Ab12'];
  for (const code of guessable) {
    assert.ok(codeEntropyBits(code) < MIN_CUSTOM_CODE_BITS, code);
    const r = await p.call('POST', '/api/operator/coupon.create', { ...as, body: { credits: 1, code } });
    assert.equal(r.status, 400, code);
    assert.match(r.body.detail, new RegExp(`code is too easy to guess: about \\d+ bits, at least ${MIN_CUSTOM_CODE_BITS} needed`), code);
  }
  assert.equal((await p.cp.store.coupons.list()).length, 0, 'none created');
  // Random codes pass, and so does the generated form.
  // A code starts with a letter or digit (admin.ts): base64url may start with - or _.
  const random = `R${randomBytes(12).toString('base64url')}`;
  assert.ok(codeEntropyBits(newCouponCode()) >= MIN_CUSTOM_CODE_BITS);
  const made = await p.call('POST', '/api/operator/coupon.create', { ...as, body: { credits: 1, code: random } });
  assert.equal(made.status, 200, JSON.stringify(made.body));
  assert.equal(made.body.code, random);

  // The CLI on the database runs the same action.
  const cli = await runRcCli(p.dir, ['coupon', 'create', '--credits', '1', '--code', 'ABCD1234']);
  assert.notEqual(cli.code, 0);
  assert.match(cli.stderr, /code is too easy to guess/);
});
