// What only the Redis store does: hash-tagged keys with TTLs, one script call per account and
// event-loop turn, EVALSHA with the EVAL fallback, Redis' own clock, and one decision for
// many clients at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeClock } from '../../../lib/clock.js';
import { createGate } from '../../../gateway/gates/index.js';
import { counters } from '../../../gateway/gates/metrics.js';
import { admitted, connectRedis, denied, gateConfig, makeGate, PrivateRedis, req, type Admitted } from './fixtures.js';
import { dropKeys, REDIS_URL, redisAvailable, waitFor } from '../../helpers.js';

const BIG = 1_000_000_000;
const DAY = 86_400_000;

test('keys carry the account hash tag and expire', async (t) => {
  const g = await makeGate(t, 'redis', { rpm: 60, tpm: 6000, daily: BIG });
  if (!g) return;
  const r = req(42, 600);
  const a = admitted(await g.gate.admit(r));
  g.gate.settle(r, a, { inputTokens: 10, outputTokens: 20 });
  await g.gate.readUsage(42); // ordered after the settle on the same connection
  const day = Math.floor(g.clock.now() / DAY);
  const hour = new Date(g.clock.now()).getUTCHours();
  const keys = (await g.redis!.keys(`${g.prefix}*`)).sort();
  assert.deepEqual(keys, [`${g.prefix}{acct:42}:b`, `${g.prefix}{acct:42}:d:${day}`]);
  const bucketTtl = await g.redis!.pttl(`${g.prefix}{acct:42}:b`);
  // Tokens refill 100 per second: 6000 - 5990 = 10 tokens missing after the refund, requests 1 s.
  assert.ok(bucketTtl > 0 && bucketTtl <= 2000, `bucket TTL ${bucketTtl}`);
  const dayTtl = await g.redis!.ttl(`${g.prefix}{acct:42}:d:${day}`);
  assert.ok(dayTtl > 7 * 86400 && dayTtl <= 8 * 86400, `day TTL ${dayTtl}`);
  assert.deepEqual(await g.redis!.hgetall(`${g.prefix}{acct:42}:d:${day}`), {
    reserved: '0',
    requests: '1',
    tokens: '30',
    'n:sim-chat': '1',
    'i:sim-chat': '10',
    'o:sim-chat': '20',
    [`ht:${hour}:sim-chat`]: '30',
    [`hn:${hour}:sim-chat`]: '1',
  });
});

test('one script call per account and event-loop turn, each call applied in order', async (t) => {
  const g = await makeGate(t, 'redis', { rpm: BIG, tpm: BIG, daily: BIG });
  if (!g) return;
  admitted(await g.gate.admit(req(1, 1))); // warm
  const before = counters.redisCalls;
  const decisions = [];
  // One admission per turn: one call each.
  for (let i = 0; i < 20; i++) decisions.push(admitted(await g.gate.admit(req(1, 5))));
  assert.equal(counters.redisCalls - before, 20);
  // Twenty reconciliations of one turn: one call, sent before a usage read of the same turn.
  for (const d of decisions) g.gate.settle(req(1, 5), d, { inputTokens: 1, outputTokens: 1 });
  const u = await g.gate.readUsage(1);
  assert.equal(counters.redisCalls - before, 21);
  assert.equal(u.tokens_used, 40);
  assert.equal(u.tokens_reserved, 1, 'only the warm-up request is still reserved');
  assert.equal(u.requests, 21);
  // Two accounts in one turn: one call each.
  await Promise.all([g.gate.admit(req(2, 1)), g.gate.admit(req(3, 1)), g.gate.admit(req(2, 1))]);
  assert.equal(counters.redisCalls - before, 23);
});

test('admissions of one turn are decided in the order they were made', async (t) => {
  const g = await makeGate(t, 'redis', { rpm: 10, tpm: BIG, daily: BIG });
  if (!g) return;
  const before = counters.redisCalls;
  const burst = await Promise.all(Array.from({ length: 25 }, () => g.gate.admit(req(4, 1))));
  assert.equal(counters.redisCalls - before, 1, 'one script call for the whole burst');
  assert.deepEqual(
    burst.map((d) => d.allowed),
    Array.from({ length: 25 }, (_, i) => i < 10),
  );
  // Each admission saw the bucket as the one before it left it.
  assert.deepEqual(
    burst.slice(0, 10).map((d) => d.headers['x-ratelimit-remaining-requests']),
    ['9', '8', '7', '6', '5', '4', '3', '2', '1', '0'],
  );
  // A reconciliation and an admission in one turn: the admission sees the refund.
  const tight = await makeGate(t, 'redis', { rpm: BIG, tpm: 100, daily: BIG });
  if (!tight) return;
  const first = admitted(await tight.gate.admit(req(5, 100)));
  tight.gate.settle(req(5, 100), first, { inputTokens: 10, outputTokens: 10 });
  const next = await tight.gate.admit(req(5, 80));
  assert.equal(next.allowed, true, 'the 80 tokens refunded in the same turn were there for it');
});

for (const client of ['redis', 'resp'] as const)
  test(`a turn of only reconciliations waits one loop iteration and goes with the next admissions (${client})`, async (t) => {
    const g = await makeGate(t, client, { rpm: BIG, tpm: 100, daily: BIG });
    if (!g) return;
    const first = admitted(await g.gate.admit(req(6, 100)));
    const calls = counters.redisCalls;
    g.gate.settle(req(6, 100), first, { inputTokens: 10, outputTokens: 10 });
    // Queued after the turn's write: the reconciliation was not in it.
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(counters.redisCalls, calls, 'held');
    const next = admitted(await g.gate.admit(req(6, 80)));
    assert.equal(counters.redisCalls - calls, 1, 'one script call for the reconciliation and the admission');
    assert.equal(next.headers['x-ratelimit-remaining-tokens'], '0', 'the 80 tokens refunded first were there for it');
    // Alone, a reconciliation still goes, a loop iteration later.
    g.gate.settle(req(6, 80), next, { inputTokens: 30, outputTokens: 20 });
    await waitFor(() => counters.redisCalls - calls === 2);
    const u = await g.gate.readUsage(6);
    assert.equal(u.tokens_used, 70);
    assert.equal(u.tokens_reserved, 0);
  });

for (const client of ['redis', 'resp'] as const)
  test(`without a clock the buckets run on Redis TIME (${client})`, async (t) => {
    if (!(await redisAvailable(t))) return;
    const redis = await connectRedis();
    const config = gateConfig({ rpm: 2, tpm: BIG, daily: BIG });
    const gate = client === 'resp' ? createGate({ ...config, redisUrl: REDIS_URL }) : createGate(config, { redis });
    await waitFor(() => gate.onRedis);
    t.after(async () => {
      await gate.close();
      await dropKeys(redis, config.gateKeyPrefix);
      redis.disconnect();
    });
    admitted(await gate.admit(req(5, 1)));
    admitted(await gate.admit(req(5, 1)));
    const d = denied(await gate.admit(req(5, 1)));
    assert.equal(d.code, 'request_rate_limit_exceeded');
    assert.ok(d.retryAfterSec >= 1 && d.retryAfterSec <= 30, `Retry-After ${d.retryAfterSec}`);
    const [sec] = await redis.time();
    const ts = Number(await redis.hget(`${config.gateKeyPrefix}{acct:5}:b`, 'ts'));
    assert.ok(Math.abs(ts - Number(sec) * 1000) < 60_000, 'the bucket time is Redis time');
  });

for (const client of ['redis', 'resp'] as const)
  test(`after SCRIPT FLUSH the store falls back to EVAL and carries on in Redis (${client})`, async (t) => {
    const server = await PrivateRedis.start(t);
    if (!server) return;
    const redis = await connectRedis(server.url);
    t.after(() => redis.disconnect());
    const config = gateConfig({ rpm: BIG, tpm: BIG, daily: BIG });
    const clock = new FakeClock();
    const gate = client === 'resp' ? createGate({ ...config, redisUrl: server.url }, { clock }) : createGate(config, { redis, clock });
    t.after(() => gate.close());
    await waitFor(() => gate.onRedis);
    admitted(await gate.admit(req(1, 1)));
    await redis.script('FLUSH');
    const calls = counters.redisCalls;
    const fallbacks = counters.redisFallback;
    const r = req(1, 1);
    const a = admitted(await gate.admit(r));
    assert.equal(counters.redisCalls - calls, 2, 'EVALSHA answered NOSCRIPT, then EVAL');
    assert.equal(counters.redisFallback, fallbacks, 'still decided in Redis');
    gate.settle(r, a, { inputTokens: 1, outputTokens: 0 });
    const u = await gate.readUsage(1);
    assert.equal(u.requests, 2);
  });

test('many clients at once never admit more than the limit', async (t) => {
  if (!(await redisAvailable(t))) return;
  const clients = await Promise.all([connectRedis(), connectRedis(), connectRedis()]);
  // Shared prefix: three "gateways" on one Redis. Daily cap 100 (no refill, so real time is fine).
  const config = gateConfig({ rpm: BIG, tpm: BIG, daily: 100 });
  const clock = new FakeClock(); // and the request bucket, on one fake clock: rpm 50
  const gates = clients.map((redis) => createGate(config, { redis }));
  const rpmConfig = { ...gateConfig({ rpm: 50, tpm: BIG, daily: BIG }), gateKeyPrefix: config.gateKeyPrefix + 'rpm:' };
  const rpmGates = clients.map((redis) => createGate(rpmConfig, { redis, clock }));
  t.after(async () => {
    for (const g of [...gates, ...rpmGates]) await g.close();
    await dropKeys(clients[0]!, config.gateKeyPrefix);
    for (const c of clients) c.disconnect();
  });
  const fallbacks = counters.redisFallback;
  const daily = await Promise.all(Array.from({ length: 300 }, (_, i) => gates[i % 3]!.admit(req(9, 1))));
  assert.equal(daily.filter((d) => d.allowed).length, 100);
  assert.ok(daily.filter((d) => !d.allowed).every((d) => !d.allowed && d.code === 'daily_token_cap_exceeded'));
  const rpm = await Promise.all(Array.from({ length: 150 }, (_, i) => rpmGates[i % 3]!.admit(req(9, 1))));
  assert.equal(rpm.filter((d) => d.allowed).length, 50);
  assert.equal(counters.redisFallback, fallbacks, 'every decision was taken in Redis');
});

test('an enormous estimate against a tiny bucket stays a decision in Redis (no script error)', async (t) => {
  const g = await makeGate(t, 'redis', { rpm: BIG, tpm: 1, daily: 1e15 });
  if (!g) return;
  const fallbacks = counters.redisFallback;
  const errors = counters.redisErrors;
  const r = req(11, 1e14); // clamped to 1e11 tokens
  const a = admitted(await g.gate.admit(r));
  const d = denied(await g.gate.admit(req(11, 1)));
  assert.equal(d.code, 'token_rate_limit_exceeded');
  assert.ok(d.retryAfterSec > 86400 * 365, `Retry-After ${d.retryAfterSec}`);
  g.gate.settle(r, a, { inputTokens: 1e14, outputTokens: 1e14 });
  await g.gate.readUsage(11);
  const ttl = await g.redis!.pttl(`${g.prefix}{acct:11}:b`);
  assert.ok(ttl > 0 && ttl <= 30 * 86_400_000, `bucket TTL ${ttl}`);
  assert.equal(counters.redisFallback, fallbacks);
  assert.equal(counters.redisErrors, errors);
});

// Two sets of limits: the first refuses by the request and token buckets, the second by the daily cap.
// Through an ioredis client (evalshaBuffer) and through the gate's own connection (the calls written
// straight into the command, resp-client.ts commandThen).
for (const [client, limits] of [
  ['redis', { rpm: 8, tpm: 1200, daily: 3000 }],
  ['redis', { rpm: 10, tpm: 1500, daily: 1500 }],
  ['resp', { rpm: 8, tpm: 1200, daily: 3000 }],
  ['resp', { rpm: 10, tpm: 1500, daily: 1500 }],
] as const) {
  test(`calls batched in one turn decide exactly as the in-memory gates deciding one at a time (${client}, ${JSON.stringify(limits)})`, async (t) => {
    const redis = await makeGate(t, client, limits);
    if (!redis) return;
    const memory = (await makeGate(t, 'memory', limits))!;
    // A small deterministic generator: the same sequence for both stores.
    let seed = 12345;
    const rand = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2147483648;
      return Math.floor(seed / 65536) % n; // the high bits: the low ones of this generator cycle quickly
    };
    type Open = { r: ReturnType<typeof req>; a: Admitted };
    const open: [Open[], Open[]] = [[], []];
    const decisions: [boolean[], boolean[]] = [[], []];
    const recounts: [number, number] = [0, 0];
    for (let turn = 0; turn < 12; turn++) {
      // One turn: reconciliations of earlier admissions and new admissions, three accounts mixed.
      const settles: { k: number; input: number; output: number }[] = [];
      for (let n = Math.min(rand(4), open[0].length); n > 0; n--) settles.push({ k: rand(1000), input: rand(60), output: rand(200) });
      // Half of them give their input (the exact caps: a default output shrinks to what is left).
      const admits = Array.from({ length: 2 + rand(8) }, () => {
        const r = req(1 + rand(3), 20 + rand(300));
        if (rand(2) === 0) return r;
        // And half of those say their input is a bound (a bound that bites answers recount, consuming nothing).
        return { ...r, inputTokens: rand(20), defaultOutput: rand(2) === 0, recountBelow: rand(2) === 0 ? 1 + rand(400) : undefined };
      });
      const pause = 700 + rand(2000);
      const results: unknown[][] = [];
      for (const [i, g] of [redis, memory].entries()) {
        const mine = open[i as 0 | 1];
        for (const s of settles) {
          const [o] = mine.splice(s.k % mine.length, 1);
          g.gate.settle(o!.r, o!.a, { inputTokens: s.input, outputTokens: s.output });
        }
        // Account 2's limits change in mid-turn: its earlier reservations settle under the old
        // ones, its new admissions run under the new ones (two script calls in one turn).
        if (turn === 6) g.limits.set(2, { rpm: 3, tpm: 700 });
        if (turn === 9) g.limits.set(2, null);
        const ds = await Promise.all(admits.map((r) => g.gate.admit(r)));
        ds.forEach((d, j) => {
          if (d.allowed) mine.push({ r: admits[j]!, a: d });
        });
        // What the caller sees of each decision: the verdict, the bucket levels and waits in the headers.
        results.push(
          ds.map((d) => (d.allowed ? [true, d.headers, d.maxOutputTokens, d.reservedTokens] : [false, d.headers, d.code, d.retryAfterSec, d.recount])),
        );
        decisions[i as 0 | 1].push(...ds.map((d) => d.allowed));
        recounts[i as 0 | 1] += ds.filter((d) => !d.allowed && d.recount).length;
        g.clock.advance(pause);
      }
      assert.deepEqual(results[0], results[1], `turn ${turn}`);
    }
    assert.ok(decisions[0].includes(true) && decisions[0].includes(false), 'the sequence both admits and refuses');
    assert.ok(recounts[0] > 0 && recounts[0] === recounts[1], `recounts: ${recounts.join(', ')}`);
    for (const account of [1, 2, 3]) {
      assert.deepEqual(await redis.gate.readUsage(account), await memory.gate.readUsage(account), `account ${account}`);
    }
  });
}
