// When a generation's tokens are due: the first after ttftMs plus the prefill of the prompt
// tokens not served from the prefix cache (uncached / prefillTokensPerSecond s), then one every
// 1/tokensPerSecond s; `fast`: no delays at all (benchmarks). The one place that decides the
// sim's timing.
import type { SimConfig } from './options.js';

export class Pace {
  readonly fast: boolean;
  private readonly ttftMs: number;
  private readonly tokenDelayMs: number;
  private readonly prefillMsPerToken: number;

  constructor(opts: Pick<SimConfig, 'ttftMs' | 'tokensPerSecond' | 'prefillTokensPerSecond' | 'fast'>) {
    this.fast = opts.fast;
    this.ttftMs = opts.ttftMs;
    this.tokenDelayMs = 1000 / opts.tokensPerSecond;
    this.prefillMsPerToken = 1000 / opts.prefillTokensPerSecond;
  }

  /** Time to first token, from the start of running, for a prompt with `uncachedTokens` to prefill. */
  firstTokenMs(uncachedTokens: number): number {
    return this.ttftMs + uncachedTokens * this.prefillMsPerToken;
  }

  /** When token `i` (0-based) is due, in ms after the start: computed from the start, so no drift. */
  tokenDueMs(uncachedTokens: number, i: number): number {
    return this.firstTokenMs(uncachedTokens) + i * this.tokenDelayMs;
  }

  /** How long a non-stream answer of `completionTokens` takes: until its last token is due. */
  wholeAnswerDelayMs(uncachedTokens: number, completionTokens: number): number {
    return this.tokenDueMs(uncachedTokens, Math.max(0, completionTokens - 1));
  }
}
