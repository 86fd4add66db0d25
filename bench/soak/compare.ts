// `node dist/bench/soak/compare.js BEFORE.heapsnapshot AFTER.heapsnapshot [top]`: the soak's heap
// report for two snapshots of one process (RC_SOAK_KEEP_SNAPSHOTS keeps a soak's two): growth by
// constructor, and the objects allocated in between by what holds them.
import { readFileSync } from 'node:fs';
import { HeapSnapshot, heapGrowth, heldLine } from './heap-snapshot.js';

const [beforeFile, afterFile, topArg] = process.argv.slice(2);
if (!beforeFile || !afterFile) {
  process.stderr.write('usage: compare.js BEFORE.heapsnapshot AFTER.heapsnapshot [top]\n');
  process.exit(2);
}
const top = Number(topArg ?? 25);
const before = new HeapSnapshot(readFileSync(beforeFile, 'utf8'));
const groups = before.groups();
const maxId = before.maxId();
const after = new HeapSnapshot(readFileSync(afterFile, 'utf8'));
console.table(heapGrowth(groups, after.groups(), top).map((g) => ({ name: g.name, objects: g.count, kb: Math.round(g.bytes / 1024) })));
for (const h of after.heldSince(maxId, top)) process.stdout.write(`${heldLine(h)}\n`);
