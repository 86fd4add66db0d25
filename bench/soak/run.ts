// `npm run bench:soak`: the whole platform (`rc start`, a child process) under mixed traffic of
// every kind for hours, reporting whether its memory stays flat: the RSS slope after the warm-up
// from quiet samples (traffic paused, nothing in flight), and the heap's growth by constructor
// between a snapshot at the end of the warm-up and one at the end.
//
// Writing a heap snapshot lifts the child's RSS by the snapshot's own working memory (a 2-hour run
// saw 216 -> 369 MB, settling over about 20 minutes), which a slope counted from that moment reads
// as growth or hides it. So the samples count from the end of a settle period after the baseline
// snapshot (RC_SOAK_SETTLE_MINUTES), and the report adds the slope over the last hour alone.
//
// Settings (environment): RC_SOAK_MINUTES (total, default 10), RC_SOAK_WARMUP_MINUTES (default
// 2; the slope and the heap growth count from there), RC_SOAK_SAMPLE_S (seconds between quiet
// samples, default 30), RC_SOAK_QUIET_MS (how long traffic stays paused before a sample, default
// 1000), RC_SOAK_WORKERS (closed-loop workers on the model routes and the platform API, each with
// an account of its own; default 3), RC_SOAK_PAUSE_MS (a worker's pause between operations, default
// 0: back to back; a pause keeps a long soak from taking the machine), RC_SOAK_REDIS=1 (Redis gates and bus at REDIS_URL),
// RC_SOAK_RUNTIME=process|docker (default process), RC_SOAK_HEAP=0 (no heap snapshots),
// RC_SOAK_SETTLE_MINUTES (after the baseline snapshot, minutes whose samples are not counted;
// default 15 with heap snapshots, 0 without),
// RC_BENCH_RESULTS_DIR (default ./bench/results).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { heapGroups, heapGrowth, rssMb, slopeMbPerHour, type HeapGroup, type RssSample } from './memory.js';
import { startSoakPlatform } from './platform.js';
import { Traffic } from './traffic.js';

const num = (name: string, fallback: number) => {
  const v = process.env[name];
  const n = v === undefined || v === '' ? fallback : Number(v);
  if (!Number.isFinite(n) || n < 0) throw new Error(`${name} must be a non-negative number, got ${JSON.stringify(v)}`);
  return n;
};

/** The model routes and the platform API, in the order a worker takes them (streams twice as often). */
const KINDS = [
  'chat',
  'chat-stream',
  'messages-stream',
  'chat-stream',
  'messages',
  'count-tokens',
  'responses',
  'messages-stream',
  'models',
  'me',
  'templates',
  'usage',
  'sign-in',
  'coupon',
  'rotate-key',
] as const;

async function main(): Promise<void> {
  const minutes = num('RC_SOAK_MINUTES', 10);
  const warmupMinutes = Math.min(num('RC_SOAK_WARMUP_MINUTES', 2), minutes);
  const sampleS = Math.max(1, num('RC_SOAK_SAMPLE_S', 30));
  const quietMs = num('RC_SOAK_QUIET_MS', 1000);
  const workers = Math.max(1, Math.floor(num('RC_SOAK_WORKERS', 3)));
  const pauseMs = num('RC_SOAK_PAUSE_MS', 0);
  const heap = process.env.RC_SOAK_HEAP !== '0';
  const settleMinutes = heap ? num('RC_SOAK_SETTLE_MINUTES', 15) : 0;
  const redisUrl = process.env.RC_SOAK_REDIS === '1' ? process.env.REDIS_URL || 'redis://127.0.0.1:6379' : '';
  const runtime = process.env.RC_SOAK_RUNTIME === 'docker' ? 'docker' : 'process';

  const p = await startSoakPlatform({ runtime, redisUrl });
  const traffic = new Traffic(p.api, p.gateway, p.tunnelsPort, p.dataDir, pauseMs);
  const samples: RssSample[] = [];
  let before: Map<string, HeapGroup> | undefined;
  let growth: HeapGroup[] = [];
  const started = Date.now();
  const elapsedS = () => (Date.now() - started) / 1000;
  const log = (line: string) => process.stdout.write(`[soak ${(elapsedS() / 60).toFixed(1)} min] ${line}\n`);
  try {
    const accounts = await Promise.all(Array.from({ length: workers + 1 }, (_, i) => traffic.account(`soak-${i}@example.com`)));
    log(`platform pid ${p.pid} up (${runtime} runtime, ${redisUrl ? 'Redis' : 'memory'} gates); ${workers} workers and a launcher`);
    const running = [traffic.launcher(accounts[0]!), ...accounts.slice(1).map((a, i) => traffic.worker(a, [...KINDS.slice(i), ...KINDS.slice(0, i)]))];

    const warmupEnd = warmupMinutes * 60;
    const countFrom = warmupEnd + settleMinutes * 60;
    let warm = warmupEnd === 0;
    if (warm && heap) before = heapGroups(await p.heapSnapshot());
    while (elapsedS() < minutes * 60) {
      await new Promise((r) => setTimeout(r, Math.min(sampleS * 1000, Math.max(0, minutes * 60 - elapsedS()) * 1000)));
      await traffic.quiesce();
      await new Promise((r) => setTimeout(r, quietMs));
      if (!warm && elapsedS() >= warmupEnd) {
        warm = true;
        if (heap) before = heapGroups(await p.heapSnapshot());
      }
      const sample = { atS: elapsedS(), rssMb: rssMb(p.pid) };
      const counted = warm && sample.atS >= countFrom;
      if (counted) samples.push(sample);
      traffic.resume();
      log(`rss ${sample.rssMb.toFixed(1)} MB${warm ? (counted ? '' : ' (settling after the snapshot)') : ' (warm-up)'}`);
    }
    await traffic.quiesce();
    if (heap && before) growth = heapGrowth(before, heapGroups(await p.heapSnapshot()));
    traffic.stop();
    await Promise.all(running);
  } finally {
    traffic.stop();
    await p.stop();
  }

  const failed = report({ minutes, warmupMinutes, settleMinutes, runtime, redis: !!redisUrl }, samples, traffic, growth);
  if (failed > 0) process.exitCode = 1;
}

interface SoakSettings {
  minutes: number;
  warmupMinutes: number;
  settleMinutes: number;
  runtime: string;
  redis: boolean;
}

/** Prints the figures, writes them as JSON into RC_BENCH_RESULTS_DIR, and returns the failed operations. */
function report(settings: SoakSettings, samples: RssSample[], traffic: Traffic, growth: HeapGroup[]): number {
  const { minutes, warmupMinutes, settleMinutes } = settings;
  const slope = slopeMbPerHour(samples);
  const lastHour = samples.filter((x) => x.atS >= (samples.at(-1)?.atS ?? 0) - 3600);
  const lastHourSlope = slopeMbPerHour(lastHour);
  const stats = Object.fromEntries(traffic.stats);
  const total = [...traffic.stats.values()].reduce((n, s) => n + s.ok + s.refused + s.failed, 0);
  const failed = [...traffic.stats.values()].reduce((n, s) => n + s.failed, 0);
  process.stdout.write(
    `\nsoak: ${minutes} min (${warmupMinutes} warm-up, ${settleMinutes} settling), ${total} operations, ${failed} failed (5xx or no answer)\n`,
  );
  process.stdout.write(
    `RSS after warm-up: ${samples[0]?.rssMb.toFixed(1) ?? '-'} -> ${samples.at(-1)?.rssMb.toFixed(1) ?? '-'} MB, slope ${slope.toFixed(1)} MB/h over ${samples.length} quiet samples; over the last hour ${lastHourSlope.toFixed(1)} MB/h (${lastHour.length} samples)\n`,
  );
  console.table(Object.entries(stats).map(([kind, s]) => ({ kind, ok: s.ok, refused: s.refused, failed: s.failed, example: s.examples[0] ?? '' })));
  if (growth.length) {
    process.stdout.write('\nheap growth after warm-up, by constructor (self size):\n');
    console.table(growth.map((g) => ({ name: g.name, objects: g.count, kb: Math.round(g.bytes / 1024) })));
  }
  const dir = resolve(process.env.RC_BENCH_RESULTS_DIR ?? './bench/results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `soak-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      {
        ...settings,
        slopeMbPerHour: slope,
        lastHourSlopeMbPerHour: lastHourSlope,
        samples,
        stats,
        heapGrowth: growth,
      },
      null,
      2,
    ),
  );
  process.stdout.write(`\nwrote ${file}\n`);
  return failed;
}

await main();
