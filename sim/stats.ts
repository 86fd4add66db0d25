// What a sim counts and remembers of its requests, for tests and benchmarks (`sim.stats`). The
// object is handed out as is: tests read it and may reset a field (`stats.lastBody = undefined`).
import type { HttpRequest } from '../lib/uws.js';

export interface SimStats {
  /** Chat completion requests received. */
  requests: number;
  /** Requests whose response the sim ended (success or error status). */
  completed: number;
  /** Requests whose client went away before the end. */
  aborted: number;
  /** Requests a fault was applied to. */
  faulted: number;
  /** POST /tokenize requests received. */
  tokenizeRequests: number;
  /** Requests not yet ended (including stalled ones). */
  inFlight: number;
  /** Requests running now (holding a batch slot: prefill or decode). */
  running: number;
  /** Requests waiting now for a batch slot (beyond maxNumSeqs). */
  waiting: number;
  /** The most requests that ran at once. */
  peakRunning: number;
  /** Prompt tokens of every generation started (SGLang's and llama.cpp's prompt token counters). */
  promptTokensTotal: number;
  /** Output tokens of every generation started, counted when it starts (its planned tokens). */
  generationTokensTotal: number;
  /** Prompt tokens looked up in the prefix cache (vLLM's prefix_cache_queries; 0 without prefix caching). */
  prefixCacheQueries: number;
  /** Prompt tokens served from the prefix cache (vLLM's prefix_cache_hits). */
  prefixCacheHits: number;
  /** The time to first token the sim computed for the last generation it started: ttftMs + prefill of its uncached prompt tokens (0 with `fast`). */
  lastFirstTokenMs: number | undefined;
  /** Every generation's engine time to first token (batch wait + computed first token), with `recordFirstTokens`; else undefined. */
  firstTokenMs: number[] | undefined;
  /** Headers (lower-case names) of the last chat completion or tokenize request. */
  lastHeaders: Record<string, string> | undefined;
  /** Parsed body of the last chat completion or tokenize request. */
  lastBody: Record<string, unknown> | undefined;
}

export const newSimStats = (): SimStats => ({
  requests: 0,
  completed: 0,
  aborted: 0,
  faulted: 0,
  tokenizeRequests: 0,
  inFlight: 0,
  running: 0,
  waiting: 0,
  peakRunning: 0,
  promptTokensTotal: 0,
  generationTokensTotal: 0,
  prefixCacheQueries: 0,
  prefixCacheHits: 0,
  lastFirstTokenMs: undefined,
  firstTokenMs: undefined,
  lastHeaders: undefined,
  lastBody: undefined,
});

/** Remembers the request's headers as the last seen (call synchronously: req is valid only in the handler). */
export function recordHeaders(stats: SimStats, req: HttpRequest): void {
  const h: Record<string, string> = {};
  req.forEach((k, v) => {
    h[k] = v;
  });
  stats.lastHeaders = h;
}
