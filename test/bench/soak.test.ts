// The soak's measurements (bench/soak/memory.ts, heap-snapshot.ts) on known inputs and on real heap
// snapshots of this process, and one short soak of the whole platform end to end (every kind of traffic answered,
// quiet samples taken, the heap compared), so `npm run bench:soak` keeps working.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { getHeapSnapshot } from 'node:v8';
import { HeapSnapshot, heapGrowth } from '../../bench/soak/heap-snapshot.js';
import { slopeMbPerHour } from '../../bench/soak/memory.js';

test('slopeMbPerHour: least squares over the samples, in MB per hour', () => {
  assert.equal(slopeMbPerHour([]), 0);
  assert.equal(slopeMbPerHour([{ atS: 0, rssMb: 100 }]), 0);
  // 1 MB every 360 s is 10 MB/h, whatever the offset.
  const line = [0, 360, 720, 1080].map((atS, i) => ({ atS, rssMb: 200 + i }));
  assert.ok(Math.abs(slopeMbPerHour(line) - 10) < 1e-9);
  // Noise around a flat line stays near 0.
  const flat = [0, 60, 120, 180, 240, 300].map((atS, i) => ({ atS, rssMb: 150 + (i % 2 ? 0.5 : -0.5) }));
  assert.ok(Math.abs(slopeMbPerHour(flat)) < 10, String(slopeMbPerHour(flat)));
});

/** A V8 heap snapshot of this process. */
async function snapshot(): Promise<HeapSnapshot> {
  let text = '';
  for await (const chunk of getHeapSnapshot()) text += chunk;
  return new HeapSnapshot(text);
}

class SoakLeakProbe {
  constructor(readonly n: number) {}
}

test('heapGrowth names what grew between two snapshots by its constructor', async () => {
  const before = (await snapshot()).groups();
  const kept = Array.from({ length: 5000 }, (_, i) => new SoakLeakProbe(i));
  const after = (await snapshot()).groups();
  const grown = heapGrowth(before, after, 1000).find((g) => g.name === 'SoakLeakProbe');
  assert.ok(grown, 'the probe class is among the grown groups');
  assert.equal(grown.count, 5000);
  assert.ok(grown.bytes > 0);
  assert.equal(kept.length, 5000);
});

class SoakRegistry {
  readonly byId = new Map<string, { note: string }>();
}
const registry = new SoakRegistry();

test('heldSince names what holds the objects allocated since an earlier snapshot, with samples of strings', async () => {
  for (let i = 0; i < 100; i++) registry.byId.set(`old-${i}`, { note: `old note ${i}` });
  const since = (await snapshot()).maxId();
  for (let i = 0; i < 3000; i++) registry.byId.set(`soak-instance-${i}-`.padEnd(40, 'x'), { note: `kept ${i}` });
  const held = (await snapshot()).heldSince(since, 50);
  const listed = held.map((h) => `${h.group} ${h.count} ${h.heldBy}`).join('\n');
  const strings = held.find((h) => h.group === '(string)' && h.heldBy.includes('SoakRegistry.byId'));
  assert.ok(strings, listed);
  assert.ok(strings.count >= 3000, listed);
  assert.match(strings.heldBy, /SoakRegistry\.byId → Map\.table/);
  assert.ok(
    // A padded key is a cons string: the samples may be its parts ("735", "xxxxxx").
    strings.samples.some((s) => /^soak-instance-\d+-x+$|^kept \d+$|^\d+$|^x+$/.test(s)),
    String(strings.samples),
  );
  // The notes are objects of their own, held at the same place; nothing old counts as new.
  assert.ok(
    held.some((h) => h.group === 'Object' && h.heldBy === strings.heldBy && h.count >= 2900),
    listed,
  );
  assert.ok(!held.some((h) => h.samples.some((s) => s.startsWith('old'))));
});

test('a short soak of the whole platform: every kind answered, none failed, samples and heap growth reported', { timeout: 240_000 }, async () => {
  const results = mkdtempSync(join(tmpdir(), 'rc-soak-results-'));
  try {
    const run = fileURLToPath(new URL('../../bench/soak/run.js', import.meta.url));
    const { stdout } = await promisify(execFile)(process.execPath, [run], {
      env: {
        ...process.env,
        // Short samples: a heap snapshot on a loaded machine can take most of a longer interval.
        RC_SOAK_MINUTES: '0.75',
        RC_SOAK_WARMUP_MINUTES: '0.15',
        RC_SOAK_SETTLE_MINUTES: '0',
        RC_SOAK_SAMPLE_S: '3',
        RC_SOAK_WORKERS: '2',
        RC_BENCH_RESULTS_DIR: results,
      },
      timeout: 200_000,
    });
    assert.match(stdout, /slope -?\d+\.\d MB\/h over \d+ quiet samples/);
    const file = readdirSync(results).find((f) => f.startsWith('soak-'));
    assert.ok(file, stdout);
    const report = JSON.parse(readFileSync(join(results, file), 'utf8')) as {
      samples: unknown[];
      stats: Record<string, { ok: number; failed: number; refused: number }>;
      heapGrowth: { name: string }[];
    };
    assert.ok(report.samples.length >= 2, stdout);
    for (const kind of ['chat', 'chat-stream', 'messages-stream', 'count-tokens', 'responses', 'sign-in', 'rotate-key', 'coupon', 'launch:dedicated']) {
      const s = report.stats[kind];
      assert.ok(s && s.ok > 0, `${kind} ran: ${JSON.stringify(s)}`);
    }
    for (const [kind, s] of Object.entries(report.stats)) assert.equal(s.failed + s.refused, 0, `${kind}: ${JSON.stringify(s)}`);
    assert.ok(report.heapGrowth.length > 0);
  } finally {
    rmSync(results, { recursive: true, force: true });
  }
});
