// `npm run bench:soak`: the whole platform (`rc start`, a child process) under mixed traffic of
// every kind for hours, reporting whether its memory stays flat: the RSS slope after the warm-up
// from quiet samples (traffic paused, nothing in flight, then a full collection asked of the child
// through its inspector, so a sample reads what the process retains and not where its garbage
// stands in the GC's sawtooth), and the heap's growth by constructor between a snapshot at the end
// of the warm-up and one at the end, with what holds the objects allocated in between.
//
// Writing a heap snapshot lifts the child's RSS by the snapshot's own working memory, which glibc
// keeps in its main arena once freed (a 2-hour run saw 216 -> 369 MB; a 25-minute one, the arena
// 16 -> 207 MB for a 32 MB snapshot), which a slope counted from that moment reads as growth or
// hides it. So the samples count from the end of a settle period after the baseline
// snapshot (RC_SOAK_SETTLE_MINUTES), and the report adds the slope over the last hour alone and
// the slope of V8's heap in use (which the snapshot's native memory does not touch).
//
// Settings (environment): RC_SOAK_MINUTES (total, default 10), RC_SOAK_WARMUP_MINUTES (default
// 2; the slope and the heap growth count from there), RC_SOAK_SAMPLE_S (seconds between quiet
// samples, default 30), RC_SOAK_QUIET_MS (how long traffic stays paused before a sample, default
// 1000), RC_SOAK_WORKERS (closed-loop workers on the model routes and the platform API, each with
// an account of its own; default 3), RC_SOAK_PAUSE_MS (a worker's pause between operations, default
// 0: back to back; a pause keeps a long soak from taking the machine), RC_SOAK_REDIS=1 (Redis gates and bus at REDIS_URL),
// RC_SOAK_RUNTIME=process|docker (default process), RC_SOAK_HEAP=0 (no heap snapshots),
// RC_SOAK_SETTLE_MINUTES (after the baseline snapshot, minutes whose samples are not counted;
// default 15 with heap snapshots, 0 without), RC_SOAK_KEEP_SNAPSHOTS=<dir> (keep the two heap
// snapshots there, to open in DevTools or compare with compare.ts), RC_BENCH_RESULTS_DIR
// (default ./bench/results).
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type HeapGroup, HeapSnapshot, type HeldGroup, heapGrowth, heldLine } from './heap-snapshot.js';
import { rssMb, slopeMbPerHour, type RssSample } from './memory.js';
import { type SoakPlatform, startSoakPlatform } from './platform.js';
import { Traffic } from './traffic.js';
import { simOptionsSchema } from '../../sim/options.js';

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
  const keepDir = process.env.RC_SOAK_KEEP_SNAPSHOTS || undefined;
  const redisUrl = process.env.RC_SOAK_REDIS === '1' ? process.env.REDIS_URL || 'redis://127.0.0.1:6379' : '';
  const runtime = process.env.RC_SOAK_RUNTIME === 'docker' ? 'docker' : 'process';

  const p = await startSoakPlatform({ runtime, redisUrl });
  const traffic = new Traffic(p.api, p.gateway, p.tunnelsPort, p.dataDir, pauseMs);
  const samples: RssSample[] = [];
  const heapWatch = heap ? new HeapWatch(p, keepDir) : undefined;
  const started = Date.now();
  const elapsedS = () => (Date.now() - started) / 1000;
  const log = (line: string) => process.stdout.write(`[soak ${(elapsedS() / 60).toFixed(1)} min] ${line}\n`);
  try {
    const accounts = await Promise.all(Array.from({ length: workers + 1 }, (_, i) => traffic.account(`soak-${i}@example.com`)));
    log(`platform pid ${p.pid} up (${runtime} runtime, ${redisUrl ? 'Redis' : 'memory'} gates); ${workers} workers and a launcher`);
    const blocks = simOptionsSchema.parse({ model: 'sim-chat' }).kvCacheBlocks;
    log(`sim-chat's prefix cache filled: ${await traffic.fillPrefixCache(accounts[0]!, blocks)} blocks sent (capacity ${blocks})`);
    const running = [traffic.launcher(accounts[0]!), ...accounts.slice(1).map((a, i) => traffic.worker(a, [...KINDS.slice(i), ...KINDS.slice(0, i)]))];

    const warmupEnd = warmupMinutes * 60;
    const countFrom = warmupEnd + settleMinutes * 60;
    let warm = warmupEnd === 0;
    if (warm) await heapWatch?.baseline();
    while (elapsedS() < minutes * 60) {
      await new Promise((r) => setTimeout(r, Math.min(sampleS * 1000, Math.max(0, minutes * 60 - elapsedS()) * 1000)));
      await traffic.quiesce();
      await new Promise((r) => setTimeout(r, quietMs));
      if (!warm && elapsedS() >= warmupEnd) {
        warm = true;
        await heapWatch?.baseline();
      }
      const sample = await quietSample(p, elapsedS());
      const counted = warm && sample.atS >= countFrom;
      if (counted) samples.push(sample);
      traffic.resume();
      log(`rss ${sample.rssMb.toFixed(1)} MB, heap ${sample.heapMb?.toFixed(1)} MB${warm ? (counted ? '' : ' (settling after the snapshot)') : ' (warm-up)'}`);
    }
    await traffic.quiesce();
    const grown = await heapWatch?.compare();
    traffic.stop();
    await Promise.all(running);
    const failed = report({ minutes, warmupMinutes, settleMinutes, runtime, redis: !!redisUrl }, samples, traffic, grown);
    if (failed > 0) process.exitCode = 1;
  } finally {
    traffic.stop();
    await p.stop();
  }
}

/** RSS and V8's heap in use, read after a full collection (the traffic is paused by the caller). */
async function quietSample(p: SoakPlatform, atS: number): Promise<RssSample> {
  await p.inspector.collectGarbage();
  const heapMb = (await p.inspector.heapUsed()) / 2 ** 20;
  return { atS, rssMb: rssMb(p.pid), heapMb };
}

interface HeapReport {
  growth: HeapGroup[];
  held: HeldGroup[];
}

/** The heap at the end of the warm-up, and what grew and what holds it at the end. */
class HeapWatch {
  private before: { groups: Map<string, HeapGroup>; maxId: number } | undefined;

  constructor(
    private readonly p: SoakPlatform,
    private readonly keepDir: string | undefined,
  ) {}

  async baseline(): Promise<void> {
    const s = await this.snapshot('warm');
    this.before = { groups: s.groups(), maxId: s.maxId() };
  }

  async compare(): Promise<HeapReport | undefined> {
    if (!this.before) return undefined;
    const s = await this.snapshot('end');
    return { growth: heapGrowth(this.before.groups, s.groups()), held: s.heldSince(this.before.maxId) };
  }

  private async snapshot(tag: string): Promise<HeapSnapshot> {
    const text = await this.p.inspector.heapSnapshot();
    if (this.keepDir) {
      mkdirSync(this.keepDir, { recursive: true });
      const file = join(this.keepDir, `soak-${stamp()}-${tag}.heapsnapshot`);
      writeFileSync(file, text);
      process.stdout.write(`kept ${file}\n`);
    }
    return new HeapSnapshot(text);
  }
}

const stamp = () => new Date().toISOString().replace(/[:.]/g, '-');

interface SoakSettings {
  minutes: number;
  warmupMinutes: number;
  settleMinutes: number;
  runtime: string;
  redis: boolean;
}

/** Prints the figures, writes them as JSON into RC_BENCH_RESULTS_DIR, and returns the failed operations. */
function report(settings: SoakSettings, samples: RssSample[], traffic: Traffic, heap: HeapReport | undefined): number {
  const { minutes, warmupMinutes, settleMinutes } = settings;
  const slope = slopeMbPerHour(samples);
  const lastHour = samples.filter((x) => x.atS >= (samples.at(-1)?.atS ?? 0) - 3600);
  const lastHourSlope = slopeMbPerHour(lastHour);
  const heapSlope = slopeMbPerHour(samples, (x) => x.heapMb ?? 0);
  const stats = Object.fromEntries(traffic.stats);
  const total = [...traffic.stats.values()].reduce((n, s) => n + s.ok + s.refused + s.failed, 0);
  const failed = [...traffic.stats.values()].reduce((n, s) => n + s.failed, 0);
  process.stdout.write(
    `\nsoak: ${minutes} min (${warmupMinutes} warm-up, ${settleMinutes} settling), ${total} operations, ${failed} failed (5xx or no answer)\n`,
  );
  process.stdout.write(
    `RSS after warm-up: ${samples[0]?.rssMb.toFixed(1) ?? '-'} -> ${samples.at(-1)?.rssMb.toFixed(1) ?? '-'} MB, slope ${slope.toFixed(1)} MB/h over ${samples.length} quiet samples; over the last hour ${lastHourSlope.toFixed(1)} MB/h (${lastHour.length} samples)\n`,
  );
  process.stdout.write(
    `V8 heap in use after a full collection: ${samples[0]?.heapMb?.toFixed(1) ?? '-'} -> ${samples.at(-1)?.heapMb?.toFixed(1) ?? '-'} MB, slope ${heapSlope.toFixed(1)} MB/h\n`,
  );
  console.table(Object.entries(stats).map(([kind, s]) => ({ kind, ok: s.ok, refused: s.refused, failed: s.failed, example: s.examples[0] ?? '' })));
  if (heap) printHeap(heap);
  const dir = resolve(process.env.RC_BENCH_RESULTS_DIR ?? './bench/results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `soak-${stamp()}.json`);
  writeFileSync(
    file,
    JSON.stringify(
      {
        ...settings,
        slopeMbPerHour: slope,
        lastHourSlopeMbPerHour: lastHourSlope,
        heapSlopeMbPerHour: heapSlope,
        samples,
        stats,
        heapGrowth: heap?.growth ?? [],
        heapHeldBy: heap?.held ?? [],
      },
      null,
      2,
    ),
  );
  process.stdout.write(`\nwrote ${file}\n`);
  return failed;
}

/** The heap's growth by constructor, and the new objects by what holds them. */
function printHeap(heap: HeapReport): void {
  process.stdout.write('\nheap growth after warm-up, by constructor (self size):\n');
  console.table(heap.growth.map((g) => ({ name: g.name, objects: g.count, kb: Math.round(g.bytes / 1024) })));
  process.stdout.write('\nobjects allocated after warm-up and still held, by what holds them (the path from the GC roots, its last steps):\n');
  for (const h of heap.held) process.stdout.write(`  ${heldLine(h)}\n`);
}

await main();
