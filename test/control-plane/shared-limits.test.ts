// Sign-in, sign-up and coupon attempt limits shared across control planes (issue #43): with
// REDIS_URL they live in Redis and two control planes on one database allow each limit once, not
// twice; the Redis scripts decide exactly as the in-memory limits do; and with Redis unreachable
// (a closed port, a frozen server) this process's memory decides, then Redis again once it is back.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { Redis } from 'ioredis';
import { MemoryAttemptLimits, type AttemptLimitSettings } from '../../control-plane/auth/attempt-limits.js';
import { RedisAttemptLimits } from '../../control-plane/auth/redis-limits.js';
import { KNOWN_ADDRESS_TTL_MS, PAIR_FORGET_MS } from '../../control-plane/auth/rate-limit.js';
import { API_ERRORS } from '../../control-plane/errors.js';
import type { ControlPlaneSettings } from '../../control-plane/deps.js';
import { FakeClock } from '../../lib/clock.js';
import { createLogger } from '../../lib/log.js';
import { dropKeysAfter, REDIS_URL, redisAvailable, waitFor } from '../helpers.js';
import { PrivateRedis, sparePort } from '../gateway/gates/fixtures.js';
import { startPlatform, type Platform } from './platform.js';

const PASSWORD = 'correct horse battery';
const from = (address: string) => ({ 'x-forwarded-for': address });
const login = (p: Platform, email: string, password: string, address: string) =>
  p.call('POST', '/api/auth/login', { body: { email, password }, headers: from(address) });

/** A key prefix of the test's own, its keys dropped afterwards. */
function testPrefix(t: TestContext): string {
  const prefix = `rc-test-limits-${randomUUID()}:`;
  dropKeysAfter(t, prefix);
  return prefix;
}

/** A client of the test's own (the scripts' connection in the equivalence test, and a probe). */
function client(t: TestContext, url = REDIS_URL): Redis {
  const r = new Redis(url, { maxRetriesPerRequest: 0, enableOfflineQueue: true });
  r.on('error', () => {});
  t.after(() => r.disconnect());
  return r;
}

/** Two control planes on one database (one SQLite data dir, as two processes have it) with `settings`, one clock. */
async function twoControlPlanes(t: TestContext, settings: Partial<ControlPlaneSettings>, clock = new FakeClock()) {
  const dir = mkdtempSync(join(tmpdir(), 'rc-shared-limits-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // A long Redis timeout: on a loaded machine a slow answer must not send a decision to one process's memory.
  const all = { trustProxy: true, authRedisTimeoutMs: 5000, ...settings };
  const a = await startPlatform({ dataDir: dir, clock, settings: all });
  t.after(() => a.close());
  const b = await startPlatform({ dataDir: dir, clock, settings: all });
  t.after(() => b.close());
  return { a, b, clock };
}

/** A small deterministic generator (the sequence is the same on every run). */
function prng(seed: number) {
  let s = seed >>> 0;
  return (n: number) => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return (s >>> 16) % n; // the high bits: an LCG's low bits repeat with a short period
  };
}

test('the Redis limits decide exactly as the in-memory ones: 3,000 random attempts, one clock', async (t) => {
  if (!(await redisAvailable(t))) return;
  const settings: AttemptLimitSettings = {
    loginPerAddressPerMinute: 10,
    signupPerAddressPerHour: 2,
    couponAttemptsPerAccountPerHour: 3,
    couponAttemptsPerAddressPerHour: 5,
  };
  const clock = new FakeClock();
  const memory = new MemoryAttemptLimits(settings, clock);
  const redis = new RedisAttemptLimits(client(t), { prefix: testPrefix(t), settings, clock });
  const emails = ['a@x.io', 'b@x.io', 'c@x.io'];
  const addresses = ['192.0.2.1', '192.0.2.2', '2001:db8:1:2::1', '2001:db8:1:2::2', '198.51.100.7', '198.51.100.8'];
  const steps = [50, 100, 1000, 2500, 7000];
  const next = prng(43);
  const refused = { signIn: 0, signUp: 0, coupon: 0, waits: new Set<number>() };
  for (let i = 0; i < 3000; i++) {
    const email = emails[next(emails.length)]!;
    const address = addresses[next(addresses.length)]!;
    const op = next(10);
    if (op < 6) {
      const m = memory.admitSignIn(email, address);
      assert.equal(await redis.admitSignIn(email, address), m, `step ${i}: sign-in admission of ${email} from ${address}`);
      if (m > 0) {
        refused.signIn++;
        refused.waits.add(m);
      } else if (next(20) === 0) {
        memory.signInSucceeded(email, address);
        await redis.signInSucceeded(email, address);
      } else {
        memory.signInFailed(email, address);
        await redis.signInFailed(email, address);
      }
    } else if (op < 8) {
      const m = memory.takeSignUp(address);
      assert.equal(await redis.takeSignUp(address), m, `step ${i}: sign-up from ${address}`);
      if (m > 0) refused.signUp++;
    } else {
      const account = 1 + next(3);
      const m = memory.takeRedemption(account, address);
      assert.equal(await redis.takeRedemption(account, address), m, `step ${i}: redemption by ${account} from ${address}`);
      if (m > 0) refused.coupon++;
    }
    // Mostly no time or seconds; now and then a minute, or past a pair's forgetting (15 min).
    const r = next(100);
    clock.advance(r < 1 ? 16 * 60_000 : r < 4 ? 60_000 : r < 60 ? 0 : steps[next(steps.length)]!);
  }
  // Every rule was exercised: refusals of each kind, and sign-in waits only a pair's rule gives
  // (over a minute: the address's bucket waits at most 15 s, the account's at most 60 s) and
  // ones only the buckets give (under a second: a pair waits whole seconds).
  const waits = [...refused.waits];
  const seen = { ...refused, waits: waits.length, pair: waits.filter((w) => w > 60_000).length, bucket: waits.filter((w) => w < 1000).length };
  t.diagnostic(JSON.stringify(seen));
  assert.ok(seen.signIn > 50 && seen.signUp > 50 && seen.coupon > 50 && seen.pair > 3 && seen.bucket > 3, JSON.stringify(seen));
});

test("on Redis's clock (no clock given, as in production): the rules hold, and every key the limits write expires", async (t) => {
  if (!(await redisAvailable(t))) return;
  const prefix = testPrefix(t);
  const r = client(t);
  const settings: AttemptLimitSettings = {
    loginPerAddressPerMinute: 10,
    signupPerAddressPerHour: 2,
    couponAttemptsPerAccountPerHour: 2,
    couponAttemptsPerAddressPerHour: 30,
  };
  const limits = new RedisAttemptLimits(r, { prefix, settings });
  // 10 failures: the 6th to the 10th set waits of 1, 2, 4, 8 and 16 s; the pair waits, at most 16 s.
  for (let i = 0; i < 10; i++) await limits.signInFailed('victim@x.io', '198.51.100.1');
  const wait = await limits.admitSignIn('victim@x.io', '198.51.100.1');
  assert.ok(wait > 0 && wait <= 16_000, `waits ${wait} ms`);
  assert.equal(await limits.admitSignIn('victim@x.io', '192.0.2.7'), 0, 'another address is not affected');
  await limits.signInSucceeded('victim@x.io', '192.0.2.7');
  assert.deepEqual([await limits.takeSignUp('203.0.113.1'), await limits.takeSignUp('203.0.113.1')], [0, 0]);
  assert.ok((await limits.takeSignUp('203.0.113.1')) > 0, 'the third sign-up of the hour');
  assert.deepEqual([await limits.takeRedemption(7, '203.0.113.1'), await limits.takeRedemption(7, '203.0.113.2')], [0, 0]);
  assert.ok((await limits.takeRedemption(7, '203.0.113.3')) > 0, 'the account has used its 2 attempts');

  // Nothing stays in Redis for ever: each key's TTL is at most what its rule needs.
  const keys = (await r.keys(`${prefix}*`)).sort();
  const most: Record<string, number> = {
    pair: PAIR_FORGET_MS,
    known: KNOWN_ADDRESS_TTL_MS,
    signin: 60_000,
    failures: 20 * 60_000,
    signup: 3_600_000,
    coupon: 3_600_000,
  };
  assert.deepEqual(
    keys.map((k) => k.slice(prefix.length).split(':')[1]),
    // No attempt counted for the waiting pair's address: a refusal takes nothing.
    ['coupon', 'coupon', 'coupon', 'failures', 'known', 'pair', 'signin', 'signup'],
    keys.join(' '),
  );
  for (const k of keys) {
    const ttl = await r.pttl(k);
    assert.ok(ttl > 0 && ttl <= most[k.slice(prefix.length).split(':')[1]!]!, `${k}: PTTL ${ttl}`);
  }
});

test('two control planes on one Redis: sign-in failures through A make B refuse (pair wait, address bucket)', async (t) => {
  if (!(await redisAvailable(t))) return;
  const { a, b, clock } = await twoControlPlanes(t, { redisUrl: REDIS_URL, gateKeyPrefix: testPrefix(t), loginPerAddressPerMinute: 8 });
  await a.account('victim@example.com', { password: PASSWORD });

  // 5 free failures from one address, spread over both; the 6th starts a wait of 1 s, on both.
  for (let i = 0; i < 6; i++)
    assert.equal((await login(i % 2 ? b : a, 'victim@example.com', `wrong password ${i}`, '198.51.100.1')).status, 401, `failure ${i}`);
  for (const p of [b, a]) {
    const r = await login(p, 'victim@example.com', PASSWORD, '198.51.100.1');
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.equal(r.headers['retry-after'], '1');
    assert.deepEqual(r.body, { detail: API_ERRORS.loginRateLimited.message });
  }
  // The user's own address is not affected, through either; a success there is known on both.
  assert.equal((await login(b, 'victim@example.com', PASSWORD, '192.0.2.7')).status, 200);
  clock.advance(1000);
  assert.equal((await login(b, 'victim@example.com', PASSWORD, '198.51.100.1')).status, 200, 'the wait is over');

  // The per-address bucket (8 a minute): 7 attempts so far from 198.51.100.1; one more, then refused on both.
  assert.equal((await login(a, 'other@example.com', 'wrong password', '198.51.100.1')).status, 401);
  for (const p of [a, b]) assert.equal((await login(p, 'third@example.com', 'wrong password', '198.51.100.1')).status, 429);
});

test('two control planes on one Redis: coupon attempts through A and B together stop at the configured number', async (t) => {
  if (!(await redisAvailable(t))) return;
  const { a, b } = await twoControlPlanes(t, {
    redisUrl: REDIS_URL,
    gateKeyPrefix: testPrefix(t),
    couponAttemptsPerAccountPerHour: 4,
    couponAttemptsPerAddressPerHour: 6,
  });
  const guesser = await a.account('guesser@x.io', { verified: true });
  const second = await a.account('second@x.io', { verified: true });
  const real = await a.cp.store.coupons.create(5);
  const redeem = (p: Platform, key: string, coupon: string, address: string) =>
    p.call('POST', '/api/credits/redeem', { key, body: { coupon }, headers: from(address) });

  for (let i = 0; i < 4; i++) assert.equal((await redeem(i % 2 ? b : a, guesser.api_token!, `RC-GUESS-${i}`, '203.0.113.7')).status, 400, `guess ${i}`);
  for (const p of [a, b]) {
    const r = await redeem(p, guesser.api_token!, real.code, '198.51.100.1');
    assert.equal(r.status, 429, 'the account has used its 4 attempts, 2 on each control plane');
    assert.deepEqual(r.body, { detail: API_ERRORS.couponRateLimited.message });
  }
  // The address (6 an hour) has 2 left for another account, whichever control plane it reaches.
  assert.equal((await redeem(b, second.api_token!, 'RC-OTHER-1', '203.0.113.7')).status, 400);
  assert.equal((await redeem(a, second.api_token!, 'RC-OTHER-2', '203.0.113.7')).status, 400);
  assert.equal((await redeem(b, second.api_token!, real.code, '203.0.113.7')).status, 429);
  const ok = await redeem(a, second.api_token!, real.code, '192.0.2.50');
  assert.deepEqual([ok.status, ok.body], [200, { credits_added: 5, credits: 5 }]);
});

test('two control planes on one Redis: sign-ups per address count across both', async (t) => {
  if (!(await redisAvailable(t))) return;
  const { a, b } = await twoControlPlanes(t, { redisUrl: REDIS_URL, gateKeyPrefix: testPrefix(t), signupPerAddressPerHour: 3 });
  const signup = (p: Platform, i: number, address: string) =>
    p.call('POST', '/api/auth/signup', { body: { email: `sock${i}@example.com`, password: PASSWORD }, headers: from(address) });
  for (let i = 0; i < 3; i++) assert.equal((await signup(i % 2 ? b : a, i, '198.51.100.1')).status, 201);
  for (const [i, p] of [a, b].entries()) {
    const r = await signup(p, 10 + i, '198.51.100.1');
    assert.equal(r.status, 429, JSON.stringify(r.body));
    assert.match(r.body.detail, /sign-ups/);
  }
  // The verification-mail resend shares the bucket (each can send a mail).
  const resend = await b.call('POST', '/api/auth/verify-email/resend', { body: { email: 'sock0@example.com' }, headers: from('198.51.100.1') });
  assert.equal(resend.status, 429);
  assert.equal(await a.cp.store.accounts.byEmail('sock10@example.com'), undefined);
  assert.equal((await signup(b, 20, '198.51.100.2')).status, 201, 'another address is not affected');
});

test('Redis unreachable (a closed port): the control plane starts, its in-memory limits decide, and it says so', async (t) => {
  const lines: string[] = [];
  const logger = createLogger('warn', {}, (line) => lines.push(line));
  const dir = mkdtempSync(join(tmpdir(), 'rc-shared-limits-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const clock = new FakeClock();
  const p = await startPlatform({
    dataDir: dir,
    clock,
    logger,
    settings: { trustProxy: true, redisUrl: `redis://127.0.0.1:${await sparePort()}`, loginPerAddressPerMinute: 8, signupPerAddressPerHour: 1 },
  });
  t.after(() => p.close());
  await p.account('victim@example.com', { password: PASSWORD });

  for (let i = 0; i < 6; i++) assert.equal((await login(p, 'victim@example.com', `wrong password ${i}`, '198.51.100.1')).status, 401);
  const waited = await login(p, 'victim@example.com', PASSWORD, '198.51.100.1');
  assert.deepEqual([waited.status, waited.headers['retry-after']], [429, '1'], 'the pair rule, in memory');
  assert.equal((await login(p, 'victim@example.com', PASSWORD, '192.0.2.7')).status, 200, 'the user signs in');
  const signup = (i: number) =>
    p.call('POST', '/api/auth/signup', { body: { email: `new${i}@example.com`, password: PASSWORD }, headers: from('203.0.113.9') });
  assert.deepEqual([(await signup(1)).status, (await signup(2)).status], [201, 429], 'the sign-up bucket, in memory');
  assert.ok(
    lines.some((l) => /attempt limits: Redis unreachable, this process's in-memory limits decide/.test(l)),
    lines.join(''),
  );
});

test('Redis frozen, then thawed: attempts are answered within the timeout from memory, then shared in Redis again', async (t) => {
  const server = await PrivateRedis.start(t);
  if (!server) return;
  const prefix = `rc-test-limits-${randomUUID()}:`;
  const { a, b } = await twoControlPlanes(t, { redisUrl: server.url, gateKeyPrefix: prefix, authRedisTimeoutMs: 1000, signupPerAddressPerHour: 2 });
  const probe = client(t, server.url);
  const signup = (p: Platform, i: number, address: string) =>
    p.call('POST', '/api/auth/signup', { body: { email: `s${i}@example.com`, password: PASSWORD }, headers: from(address) });

  assert.equal((await signup(a, 1, '198.51.100.1')).status, 201);
  assert.equal(await probe.exists(`${prefix}auth:signup:198.51.100.1`), 1, 'counted in Redis');

  server.pause(true);
  t.after(() => server.pause(false));
  // Each control plane's memory decides: a fresh bucket of 2 on each.
  const frozen = [
    await signup(a, 2, '198.51.100.9'),
    await signup(a, 3, '198.51.100.9'),
    await signup(a, 4, '198.51.100.9'),
    await signup(b, 5, '198.51.100.9'),
  ];
  assert.deepEqual(
    frozen.map((r) => r.status),
    [201, 201, 429, 201],
  );

  server.pause(false);
  // Back on Redis once the backoff has passed (real time; the test clock stays where it is): a
  // sign-up from a new address each time until one is counted there.
  let n = 0;
  let address = '';
  await waitFor(
    async () => {
      address = `198.51.100.${100 + ++n}`;
      return (await signup(b, 100 + n, address)).status === 201 && (await probe.exists(`${prefix}auth:signup:${address}`)) === 1;
    },
    10_000,
    100,
  );
  assert.equal((await signup(a, 200, address)).status, 201);
  assert.equal((await signup(b, 201, address)).status, 429, 'the address has used its 2 sign-ups, one through each control plane');
  assert.equal((await signup(a, 202, address)).status, 429);
});
