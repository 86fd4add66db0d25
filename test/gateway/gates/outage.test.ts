// Redis going away and coming back, on a redis-server of the test's own: requests keep being
// admitted (in memory), the fallback is counted, the gates return to Redis, and nothing waits
// on Redis longer than the timeout.
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { Redis } from 'ioredis';
import { createGate, gateMetrics, GateRedisError, type RespClient } from '../../../gateway/gates/index.js';
import { counters } from '../../../gateway/gates/metrics.js';
import { admitted, connectRedis, gateConfig, PrivateRedis, req } from './fixtures.js';
import { waitFor } from '../../helpers.js';

const BIG = 1_000_000_000;
const DAY = 86_400_000;

test('Redis killed and restarted mid-run: requests keep succeeding, then the gates go back to Redis', async (t) => {
  const server = await PrivateRedis.start(t);
  if (!server) return;
  const config = gateConfig({ rpm: BIG, tpm: BIG, daily: BIG }, { redisUrl: server.url, gateRedisTimeoutMs: 500 });
  const gate = createGate(config); // its own client, as in production
  t.after(() => gate.close());
  await waitFor(() => gate.onRedis);
  const probe = new Redis(server.url, { maxRetriesPerRequest: 0, retryStrategy: () => 50 });
  probe.on('error', () => {});
  t.after(() => probe.disconnect());
  const dayKey = `${config.gateKeyPrefix}{acct:1}:d:${Math.floor(Date.now() / DAY)}`;

  const run = async (n: number) => {
    for (let i = 0; i < n; i++) {
      const r = req(1, 10);
      const d = admitted(await gate.admit(r));
      gate.settle(r, d, { inputTokens: 5, outputTokens: 5 });
    }
  };
  await run(10);
  assert.equal(await probe.hget(dayKey, 'requests'), '10');

  await server.kill();
  const fallbacks = counters.redisFallback;
  await run(20);
  assert.ok(counters.redisFallback - fallbacks >= 20, 'decided in memory while Redis was gone');
  assert.match(gateMetrics(), /^rc_gate_redis_up 0$/m);
  assert.match(gateMetrics(), /^rc_gate_redis_fallback_total [1-9]\d*$/m);
  await assert.rejects(gate.readUsage(1), GateRedisError);

  await server.restart();
  await waitFor(() => gate.onRedis, 15_000);
  assert.match(gateMetrics(), /^rc_gate_redis_up 1$/m);
  const back = counters.redisFallback;
  await run(5);
  assert.equal(counters.redisFallback, back, 'back on Redis');
  // The restarted Redis started empty: it holds exactly the requests made since.
  assert.equal(await probe.hget(dayKey, 'requests'), '5');
});

/** A gate deciding on a private Redis (100 ms timeout) that the test can freeze (`server.pause`); unfrozen and closed afterwards. */
async function gateOnPausableRedis(t: TestContext) {
  const server = await PrivateRedis.start(t);
  if (!server) return undefined;
  const redis = await connectRedis(server.url);
  t.after(() => redis.disconnect());
  const config = gateConfig({ rpm: BIG, tpm: BIG, daily: BIG }, { gateRedisTimeoutMs: 100 });
  const gate = createGate(config, { redis });
  t.after(() => gate.close());
  await waitFor(() => gate.onRedis);
  t.after(() => server.pause(false));
  return { server, redis, config, gate };
}

test('a frozen Redis: the request waits at most the timeout, and a late admission is handed back', async (t) => {
  const on = await gateOnPausableRedis(t);
  if (!on) return;
  const { server, config, gate } = on;

  server.pause(true);
  const timeouts = counters.redisTimeouts;
  const d = await gate.admit(req(1, 50));
  assert.equal(d.allowed, true, 'admitted by the in-memory gates');
  assert.equal(counters.redisTimeouts - timeouts, 1);
  assert.equal(gate.onRedis, false, 'later requests skip Redis for a moment instead of waiting too');
  admitted(await gate.admit(req(1, 50)));
  assert.equal(counters.redisTimeouts - timeouts, 1);

  server.pause(false);
  // The frozen admission ran when Redis woke; its reservation comes back (the request stays counted).
  const dayKey = `${config.gateKeyPrefix}{acct:1}:d:${Math.floor(Date.now() / DAY)}`;
  const probe = await connectRedis(server.url);
  t.after(() => probe.disconnect());
  await waitFor(async () => {
    const h = await probe.hgetall(dayKey);
    return h.requests === '1' && h.reserved === '0';
  });
});

test('one slow script call marks Redis down; the next call answered in time marks it up again, with no reconnect', async (t) => {
  const on = await gateOnPausableRedis(t);
  if (!on) return;
  const { server, redis, gate } = on;
  let readies = 0;
  redis.on('ready', () => readies++);

  server.pause(true);
  admitted(await gate.admit(req(1, 10))); // timed out: decided in memory
  assert.match(gateMetrics(), /^rc_gate_redis_up 0$/m);
  server.pause(false);
  // Past the back-off, a call goes to Redis again and is answered in time.
  const timeouts = counters.redisTimeouts;
  await waitFor(async () => {
    admitted(await gate.admit(req(1, 10)));
    return gateMetrics().includes('\nrc_gate_redis_up 1\n');
  }, 15_000);
  assert.equal(counters.redisTimeouts, timeouts, 'no more timeouts');
  assert.equal(readies, 0, 'the connection never went away: the answer, not a reconnect, marked it up');
  assert.equal(gate.onRedis, true);
});

test('a reply that came while the loop was busy past the deadline is not a timeout', async (t) => {
  // The timer fires in the loop's timers phase, before the poll phase reads the reply waiting in
  // the socket: the deadlines are judged after that read, so a busy process does not blame Redis.
  const server = await PrivateRedis.start(t);
  if (!server) return;
  const config = gateConfig({ rpm: BIG, tpm: BIG, daily: BIG }, { redisUrl: server.url, gateRedisTimeoutMs: 30 });
  const gate = createGate(config); // its own client: the turn's write happens in an immediate
  t.after(() => gate.close());
  await waitFor(() => gate.onRedis);
  admitted(await gate.admit(req(1, 10))); // the script is loaded
  const timeouts = counters.redisTimeouts;
  const fallbacks = counters.redisFallback;
  const decision = gate.admit(req(1, 10));
  // Queued after the client's write: once Redis has answered a PING sent after the admission, its
  // reply is in the socket; then the loop stays busy past the deadline.
  setImmediate(() => {
    execFileSync('redis-cli', ['-u', server.url, 'PING']);
    const until = performance.now() + 3 * config.gateRedisTimeoutMs;
    while (performance.now() < until) {}
  });
  admitted(await decision);
  assert.equal(counters.redisTimeouts, timeouts, 'no timeout');
  assert.equal(counters.redisFallback, fallbacks, 'decided in Redis');
  assert.equal(gate.onRedis, true);
});

test('a reconciliation made while the connection is down is replayed when it is back', async (t) => {
  const server = await PrivateRedis.start(t);
  if (!server) return;
  const config = gateConfig({ rpm: BIG, tpm: BIG, daily: BIG }, { redisUrl: server.url, gateRedisTimeoutMs: 1000 });
  const gate = createGate(config);
  t.after(() => gate.close());
  await waitFor(() => gate.onRedis);
  const client = gate.redis!.redis as RespClient; // the gate's own connection
  const r = req(3, 100);
  const a = admitted(await gate.admit(r));
  const id = await client.call('CLIENT', 'ID');
  const settledWhileDown = new Promise<number>((resolve) => {
    client.once('close', () => {
      gate.settle(r, a, { inputTokens: 30, outputTokens: 40 });
      resolve(gate.redis!.pendingSettles);
    });
  });
  const admin = await connectRedis(server.url);
  t.after(() => admin.disconnect());
  await admin.client('KILL', 'ID', String(id));
  assert.equal(await settledWhileDown, 1, 'held while the connection was down');
  await waitFor(() => gate.onRedis && gate.redis!.pendingSettles === 0, 15_000);
  const u = await waitFor(async () => {
    const x = await gate.readUsage(3);
    return x.tokens_used === 70 ? x : undefined;
  });
  assert.equal(u!.tokens_reserved, 0);
  assert.equal(u!.requests, 1);
});
