// The KV cache of one sim, in blocks of `blockSize` tokens, as vLLM's block manager keeps it: a
// running request holds the blocks of its prompt and of its output; with prefix caching the
// prompt's full blocks are shared through the PrefixCache and stay cached (evictable, least
// recently used first) after the request ends. kv_cache_usage_perc is the share of blocks
// running requests hold; cached blocks nobody runs on count as free, as in vLLM.
// Simplification: a request reserves the blocks of its whole planned output when it starts
// (vLLM grows them token by token), and the cache does not gate admission (vLLM would queue or
// preempt when blocks run out): running requests may hold more than the capacity, and usage
// then reads 1.
import { PrefixCache } from './prefix-cache.js';

/** The blocks one running request holds; release() once when it ends. */
export interface KvBlocks {
  /** Prompt tokens served from the prefix cache. */
  readonly cachedTokens: number;
  release(): void;
}

export class KvCache {
  /** vLLM's automatic prefix caching; undefined when turned off. */
  readonly prefix: PrefixCache | undefined;
  /** Blocks running requests hold outside the prefix cache: a prompt's last partial block and the output. */
  private privateBlocks = 0;

  constructor(
    readonly capacityBlocks: number,
    readonly blockSize: number,
    prefixCaching: boolean,
  ) {
    this.prefix = prefixCaching ? new PrefixCache(blockSize, capacityBlocks) : undefined;
  }

  /** Blocks running requests hold. */
  get usedBlocks(): number {
    return (this.prefix?.pinnedBlocks ?? 0) + this.privateBlocks;
  }

  /** Share of the blocks running requests hold, 0..1 (vllm:kv_cache_usage_perc). */
  get usage(): number {
    return Math.min(1, this.usedBlocks / this.capacityBlocks);
  }

  /** Prompt tokens the prefix cache would serve now (0 without prefix caching), changing nothing. */
  peek(promptIds: readonly number[]): number {
    return this.prefix ? this.prefix.peek(promptIds) : 0;
  }

  /**
   * A request starts running: a prompt of `promptTokens` tokens (`promptIds`: its ids, needed
   * with prefix caching) and `outputTokens` to generate. Its blocks are taken (the prompt's
   * full blocks from the prefix cache where found) and free cached blocks evicted for the room.
   */
  admit(promptTokens: number, promptIds: readonly number[] | undefined, outputTokens: number): KvBlocks {
    const total = Math.ceil((promptTokens + outputTokens) / this.blockSize);
    const hashes = this.prefix && promptIds ? this.prefix.hashes(promptIds) : [];
    const cachedTokens = this.prefix && promptIds ? this.prefix.acquire(hashes, promptTokens) : 0;
    const own = total - hashes.length;
    this.privateBlocks += own;
    this.prefix?.evictBeyond(this.capacityBlocks - this.privateBlocks);
    let released = false;
    return {
      cachedTokens,
      release: () => {
        if (released) return;
        released = true;
        this.privateBlocks -= own;
        this.prefix?.release(hashes);
      },
    };
  }
}
