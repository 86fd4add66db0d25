// When a generation's tokens are due: the first after ttftMs, then one every 1/tokensPerSecond s;
// `fast`: no delays at all (benchmarks). The one place that decides the sim's timing.
import type { SimConfig } from './options.js';

export class Pace {
  readonly fast: boolean;
  private readonly ttftMs: number;
  private readonly tokenDelayMs: number;

  constructor(opts: Pick<SimConfig, 'ttftMs' | 'tokensPerSecond' | 'fast'>) {
    this.fast = opts.fast;
    this.ttftMs = opts.ttftMs;
    this.tokenDelayMs = 1000 / opts.tokensPerSecond;
  }

  /** When token `i` (0-based) of a stream started at `start` (performance.now()) is due: no drift. */
  tokenDueAt(start: number, i: number): number {
    return start + this.ttftMs + i * this.tokenDelayMs;
  }

  /** How long a non-stream answer of `completionTokens` takes: until its last token is due. */
  wholeAnswerDelayMs(completionTokens: number): number {
    return this.ttftMs + Math.max(0, completionTokens - 1) * this.tokenDelayMs;
  }
}
