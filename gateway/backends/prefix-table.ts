// A bounded map from a prefix hash to a bitmask of backends (bit i: the model's upstream i was
// sent that prefix). Set-associative, like a CPU cache: a hash picks one bucket of WAYS slots,
// and a new entry takes a free slot of its bucket or replaces the least recently used one. Its
// memory is fixed at construction (12 bytes a slot, never more than `entries` slots), it
// allocates nothing afterwards, and every operation reads at most WAYS slots.

export const WAYS = 8;

export class PrefixTable {
  private readonly keys: Uint32Array;
  /** 0: a free slot. */
  private readonly masks: Uint32Array;
  /** The tick of the last use; ages are (tick - stamp) mod 2^32, so the counter may wrap. */
  private readonly stamps: Uint32Array;
  private readonly buckets: number;
  private tick = 0;

  /** At most `entries` entries (rounded down to a multiple of WAYS, at least WAYS). */
  constructor(entries: number) {
    this.buckets = Math.max(1, Math.floor(entries / WAYS));
    const slots = this.buckets * WAYS;
    this.keys = new Uint32Array(slots);
    this.masks = new Uint32Array(slots);
    this.stamps = new Uint32Array(slots);
  }

  /** The slots this table can hold. */
  get capacity(): number {
    return this.masks.length;
  }

  /** First slot of the bucket of `h` (multiply-shift range reduction: exact in doubles below 2^53). */
  private bucket(h: number): number {
    return Math.floor(((h >>> 0) * this.buckets) / 4294967296) * WAYS;
  }

  /** The backends known to hold `h` (0: none); a hit counts as a use. */
  get(h: number): number {
    const b = this.bucket(h);
    for (let s = b; s < b + WAYS; s++) {
      if (this.masks[s] !== 0 && this.keys[s] === h) {
        this.stamps[s] = this.tick = (this.tick + 1) >>> 0;
        return this.masks[s]!;
      }
    }
    return 0;
  }

  /** Adds the backends of `bits` to `h`'s entry, making one (in place of the least recently used) when there is none. */
  add(h: number, bits: number): void {
    const b = this.bucket(h);
    const tick = (this.tick = (this.tick + 1) >>> 0);
    let victim = b;
    let oldest = -1;
    for (let s = b; s < b + WAYS; s++) {
      const m = this.masks[s]!;
      if (m !== 0 && this.keys[s] === h) {
        this.masks[s] = m | bits;
        this.stamps[s] = tick;
        return;
      }
      const age = m === 0 ? 0x100000000 : (tick - this.stamps[s]!) >>> 0;
      if (age > oldest) {
        oldest = age;
        victim = s;
      }
    }
    this.keys[victim] = h;
    this.masks[victim] = bits;
    this.stamps[victim] = tick;
  }

  /** Forgets the backends of `bits` everywhere (an entry left with none is free). O(capacity). */
  clear(bits: number): void {
    const masks = this.masks;
    const keep = ~bits;
    for (let s = 0; s < masks.length; s++) masks[s] = masks[s]! & keep;
  }

  /** Entries held (O(capacity): tests and diagnostics). */
  size(): number {
    let n = 0;
    for (let s = 0; s < this.masks.length; s++) if (this.masks[s] !== 0) n++;
    return n;
  }
}
