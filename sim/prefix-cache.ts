// vLLM's automatic prefix caching, modelled: the KV cache is kept in blocks of `blockSize`
// tokens (vLLM's default block size is 16), each identified by the hash of its tokens chained
// with the hash of the block before it, so a block is reused only when the whole prefix up to
// and including it is the same. A prompt's cached tokens are its leading full blocks found in
// the cache; the prompt's last token is always computed (vLLM needs its logits), so at most
// floor((n - 1) / blockSize) blocks count. After the lookup the prompt's full blocks are stored.
// Eviction: least recently used block first, beyond `capacityBlocks`.

export class PrefixCache {
  /** Block hash -> nothing; Map order is the recency order (oldest first). */
  private readonly blocks = new Map<string, true>();

  constructor(
    readonly blockSize = 16,
    readonly capacityBlocks = 65_536,
  ) {}

  /** Tokens of `tokens` served from the cache; then remembers its full blocks. */
  lookup(tokens: readonly number[]): number {
    const bs = this.blockSize;
    const full = Math.floor(tokens.length / bs);
    const countable = Math.floor(Math.max(0, tokens.length - 1) / bs);
    let a = 0x811c9dc5;
    let b = 0x9747b28c;
    let hits = 0;
    let missed = false;
    for (let k = 0; k < full; k++) {
      for (let i = k * bs; i < (k + 1) * bs; i++) {
        const t = tokens[i]!;
        a = Math.imul(a ^ t, 0x01000193);
        b = Math.imul(b ^ t, 0x5bd1e995) ^ (b >>> 15);
      }
      const key = `${a >>> 0}:${b >>> 0}`;
      const had = this.blocks.delete(key);
      if (had && !missed && k < countable) hits++;
      else missed = true;
      this.blocks.set(key, true);
    }
    while (this.blocks.size > this.capacityBlocks) this.blocks.delete(this.blocks.keys().next().value!);
    return hits * bs;
  }

  clear(): void {
    this.blocks.clear();
  }
}
