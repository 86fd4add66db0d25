// `npm run bench:platform`: the platform API on each store in the same run. `rc start` runs as a
// child process on SQLite (its data dir) and then on PostgreSQL (a database of its own, dropped
// after), and the same closed-loop workloads run against each: the profile read (`me`), status polls
// of a live instance, sign-ins (sign in, a read with the session, sign out) and launch-to-ready-
// then-destroy cycles, at a concurrency of one account per worker. For each: operations per second,
// latency (p50, p99), and CPU per operation: the platform's process, plus on PostgreSQL the backends
// serving its database (what the engine spends for it), with PostgreSQL's total as a ratio to
// SQLite's.
//
// Settings (environment): RC_BENCH_PLATFORM_STORES (default sqlite,postgres),
// RC_BENCH_PLATFORM_WORKLOADS (default me,status,sign-in,launch-destroy), RC_BENCH_PLATFORM_SECONDS
// (measured seconds per workload, default 10), RC_BENCH_PLATFORM_WARMUP_S (default 2),
// RC_BENCH_PLATFORM_CONCURRENCY (workers, default 8), RC_BENCH_POSTGRES_URL (a server to create the
// database on; default postgres://postgres@127.0.0.1:5432/postgres), RC_BENCH_RESULTS_DIR.
import { randomBytes } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import pg from 'pg';
import { startSoakPlatform, type SoakPlatform } from '../soak/platform.js';
import { BackendCpu, processCpuMicros } from './cpu.js';
import { benchAccount, type BenchAccount, destroyGone, launchReady, operation, type Workload } from './workloads.js';

type StoreName = 'sqlite' | 'postgres';

interface Figures {
  store: StoreName;
  workload: Workload;
  ops: number;
  failed: number;
  opsPerS: number;
  p50Ms: number;
  p99Ms: number;
  /** CPU per operation, microseconds: the platform's process, and the database's backends (PostgreSQL). */
  platformUs: number;
  databaseUs: number;
}

const list = (name: string, fallback: string) =>
  (process.env[name] || fallback)
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
const num = (name: string, fallback: number) => (process.env[name] ? Number(process.env[name]) : fallback);

const settings = {
  stores: list('RC_BENCH_PLATFORM_STORES', 'sqlite,postgres') as StoreName[],
  workloads: list('RC_BENCH_PLATFORM_WORKLOADS', 'me,status,sign-in,launch-destroy') as Workload[],
  seconds: num('RC_BENCH_PLATFORM_SECONDS', 10),
  warmupS: num('RC_BENCH_PLATFORM_WARMUP_S', 2),
  concurrency: num('RC_BENCH_PLATFORM_CONCURRENCY', 8),
  postgresUrl: process.env.RC_BENCH_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/postgres',
};

/** Runs `op` from every account in a closed loop for `seconds`; latencies in ms. */
async function closedLoop(
  accounts: BenchAccount[],
  seconds: number,
  op: (a: BenchAccount) => Promise<void>,
): Promise<{ latencies: number[]; failed: number; errors: string[] }> {
  const latencies: number[] = [];
  const errors: string[] = [];
  let failed = 0;
  const end = Date.now() + seconds * 1000;
  await Promise.all(
    accounts.map(async (a) => {
      while (Date.now() < end) {
        const t0 = performance.now();
        try {
          await op(a);
          latencies.push(performance.now() - t0);
        } catch (err) {
          failed++;
          if (errors.length < 3) errors.push((err as Error).message);
        }
      }
    }),
  );
  return { latencies, failed, errors };
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))] ?? 0;

async function measure(store: StoreName, workload: Workload, platform: SoakPlatform, accounts: BenchAccount[], db: BackendCpu | undefined): Promise<Figures> {
  const op = (a: BenchAccount) => operation(workload, platform.api, a);
  await closedLoop(accounts, settings.warmupS, op);
  db?.takeMicros();
  const cpu0 = processCpuMicros(platform.pid);
  const t0 = performance.now();
  const { latencies, failed, errors } = await closedLoop(accounts, settings.seconds, op);
  const wallS = (performance.now() - t0) / 1000;
  const platformMicros = processCpuMicros(platform.pid) - cpu0;
  const databaseMicros = db?.takeMicros() ?? 0;
  for (const e of errors) console.error(`[${store} ${workload}] ${e}`);
  const sorted = latencies.sort((a, b) => a - b);
  const ops = sorted.length;
  return {
    store,
    workload,
    ops,
    failed,
    opsPerS: ops / wallS,
    p50Ms: percentile(sorted, 50),
    p99Ms: percentile(sorted, 99),
    platformUs: ops ? platformMicros / ops : 0,
    databaseUs: ops ? databaseMicros / ops : 0,
  };
}

/** A database of its own on the PostgreSQL server, and how to drop it. */
async function scratchDatabase(): Promise<{ url: string; name: string; drop(): Promise<void> }> {
  const name = `rc_bench_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: settings.postgresUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  await admin.end();
  const url = new URL(settings.postgresUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    name,
    async drop() {
      const c = new pg.Client({ connectionString: settings.postgresUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
      await c.end();
    },
  };
}

async function benchStore(store: StoreName): Promise<Figures[]> {
  const database = store === 'postgres' ? await scratchDatabase() : undefined;
  // Enough simulated GPUs for every worker's instance at once (the status workload holds one each).
  const env: Record<string, string> = { RC_AGENT_GPUS: String(Math.max(4, settings.concurrency)) };
  if (database) env.RC_DATABASE_URL = database.url;
  const platform = await startSoakPlatform({ runtime: 'process', redisUrl: '', env });
  try {
    const accounts: BenchAccount[] = [];
    for (let i = 0; i < settings.concurrency; i++) accounts.push(await benchAccount(platform.api, platform.dataDir, `bench-${i}@example.com`));
    const db = database && new BackendCpu(database.name);
    const figures: Figures[] = [];
    for (const workload of settings.workloads) {
      if (workload === 'status') await Promise.all(accounts.map((a) => launchReady(platform.api, a)));
      figures.push(await measure(store, workload, platform, accounts, db));
      if (workload === 'status') await Promise.all(accounts.map((a) => destroyGone(platform.api, a)));
      const f = figures.at(-1)!;
      console.log(
        `[${store}] ${workload}: ${f.opsPerS.toFixed(1)} ops/s, p50 ${f.p50Ms.toFixed(1)} ms, p99 ${f.p99Ms.toFixed(1)} ms, CPU ${f.platformUs.toFixed(0)} + ${f.databaseUs.toFixed(0)} µs/op${f.failed ? `, ${f.failed} failed` : ''}`,
      );
    }
    return figures;
  } finally {
    await platform.stop();
    await database?.drop();
  }
}

function report(all: Figures[]): string {
  const rows = [
    '| workload | store | ops/s | p50 ms | p99 ms | platform CPU µs/op | database CPU µs/op | total vs SQLite |',
    '|---|---|---|---|---|---|---|---|',
  ];
  for (const f of all) {
    const base = all.find((b) => b.store === 'sqlite' && b.workload === f.workload);
    const total = f.platformUs + f.databaseUs;
    const ratio = base && base.platformUs > 0 ? `${(total / (base.platformUs + base.databaseUs)).toFixed(2)}x` : '';
    rows.push(
      `| ${f.workload} | ${f.store} | ${f.opsPerS.toFixed(1)} | ${f.p50Ms.toFixed(1)} | ${f.p99Ms.toFixed(1)} | ${f.platformUs.toFixed(0)} | ${f.store === 'postgres' ? f.databaseUs.toFixed(0) : '-'} | ${ratio} |`,
    );
  }
  return rows.join('\n');
}

async function main(): Promise<void> {
  console.log(
    `platform API benchmark: ${settings.stores.join(', ')}; ${settings.workloads.join(', ')}; ${settings.concurrency} workers, ${settings.seconds} s each`,
  );
  const all: Figures[] = [];
  for (const store of settings.stores) all.push(...(await benchStore(store)));
  const table = report(all);
  console.log(`\n${table}`);
  const dir = resolve(process.env.RC_BENCH_RESULTS_DIR || 'bench/results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `platform-api-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, JSON.stringify({ settings, figures: all }, null, 2));
  console.log(`\nwritten to ${file}`);
}

await main();
