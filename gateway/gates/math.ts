// The arithmetic both stores share (the Redis script mirrors it in Lua; keep them in step).
//
// Buckets hold their level in units of 1/60000 of a token (or request). A limit of L per minute
// then refills exactly L units per millisecond and a full bucket holds L * 60000 units: integer
// arithmetic throughout, exact in doubles below 2^53, identical in JavaScript and in Lua.

export const SCALE = 60_000;
export const DAY_MS = 86_400_000;

/** Largest tokens-per-minute limit whose scaled bucket stays exact (1e11 * 6e4 < 2^53). */
export const MAX_TPM = 100_000_000_000;
/** Largest token estimate a request may reserve (larger ones are clamped to it). */
export const MAX_ESTIMATE = MAX_TPM;

/** Days since the epoch (UTC). */
export function dayIndex(ms: number): number {
  return Math.floor(ms / DAY_MS);
}

export const HOUR_MS = 3_600_000;

/** The UTC hour of the day (0..23); `day` is dayIndex(ms), when the caller has it already. */
export function hourOfDay(ms: number, day = dayIndex(ms)): number {
  return Math.floor((ms - day * DAY_MS) / HOUR_MS);
}

/** `YYYY-MM-DD` of a day index. */
export function dayString(day: number): string {
  return new Date(day * DAY_MS).toISOString().slice(0, 10);
}

const DAY_SHAPE = /^(\d{4})-(\d{2})-(\d{2})$/;

/** The day index of a `YYYY-MM-DD` string; undefined when it is not a real calendar date. */
export function parseDay(text: string): number | undefined {
  const m = DAY_SHAPE.exec(text);
  if (!m) return undefined;
  const ms = Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]));
  return Number.isFinite(ms) && dayString(dayIndex(ms)) === text ? dayIndex(ms) : undefined;
}

/** Milliseconds from `ms` to the next UTC midnight (at least 1). */
export function msToNextDay(ms: number): number {
  return (dayIndex(ms) + 1) * DAY_MS - ms;
}

export { retryAfterSeconds } from '../../lib/clock.js';

/** A token estimate as a whole, non-negative number the buckets can hold exactly. */
export function normalizeEstimate(tokens: number): number {
  if (!(tokens > 0)) return 0; // NaN, negative, zero
  return Math.min(MAX_ESTIMATE, Math.ceil(tokens));
}

/**
 * A duration in the style of the `x-ratelimit-reset-*` headers of OpenAI-compatible APIs:
 * `250ms`, `1s`, `1.5s`, `6m0s`, `1h2m3s`.
 */
export function formatDuration(ms: number): string {
  if (ms <= 0) return '0s';
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const totalSec = Math.ceil(ms) / 1000;
  const h = Math.floor(totalSec / 3600);
  const m = Math.floor((totalSec - h * 3600) / 60);
  const s = Math.round((totalSec - h * 3600 - m * 60) * 1000) / 1000;
  if (h) return `${h}h${m}m${s}s`;
  if (m) return `${m}m${s}s`;
  return `${s}s`;
}

/** What one admission attempt found, whichever store took it. Times in milliseconds. */
export interface Outcome {
  /** The gate that refused (GateKind), 0 when admitted. */
  gate: number;
  /** When refused: milliseconds until the request would pass (the daily cap: until the next UTC day). */
  waitMs: number;
  /** Whole requests and tokens left in the buckets (after this admission, when admitted); may be negative after a debt. */
  remainingRequests: number;
  remainingTokens: number;
  /** Milliseconds until each bucket is full again. */
  resetRequestsMs: number;
  resetTokensMs: number;
  /**
   * With a split estimate (input given): the output tokens left for this request, that is
   * min(token bucket level, daily cap - used - reserved) - input, before this admission; -1 otherwise.
   */
  maxOutput: number;
  /** The tokens reserved (the estimate, lowered to input + maxOutput when its output part was a default). */
  estimate: number;
}
