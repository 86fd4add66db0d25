// vLLM's automatic prefix caching, modelled: the KV cache is kept in blocks of `blockSize`
// tokens (vLLM's default block size is 16), each identified by the hash of its tokens chained
// with the hash of the block before it, so a block is reused only when the whole prefix up to
// and including it is the same. A prompt's cached tokens are its leading full blocks found in
// the cache; the prompt's last token is always computed (vLLM needs its logits), so at most
// floor((n - 1) / blockSize) blocks count.
// Blocks of running requests are pinned (reference-counted) and never evicted; the others stay
// cached until evicted, least recently used first, when the cache needs the room.

export class PrefixCache {
  /** Block hash -> requests running on it (0: free, evictable); Map order is the recency order (oldest first). */
  private readonly blocks = new Map<string, number>();
  /** Blocks with at least one running request. */
  private pinned = 0;

  constructor(
    readonly blockSize = 16,
    readonly capacityBlocks = 65_536,
  ) {}

  /** Blocks held (pinned or free). */
  get size(): number {
    return this.blocks.size;
  }

  /** Blocks that running requests hold. */
  get pinnedBlocks(): number {
    return this.pinned;
  }

  /** The chained hashes of the full blocks of `tokens`. */
  hashes(tokens: readonly number[]): string[] {
    const bs = this.blockSize;
    const full = Math.floor(tokens.length / bs);
    const out: string[] = [];
    let a = 0x811c9dc5;
    let b = 0x9747b28c;
    for (let k = 0; k < full; k++) {
      for (let i = k * bs; i < (k + 1) * bs; i++) {
        const t = tokens[i]!;
        a = Math.imul(a ^ t, 0x01000193);
        b = Math.imul(b ^ t, 0x5bd1e995) ^ (b >>> 15);
      }
      out.push(`${a >>> 0}:${b >>> 0}`);
    }
    return out;
  }

  /** Tokens of a prompt of `length` tokens with these block hashes that the cache holds now. */
  private cachedTokens(hashes: readonly string[], length: number): number {
    const countable = Math.floor(Math.max(0, length - 1) / this.blockSize);
    let hits = 0;
    while (hits < countable && hits < hashes.length && this.blocks.has(hashes[hits]!)) hits++;
    return hits * this.blockSize;
  }

  /** Tokens of `tokens` the cache would serve now, read only: neither content nor recency changes. */
  peek(tokens: readonly number[]): number {
    return this.cachedTokens(this.hashes(tokens), tokens.length);
  }

  /** Tokens of `tokens` served from the cache; then remembers its full blocks (free), evicting beyond capacityBlocks. */
  lookup(tokens: readonly number[]): number {
    const hashes = this.hashes(tokens);
    const cached = this.cachedTokens(hashes, tokens.length);
    for (const h of hashes) this.touch(h, 0);
    this.evictBeyond(this.capacityBlocks);
    return cached;
  }

  /** A request starts running on a prompt with these block hashes: its cached tokens; its blocks are pinned and most recent. */
  acquire(hashes: readonly string[], length: number): number {
    const cached = this.cachedTokens(hashes, length);
    for (const h of hashes) this.touch(h, 1);
    return cached;
  }

  /**
   * The request ended: its blocks are free but stay cached. Freed tail first, as vLLM frees
   * them, so that a prompt's last blocks are evicted before its first.
   */
  release(hashes: readonly string[]): void {
    for (let k = hashes.length - 1; k >= 0; k--) this.touch(hashes[k]!, -1);
  }

  /** Evicts free blocks, least recently used first, until at most `limit` are held (pinned blocks stay). */
  evictBeyond(limit: number): void {
    if (this.blocks.size <= limit) return;
    for (const [h, refs] of this.blocks) {
      if (this.blocks.size <= limit) break;
      if (refs === 0) this.blocks.delete(h);
    }
  }

  clear(): void {
    for (const [h, refs] of this.blocks) if (refs === 0) this.blocks.delete(h);
  }

  /** Makes block `h` the most recent, its running requests changed by `delta`. */
  private touch(h: string, delta: number): void {
    const refs = this.blocks.get(h) ?? 0;
    const next = Math.max(0, refs + delta);
    if (refs === 0 && next > 0) this.pinned++;
    else if (refs > 0 && next === 0) this.pinned--;
    this.blocks.delete(h);
    this.blocks.set(h, next);
  }
}
