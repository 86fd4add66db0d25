// What a soak measures of the platform process: its resident set, sampled when traffic is paused
// and after a full collection (a "quiet" sample: nothing in flight, no garbage left, so what is
// left is what the process keeps), and the slope of those samples after the warm-up. What grew in
// its heap, and what holds it, is heap-snapshot.ts.
import { readFileSync } from 'node:fs';

export interface RssSample {
  /** Seconds since the soak's traffic started. */
  atS: number;
  rssMb: number;
  /** V8's heap in use after the collection (JS objects only; RSS adds code space, native and malloc memory). */
  heapMb?: number;
}

/** VmRSS of `pid` in MB (from /proc, Linux). */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1];
  if (kb === undefined) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(kb) / 1024;
}

/** Least-squares slope of the samples' `rssMb` (or `of`), in MB per hour (0 for fewer than two). */
export function slopeMbPerHour(samples: readonly RssSample[], of: (s: RssSample) => number = (s) => s.rssMb): number {
  const n = samples.length;
  if (n < 2) return 0;
  let sx = 0;
  let sy = 0;
  for (const s of samples) {
    sx += s.atS;
    sy += of(s);
  }
  const mx = sx / n;
  const my = sy / n;
  let num = 0;
  let den = 0;
  for (const s of samples) {
    num += (s.atS - mx) * (of(s) - my);
    den += (s.atS - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 3600;
}
