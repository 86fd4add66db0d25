// Benchmark of the gates (issue #5): the cost of one admission (plus its reconciliation) in
// memory, and with Redis the round trips per request and the latency added over one plain
// round trip (PING). In `npm run bench` as the micro suite "gates" (bench/micro/index.ts);
// standalone, with a concurrent Redis run too: `node dist/bench/gates.js [out.json]`.
// Redis: REDIS_URL (default redis://127.0.0.1:6379); without it the Redis tasks report an error.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Bench } from 'tinybench';
import { Redis } from 'ioredis';
import type { GateDecision, GateRequest, GateUsage } from '../gateway/gates/gate.js';
import { createGate, type GateConfig, type LimitGate } from '../gateway/gates/index.js';
import { counters } from '../gateway/gates/metrics.js';
import { randomId } from '../lib/ids.js';
import type { MicroSuite } from './micro/suite.js';

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
const BIG = 1_000_000_000;
const ACCOUNTS = 1024; // requests rotate over this many accounts
const usage: GateUsage = { inputTokens: 300, outputTokens: 200 };
const requests: GateRequest[] = Array.from({ length: ACCOUNTS }, (_, i) => ({ accountId: i + 1, model: 'bench-model', estimatedTokens: 800 }));

const config = (prefix: string, rpm = BIG): GateConfig => ({
  modelRpm: rpm,
  modelTpm: BIG,
  modelDailyTokens: 1e15,
  redisUrl: '',
  gateRedisTimeoutMs: 1000,
  gateKeyPrefix: prefix,
});

function admitAndSettle(gate: LimitGate, r: GateRequest): void {
  const d = gate.admit(r) as GateDecision;
  if (d.allowed) gate.settle(r, d, usage);
}

/** Redis for the Redis tasks, opened in their first hook and closed after their run phase. */
class RedisBenchState {
  client: Redis | undefined;
  gate: LimitGate | undefined;
  prefix = `rcbench:${randomId('', 6)}:`;
  calls = 0;
  requests = 0;
  async open(): Promise<void> {
    if (this.client) return;
    const client = new Redis(REDIS_URL, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true, retryStrategy: () => null });
    client.on('error', () => {});
    try {
      await client.connect();
    } catch (err) {
      client.disconnect();
      throw new Error(`Redis not reachable at ${REDIS_URL}: ${(err as Error).message}`);
    }
    this.client = client;
    this.gate = createGate(config(this.prefix), { redis: client });
  }
  async close(): Promise<void> {
    const c = this.client;
    if (!c) return;
    this.client = undefined;
    await this.gate?.close();
    const keys = await c.keys(`${this.prefix}*`);
    for (let i = 0; i < keys.length; i += 500) await c.del(...keys.slice(i, i + 500));
    c.disconnect();
  }
}

async function redisAdmitAndSettle(s: RedisBenchState, i: number): Promise<void> {
  const r = requests[i & (ACCOUNTS - 1)]!;
  const before = counters.redisCalls;
  const d = await s.gate!.admit(r);
  if (d.allowed) s.gate!.settle(r, d, usage);
  s.calls += counters.redisCalls - before;
  s.requests++;
}

export const gatesMicroSuite: MicroSuite = {
  name: 'gates',
  add(bench) {
    const memory = createGate(config('unused:'));
    const refusing = createGate(config('unused:', 1));
    refusing.admit(requests[0]!); // empties account 1's request bucket
    let i = 0;
    const s = new RedisBenchState();
    let j = 0;
    const closeAfterRun = async (mode?: string) => {
      if (mode === 'run') await s.close();
    };
    bench
      .add('gates: memory admit + settle', () => admitAndSettle(memory, requests[i++ & (ACCOUNTS - 1)]!), {
        afterAll: (mode) => {
          if (mode === 'run') void memory.close();
        },
      })
      .add(
        'gates: memory admit refused (429)',
        () => {
          refusing.admit(requests[0]!);
        },
        {
          afterAll: (mode) => {
            if (mode === 'run') void refusing.close();
          },
        },
      )
      .add('gates: Redis admit (+ settle sent)', () => redisAdmitAndSettle(s, j++), {
        beforeAll: () => s.open(),
        afterAll: async (mode) => {
          if (mode === 'run' && s.requests)
            process.stdout.write(`gates: ${(s.calls / s.requests).toFixed(2)} Redis script calls per admitted request (admission + reconciliation)\n`);
          await closeAfterRun(mode);
        },
      })
      .add(
        'gates: Redis PING (one round trip, baseline)',
        async () => {
          await s.client!.ping();
        },
        {
          beforeAll: () => s.open(),
          afterAll: closeAfterRun,
        },
      );
  },
};

export interface GatesBenchResult {
  micro: { task: string; meanUs: number; p99Us: number; opsPerSec: number }[];
  redis?: {
    scriptCallsPerRequest: number;
    /** Mean admission latency minus mean PING latency, sequential (µs). */
    addedLatencyUs: number;
    /** With `concurrency` admissions in flight at once. */
    concurrent: { concurrency: number; admissionsPerSec: number; pingsPerSec: number };
  };
}

/** Standalone run: the micro tasks, then a concurrent comparison of admissions and PINGs. */
export async function runGatesBench(concurrency = 32, total = 20_000): Promise<GatesBenchResult> {
  const bench = new Bench({ name: 'gates', time: 500 });
  gatesMicroSuite.add(bench);
  await bench.run();
  console.table(bench.table());
  const micro = bench.tasks.flatMap((t) =>
    t.result.state === 'completed'
      ? [{ task: t.name, meanUs: t.result.latency.mean * 1000, p99Us: t.result.latency.p99 * 1000, opsPerSec: t.result.throughput.mean }]
      : [],
  );
  const out: GatesBenchResult = { micro };
  const admit = micro.find((m) => m.task.startsWith('gates: Redis admit'));
  const ping = micro.find((m) => m.task.startsWith('gates: Redis PING'));
  if (!admit || !ping) return out;

  const s = new RedisBenchState();
  await s.open();
  try {
    const rate = async (fn: (k: number) => Promise<unknown>) => {
      let next = 0;
      const t0 = performance.now();
      await Promise.all(
        Array.from({ length: concurrency }, async () => {
          while (next < total) await fn(next++);
        }),
      );
      return (total / (performance.now() - t0)) * 1000;
    };
    const callsBefore = counters.redisCalls;
    const admissionsPerSec = await rate((k) => redisAdmitAndSettle(s, k));
    const scriptCallsPerRequest = (counters.redisCalls - callsBefore) / total;
    const pingsPerSec = await rate(() => s.client!.ping());
    out.redis = {
      scriptCallsPerRequest,
      addedLatencyUs: admit.meanUs - ping.meanUs,
      concurrent: { concurrency, admissionsPerSec, pingsPerSec },
    };
  } finally {
    await s.close();
  }
  const r = out.redis;
  console.table([
    {
      'script calls per request': r.scriptCallsPerRequest,
      'added latency over PING (µs, sequential)': Math.round(r.addedLatencyUs),
      [`admissions/s (${concurrency} in flight)`]: Math.round(r.concurrent.admissionsPerSec),
      [`PINGs/s (${concurrency} in flight)`]: Math.round(r.concurrent.pingsPerSec),
    },
  ]);
  return out;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const result = await runGatesBench();
  const file = process.argv[2] ?? 'gates-bench.json';
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n');
  process.stdout.write(`results: ${file}\n`);
}
