// What a gate store does: one atomic admission over every gate, one reconciliation, a usage read.
// Two implementations: memory-store.ts (one process) and redis-store.ts (shared by replicas).
import type { Limits } from './limits.js';
import type { Outcome } from './math.js';

export interface AdmitInput {
  accountId: number;
  model: string;
  /** Whole tokens to reserve (normalizeEstimate). */
  estimate: number;
  /** The input part of the estimate, or -1: when given, the output is bounded by what is left (see math.ts `Outcome.maxOutput`). */
  input: number;
  /** The output part of the estimate is a default that may shrink to what is left. */
  defaultOutput: boolean;
  /**
   * 0, or: `input` is an upper bound, not a count. When that bound would refuse the request on
   * tokens (bucket or day) or leave it fewer than this many output tokens, nothing is admitted
   * or consumed and the outcome is GateKind.Recount (the caller counts the input and asks again).
   */
  recountBelow: number;
  limits: Limits;
  /** UTC day index the daily cap counts in (the gateway's clock). */
  day: number;
  /** UTC hour (0..23) of that day: settle counts the request's usage in it. */
  hour: number;
  /** Milliseconds until that day ends: the wait reported when the daily cap refuses. */
  msToNextDay: number;
  /** Bucket time in ms; undefined lets the Redis store use Redis' own clock (TIME). */
  nowMs: number | undefined;
}

export interface SettleInput {
  accountId: number;
  model: string;
  /** What admission reserved. */
  estimate: number;
  limits: Limits;
  /** The day admission counted the reservation in. */
  day: number;
  /** The UTC hour (0..23) of that day the request was admitted in: its usage counts in that hour. */
  hour: number;
  nowMs: number | undefined;
  inputTokens: number;
  outputTokens: number;
  /** Of inputTokens, those from the backend's prefix cache. */
  cachedTokens: number;
}

export interface ModelDayUsage {
  requests: number;
  input_tokens: number;
  output_tokens: number;
  /** Of input_tokens, those served from the backends' prefix caches. */
  cached_input_tokens: number;
}

/** One model's usage per UTC hour of a day: arrays of 24, indexed by hour. */
export interface ModelHours {
  /** Input + output tokens of finished requests admitted in that hour. */
  tokens: number[];
  /** Finished (settled) requests admitted in that hour. */
  requests: number[];
}

/** One account's counters for one UTC day. */
export interface DayUsage {
  /** Settled tokens (input + output) of finished requests. */
  tokens: number;
  /** Tokens reserved by requests still in flight. */
  reserved: number;
  /** Admitted requests. */
  requests: number;
  byModel: Map<string, ModelDayUsage>;
  /** Per model, per hour (written by settle). */
  byModelHour: Map<string, ModelHours>;
}

export interface GateStore {
  admit(input: AdmitInput): Outcome | Promise<Outcome>;
  /** Reconciles one admitted request: refund (or charge) the token bucket, release the reservation, add the real usage. */
  settle(input: SettleInput): void;
  usage(accountId: number, day: number): DayUsage | Promise<DayUsage>;
}

export function emptyDayUsage(): DayUsage {
  return { tokens: 0, reserved: 0, requests: 0, byModel: new Map(), byModelHour: new Map() };
}

export const HOURS_PER_DAY = 24;

/** Zeroed day counters for one model. */
export function emptyModelDayUsage(): ModelDayUsage {
  return { requests: 0, input_tokens: 0, output_tokens: 0, cached_input_tokens: 0 };
}

/** Zeroed hourly counters for one model. */
export function emptyModelHours(): ModelHours {
  return { tokens: new Array<number>(HOURS_PER_DAY).fill(0), requests: new Array<number>(HOURS_PER_DAY).fill(0) };
}
