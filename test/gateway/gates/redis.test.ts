// What only the Redis store does: hash-tagged keys with TTLs, one round trip per admission and
// per reconciliation, EVALSHA with the EVAL fallback, Redis' own clock, and one decision for
// many clients at once.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeClock } from '../../../lib/clock.js';
import { createGate } from '../../../gateway/gates/index.js';
import { counters } from '../../../gateway/gates/metrics.js';
import { admitted, connectRedis, denied, dropKeys, gateConfig, makeGate, PrivateRedis, req } from './fixtures.js';
import { redisAvailable } from '../../helpers.js';

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

test('one script call per admission and one per reconciliation', async (t) => {
  const g = await makeGate(t, 'redis', { rpm: BIG, tpm: BIG, daily: BIG });
  if (!g) return;
  admitted(await g.gate.admit(req(1, 1))); // warm
  const before = counters.redisCalls;
  const decisions = [];
  for (let i = 0; i < 20; i++) decisions.push(admitted(await g.gate.admit(req(1, 5))));
  assert.equal(counters.redisCalls - before, 20);
  for (const d of decisions) g.gate.settle(req(1, 5), d, { inputTokens: 1, outputTokens: 1 });
  assert.equal(counters.redisCalls - before, 40);
  const u = await g.gate.readUsage(1);
  assert.equal(u.tokens_used, 40);
  assert.equal(u.requests, 21);
});

test('without a clock the buckets run on Redis TIME', async (t) => {
  if (!(await redisAvailable(t))) return;
  const redis = await connectRedis();
  const config = gateConfig({ rpm: 2, tpm: BIG, daily: BIG });
  const gate = createGate(config, { redis });
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

test('after SCRIPT FLUSH the store falls back to EVAL and carries on in Redis', async (t) => {
  const server = await PrivateRedis.start(t);
  if (!server) return;
  const redis = await connectRedis(server.url);
  t.after(() => redis.disconnect());
  const gate = createGate(gateConfig({ rpm: BIG, tpm: BIG, daily: BIG }), { redis, clock: new FakeClock() });
  t.after(() => gate.close());
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
