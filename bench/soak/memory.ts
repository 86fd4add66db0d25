// What a soak measures of the platform process: its resident set, sampled when traffic is paused
// (a "quiet" sample: no request in flight for a moment, so what is left is what the process keeps),
// the slope of those samples after the warm-up, and what grew in its heap, by constructor, between
// two heap snapshots (each one taken after a full collection, which V8 does before it writes one).
import { readFileSync } from 'node:fs';

export interface RssSample {
  /** Seconds since the soak's traffic started. */
  atS: number;
  rssMb: number;
}

/** VmRSS of `pid` in MB (from /proc, Linux). */
export function rssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = /^VmRSS:\s+(\d+) kB$/m.exec(status)?.[1];
  if (kb === undefined) throw new Error(`no VmRSS in /proc/${pid}/status`);
  return Number(kb) / 1024;
}

/** Least-squares slope of the samples, in MB per hour (0 for fewer than two). */
export function slopeMbPerHour(samples: readonly RssSample[]): number {
  const n = samples.length;
  if (n < 2) return 0;
  let sx = 0;
  let sy = 0;
  for (const s of samples) {
    sx += s.atS;
    sy += s.rssMb;
  }
  const mx = sx / n;
  const my = sy / n;
  let num = 0;
  let den = 0;
  for (const s of samples) {
    num += (s.atS - mx) * (s.rssMb - my);
    den += (s.atS - mx) ** 2;
  }
  return den === 0 ? 0 : (num / den) * 3600;
}

/** Self size and count of one kind of heap object: a constructor's name for objects, else the node type. */
export interface HeapGroup {
  name: string;
  count: number;
  bytes: number;
}

/** V8's heap snapshot file format (the parts read here). */
interface HeapSnapshotFile {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

/**
 * Groups a heap snapshot's nodes: objects by constructor name (`Map`, `InstancePool`, ...), every
 * other node type as one group (`(string)`, `(closure)`, `(code)`, `(array)`, ...).
 */
export function heapGroups(snapshotJson: string): Map<string, HeapGroup> {
  const file = JSON.parse(snapshotJson) as HeapSnapshotFile;
  const fields = file.snapshot.meta.node_fields;
  const types = file.snapshot.meta.node_types[0];
  const stride = fields.length;
  const typeAt = fields.indexOf('type');
  const nameAt = fields.indexOf('name');
  const sizeAt = fields.indexOf('self_size');
  const groups = new Map<string, HeapGroup>();
  for (let i = 0; i < file.nodes.length; i += stride) {
    const type = types[file.nodes[i + typeAt]!]!;
    const name = type === 'object' ? file.strings[file.nodes[i + nameAt]!]! : `(${type})`;
    const g = groups.get(name);
    const size = file.nodes[i + sizeAt]!;
    if (g) {
      g.count++;
      g.bytes += size;
    } else groups.set(name, { name, count: 1, bytes: size });
  }
  return groups;
}

/** What grew from `before` to `after`, the largest growth first (at most `top`). */
export function heapGrowth(before: Map<string, HeapGroup>, after: Map<string, HeapGroup>, top = 20): HeapGroup[] {
  const out: HeapGroup[] = [];
  for (const [name, a] of after) {
    const b = before.get(name);
    out.push({ name, count: a.count - (b?.count ?? 0), bytes: a.bytes - (b?.bytes ?? 0) });
  }
  return out.sort((x, y) => y.bytes - x.bytes).slice(0, top);
}
