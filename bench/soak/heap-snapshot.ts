// A V8 heap snapshot read for the soak's two questions: what kinds of objects are in the heap
// (groups by constructor), and, of the objects allocated since an earlier snapshot of the same
// process, what holds them. V8 keeps an object's snapshot id across snapshots of one process and
// hands out ids in increasing order, so "allocated since" is "id above the earlier snapshot's
// highest". What holds a new object is found by walking its shortest path from the GC roots
// (strong edges only, as DevTools' retainers view does) up to the first object that already
// existed: that object and a few steps above it (constructor.property) name the structure that grew.
// Only V8's own objects are compared so: their ids are odd and kept, where the embedder's (Node's
// native objects) are even, made from a hash, and new at every snapshot.

/** V8's heap snapshot file format (the parts read here). */
interface HeapSnapshotFile {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]]; edge_fields: string[]; edge_types: [string[], ...unknown[]] } };
  nodes: number[];
  edges: number[];
  strings: string[];
}

/** Self size and count of one kind of heap object: a constructor's name for objects, else the node type. */
export interface HeapGroup {
  name: string;
  count: number;
  bytes: number;
}

/** New objects of one group held at one place, with a few samples of strings' text. */
export interface HeldGroup {
  group: string;
  /** The path from the GC roots to the new objects, its last few steps: `Owner.property → Map.table`. */
  heldBy: string;
  count: number;
  bytes: number;
  samples: string[];
}

const PATH_STEPS = 5;
const SAMPLE_CHARS = 80;
const NO_PARENT = 0xffffffff;

export class HeapSnapshot {
  private readonly nodes: number[];
  private readonly edges: number[];
  private readonly strings: string[];
  private readonly nodeTypes: string[];
  private readonly edgeTypes: string[];
  private readonly stride: number;
  private readonly at: { type: number; name: number; id: number; size: number; edges: number };
  private readonly edgeStride: number;
  private readonly edgeAt: { type: number; name: number; to: number };
  /** Per node (by ordinal), the edge (index into `edges`) its shortest path from the root arrives by. */
  private readonly parentEdge: Uint32Array;
  private readonly parentNode: Uint32Array;
  readonly nodeCount: number;

  constructor(json: string) {
    const file = JSON.parse(json) as HeapSnapshotFile;
    const meta = file.snapshot.meta;
    this.nodes = file.nodes;
    this.edges = file.edges;
    this.strings = file.strings;
    this.nodeTypes = meta.node_types[0];
    this.edgeTypes = meta.edge_types[0];
    const nf = meta.node_fields;
    this.stride = nf.length;
    this.at = { type: nf.indexOf('type'), name: nf.indexOf('name'), id: nf.indexOf('id'), size: nf.indexOf('self_size'), edges: nf.indexOf('edge_count') };
    const ef = meta.edge_fields;
    this.edgeStride = ef.length;
    this.edgeAt = { type: ef.indexOf('type'), name: ef.indexOf('name_or_index'), to: ef.indexOf('to_node') };
    this.nodeCount = this.nodes.length / this.stride;
    this.parentEdge = new Uint32Array(this.nodeCount).fill(NO_PARENT);
    this.parentNode = new Uint32Array(this.nodeCount).fill(NO_PARENT);
    this.shortestPaths();
  }

  /** Objects by constructor name (`Map`, `InstancePool`, ...), every other node type as one group (`(string)`, `(code)`, ...). */
  groups(): Map<string, HeapGroup> {
    const groups = new Map<string, HeapGroup>();
    for (let n = 0; n < this.nodeCount; n++) {
      const name = this.group(n);
      const g = groups.get(name) ?? { name, count: 0, bytes: 0 };
      groups.set(name, g);
      g.count++;
      g.bytes += this.field(n, this.at.size);
    }
    return groups;
  }

  /** The highest id of a V8 object: V8 objects of a later snapshot of this process with a higher one are new. */
  maxId(): number {
    let max = 0;
    for (let n = 0; n < this.nodeCount; n++) if (this.isNew(n, max)) max = this.field(n, this.at.id);
    return max;
  }

  /** Objects with an id above `sinceId`, grouped by their group and what holds them, the most bytes first. */
  heldSince(sinceId: number, top = 15): HeldGroup[] {
    const held = new Map<string, HeldGroup>();
    const pathOf = new Map<number, string>();
    for (let n = 0; n < this.nodeCount; n++) {
      if (!this.isNew(n, sinceId)) continue;
      const group = this.group(n);
      const heldBy = this.holder(n, sinceId, pathOf);
      const key = `${group}\u0000${heldBy}`;
      const h = held.get(key) ?? { group, heldBy, count: 0, bytes: 0, samples: [] };
      held.set(key, h);
      h.count++;
      h.bytes += this.field(n, this.at.size);
      if (group.endsWith('string)') && h.samples.length < 2) h.samples.push(this.name(n).slice(0, SAMPLE_CHARS));
    }
    return [...held.values()].sort((a, b) => b.bytes - a.bytes).slice(0, top);
  }

  /** The path to the first old object above new node `n` (memoized for the new nodes walked). */
  private holder(n: number, sinceId: number, pathOf: Map<number, string>): string {
    const chain: number[] = [];
    let cur = n;
    let path: string | undefined;
    for (;;) {
      path = pathOf.get(cur);
      if (path !== undefined) break;
      chain.push(cur);
      const parent = this.parentNode[cur]!;
      if (parent === NO_PARENT) {
        path = cur === 0 ? '(root)' : '(held only by weak references)';
        break;
      }
      if (!this.isNew(parent, sinceId)) {
        path = this.pathTo(cur);
        break;
      }
      cur = parent;
    }
    for (const c of chain) pathOf.set(c, path);
    return path;
  }

  /** The last PATH_STEPS steps of the shortest path from the root to node `n`, as `Owner.edge → ...`. */
  private pathTo(n: number): string {
    const steps: string[] = [];
    for (let cur = n; steps.length < PATH_STEPS && this.parentNode[cur] !== NO_PARENT; cur = this.parentNode[cur]!) {
      steps.push(this.label(this.parentNode[cur]!) + this.edgeText(this.parentEdge[cur]!));
    }
    return steps.reverse().join(' → ');
  }

  /** Breadth first from the root over strong edges: each node's parent on a shortest path (unreached: none). */
  private shortestPaths(): void {
    const firstEdge = new Uint32Array(this.nodeCount + 1);
    for (let n = 0; n < this.nodeCount; n++) firstEdge[n + 1] = firstEdge[n]! + this.field(n, this.at.edges) * this.edgeStride;
    const queue = new Uint32Array(this.nodeCount);
    const seen = new Uint8Array(this.nodeCount);
    let head = 0;
    let tail = 0;
    queue[tail++] = 0;
    seen[0] = 1;
    while (head < tail) {
      const n = queue[head++]!;
      // The string table holds every internalized string (property names, Map keys made from
      // them): a path through it would hide the structure that keeps the string alive.
      if (this.name(n) === '(Internalized strings)') continue;
      for (let e = firstEdge[n]!; e < firstEdge[n + 1]!; e += this.edgeStride) {
        const type = this.edgeTypes[this.edges[e + this.edgeAt.type]!];
        // Shortcuts below the root are duplicates of a longer real path (DevTools skips them too).
        if (type === 'weak' || (type === 'shortcut' && n !== 0)) continue;
        const to = this.edges[e + this.edgeAt.to]! / this.stride;
        if (seen[to]) continue;
        seen[to] = 1;
        this.parentNode[to] = n;
        this.parentEdge[to] = e;
        queue[tail++] = to;
      }
    }
  }

  /** Whether node `n` is a V8 object (odd id) allocated after the one with id `sinceId`. */
  private isNew(n: number, sinceId: number): boolean {
    const id = this.field(n, this.at.id);
    return id % 2 === 1 && id > sinceId;
  }

  private field(n: number, at: number): number {
    return this.nodes[n * this.stride + at]!;
  }

  private type(n: number): string {
    return this.nodeTypes[this.field(n, this.at.type)]!;
  }

  private name(n: number): string {
    return this.strings[this.field(n, this.at.name)]!;
  }

  private group(n: number): string {
    const type = this.type(n);
    return type === 'object' ? this.name(n) : `(${type})`;
  }

  /** A node as a path step names it: a constructor, a function, or a kind of internal object. */
  private label(n: number): string {
    const type = this.type(n);
    if (type === 'object') return this.name(n);
    if (type === 'closure') return `${this.name(n) || '(anonymous)'}()`;
    if (type === 'synthetic') return this.name(n) || '(root)';
    const name = this.name(n).slice(0, 40);
    return name && !type.endsWith('string') ? `(${type} ${name})` : `(${type})`;
  }

  private edgeText(e: number): string {
    const type = this.edgeTypes[this.edges[e + this.edgeAt.type]!];
    const v = this.edges[e + this.edgeAt.name]!;
    // Indexes, and the numeric keys of an object used as a dictionary, differ for each entry: one
    // step `[]` keeps the entries of one structure together.
    if (type === 'element' || type === 'hidden') return '[]';
    const name = this.strings[v]!;
    if (/^\d+$/.test(name)) return '[]';
    return type === 'context' ? `::${name}` : `.${name}`;
  }
}

/** One line of the report for `h`: its size, what it is and what holds it, and samples of strings. */
export function heldLine(h: HeldGroup): string {
  const samples = h.samples.length ? `  e.g. ${h.samples.map((x) => JSON.stringify(x)).join(', ')}` : '';
  return `${Math.round(h.bytes / 1024)} KB, ${h.count} ${h.group}: ${h.heldBy}${samples}`;
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
