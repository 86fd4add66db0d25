// The RequestGate the gateway calls: per-account request and token buckets plus the daily cap,
// decided in Redis when configured and reachable, in memory otherwise.
import type { GateDecision, GateRequest, GateUsage, RequestGate } from './gate.js';
import { systemClock, type Clock } from '../../lib/clock.js';
import { RcError } from '../../lib/errors.js';
import type { Logger } from '../../lib/log.js';
import { GATE_CODES, GateKind, type GateErrorCode } from './codes.js';
import type { Limits, LimitsSource } from './limits.js';
import { DAY_MS, dayIndex, dayString, formatDuration, hourOfDay, normalizeEstimate, parseDay, retryAfterSeconds, type Outcome } from './math.js';
import { MemoryGateStore } from './memory-store.js';
import { counters, gauges } from './metrics.js';
import type { RedisGateStore } from './redis-store.js';
import { type AdmitInput, type DayUsage, type GateStore, HOURS_PER_DAY } from './store.js';

/** A `day` argument that is not a `YYYY-MM-DD` calendar date. */
export class InvalidDayError extends RcError {
  constructor(day: string) {
    super('RC_ERR_INVALID_DAY' satisfies GateErrorCode, `day must be a date as YYYY-MM-DD, got ${JSON.stringify(day)}`, 400);
  }
}

/** The body of GET /api/profile/model-usage (see gateway/gates/README.md). */
export interface ModelUsage {
  /** The UTC day, YYYY-MM-DD. */
  day: string;
  /** The account's daily token cap. */
  daily_cap: number;
  /** Input + output tokens of finished requests that day. */
  tokens_used: number;
  /** Tokens reserved by requests still in flight. */
  tokens_reserved: number;
  /** What is left of the cap: daily_cap - tokens_used - tokens_reserved, at least 0. */
  tokens_remaining: number;
  /** Requests admitted that day. */
  requests: number;
  /** When the cap resets (the next UTC midnight), ISO 8601. */
  resets_at: string;
  by_model: Record<string, { requests: number; input_tokens: number; output_tokens: number; cached_input_tokens: number }>;
  /** The day's 24 UTC hours, in order: finished requests and their tokens, by the hour they were admitted in. */
  by_hour: HourUsage[];
}

/** One UTC hour of GET /api/profile/model-usage's `by_hour`. */
export interface HourUsage {
  hour: number;
  /** Input + output tokens of the requests admitted in this hour that have finished. */
  tokens: number;
  /** Those requests. */
  requests: number;
  /** The same per model, only models with a finished request in this hour, sorted by name. */
  by_model: Record<string, { tokens: number; requests: number }>;
}

/** What settle() needs; held by the request path as the decision's opaque `reservation`. */
interface Reservation {
  store: GateStore;
  estimate: number;
  day: number;
  hour: number;
  limits: Limits;
  settled: boolean;
}

export interface LimitGateOptions {
  limits: LimitsSource;
  /** The shared store; admissions fall back to memory while it is unusable. */
  redis?: RedisGateStore | undefined;
  /** Time for buckets and days. When given, it also drives the Redis buckets (instead of Redis TIME): for tests. */
  clock?: Clock | undefined;
  /** Called by close() (for example to quit a Redis client the gate created). */
  onClose?: (() => Promise<void> | void) | undefined;
}

const SWEEP_MS = 60_000;

export class LimitGate implements RequestGate {
  readonly memory = new MemoryGateStore();
  readonly redis: RedisGateStore | undefined;
  private readonly limits: LimitsSource;
  private readonly clock: Clock;
  /** Whether bucket time comes from `clock` in Redis too (tests) rather than from Redis TIME. */
  private readonly clientTime: boolean;
  private readonly sweeper: NodeJS.Timeout;
  private readonly onClose: (() => Promise<void> | void) | undefined;
  /** The limits of the last decision and their header values (a tpm past 2^31 is a double: its String() runs a Dtoa). */
  private rpm = -1;
  private tpm = -1;
  private rpmText = '';
  private tpmText = '';

  constructor(options: LimitGateOptions) {
    this.limits = options.limits;
    this.redis = options.redis;
    this.clock = options.clock ?? systemClock;
    this.clientTime = options.clock !== undefined;
    this.onClose = options.onClose;
    this.sweeper = setInterval(() => this.memory.sweep(this.clock.now(), (id) => this.limits.get(id)), SWEEP_MS).unref();
  }

  admit(req: GateRequest): GateDecision | Promise<GateDecision> {
    const input = this.admitInput(req);
    const redis = this.redis;
    if (redis === undefined) return this.decide(this.memory.admit(input), input, this.memory);
    if (!redis.usable) return this.fallback(input);
    // Callbacks, not redis.admit(input).then(...): one promise per admission instead of three.
    return new Promise<GateDecision>((resolve) =>
      redis.admitThen(
        input,
        (o) => resolve(this.decide(o, input, redis)),
        () => resolve(this.fallback(input)),
      ),
    );
  }

  /** admit() through a callback (gate.ts): in Redis, no promise at all. */
  admitThen<C>(req: GateRequest, ctx: C, then: (ctx: C, decision: GateDecision) => void): void {
    const input = this.admitInput(req);
    const redis = this.redis;
    if (redis === undefined) then(ctx, this.decide(this.memory.admit(input), input, this.memory));
    else if (!redis.usable) then(ctx, this.fallback(input));
    else
      redis.admitThen(
        input,
        (o) => then(ctx, this.decide(o, input, redis)),
        () => then(ctx, this.fallback(input)),
      );
  }

  private admitInput(req: GateRequest): AdmitInput {
    const limits = this.limits.get(req.accountId);
    const now = this.clock.now();
    const day = dayIndex(now);
    return {
      accountId: req.accountId,
      model: req.model,
      estimate: normalizeEstimate(req.estimatedTokens),
      input: req.inputTokens === undefined ? -1 : normalizeEstimate(req.inputTokens),
      defaultOutput: req.defaultOutput === true,
      recountBelow: req.recountBelow !== undefined && req.recountBelow > 0 ? normalizeEstimate(req.recountBelow) : 0,
      limits,
      day,
      hour: hourOfDay(now, day),
      msToNextDay: (day + 1) * DAY_MS - now,
      nowMs: this.clientTime ? now : undefined,
    };
  }

  settle(req: GateRequest, decision: GateDecision & { allowed: true }, usage: GateUsage | undefined): void {
    const r = decision.reservation as Reservation | undefined;
    if (!r || r.settled) return; // not ours, or settled already: never reconcile twice
    r.settled = true;
    const input = usage ? normalizeEstimate(usage.inputTokens) : 0;
    r.store.settle({
      accountId: req.accountId,
      model: req.model,
      estimate: r.estimate,
      limits: r.limits,
      day: r.day,
      hour: r.hour,
      nowMs: this.clientTime ? this.clock.now() : undefined,
      // No usage seen (the response failed before any): nothing is charged, the reservation is returned.
      inputTokens: input,
      outputTokens: usage ? normalizeEstimate(usage.outputTokens) : 0,
      cachedTokens: usage?.cachedTokens ? Math.min(normalizeEstimate(usage.cachedTokens), input) : 0,
    });
  }

  /**
   * An account's shared model API usage for a UTC day (default: today), from the store the
   * gates decide in: Redis when configured (throws GateRedisError, status 503, when it cannot
   * be read), memory otherwise. Throws InvalidDayError (400) for a malformed `day`.
   */
  async readUsage(accountId: number, day?: string): Promise<ModelUsage> {
    let d: number;
    if (day === undefined) d = dayIndex(this.clock.now());
    else {
      const parsed = parseDay(day);
      if (parsed === undefined) throw new InvalidDayError(day);
      d = parsed;
    }
    const u = await (this.redis ?? this.memory).usage(accountId, d);
    const cap = this.limits.get(accountId).dailyTokens;
    const reserved = Math.max(0, u.reserved);
    return {
      day: dayString(d),
      daily_cap: cap,
      tokens_used: u.tokens,
      tokens_reserved: reserved,
      tokens_remaining: Math.max(0, cap - u.tokens - reserved),
      requests: u.requests,
      resets_at: new Date((d + 1) * DAY_MS).toISOString(),
      by_model: Object.fromEntries([...u.byModel].sort(byName)),
      by_hour: hourly(u),
    };
  }

  /** True while admissions are decided in Redis. */
  get onRedis(): boolean {
    return this.redis !== undefined && this.redis.usable;
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
    this.redis?.detach();
    await this.onClose?.();
  }

  private fallback(input: AdmitInput): GateDecision {
    counters.redisFallback++;
    return this.decide(this.memory.admit(input), input, this.memory);
  }

  private decide(o: Outcome, input: AdmitInput, store: GateStore): GateDecision {
    const l = input.limits;
    if (l.rpm !== this.rpm) this.rpmText = String((this.rpm = l.rpm));
    if (l.tpm !== this.tpm) this.tpmText = String((this.tpm = l.tpm));
    const headers: Record<string, string> = {
      'x-ratelimit-limit-requests': this.rpmText,
      // `'' + n`, not String(n): a call of the String constructor is not inlined (some 500 instructions).
      'x-ratelimit-remaining-requests': '' + (o.remainingRequests > 0 ? o.remainingRequests : 0),
      'x-ratelimit-reset-requests': formatDuration(o.resetRequestsMs),
      'x-ratelimit-limit-tokens': this.tpmText,
      'x-ratelimit-remaining-tokens': '' + (o.remainingTokens > 0 ? o.remainingTokens : 0),
      'x-ratelimit-reset-tokens': formatDuration(o.resetTokensMs),
    };
    if (o.gate === GateKind.None) {
      counters.admitted++;
      const reservation: Reservation = { store, estimate: o.estimate, day: input.day, hour: input.hour, limits: l, settled: false };
      return { allowed: true, headers, reservation, maxOutputTokens: o.maxOutput >= 0 ? o.maxOutput : undefined, reservedTokens: o.estimate };
    }
    if (o.gate === GateKind.Recount) {
      counters.recounts++;
      return { allowed: false, recount: true, retryAfterSec: 0, code: '', headers };
    }
    if (o.gate === GateKind.Requests) counters.deniedRequests++;
    else if (o.gate === GateKind.Tokens) counters.deniedTokens++;
    else counters.deniedDaily++;
    const code = GATE_CODES[o.gate as keyof typeof GATE_CODES] ?? GATE_CODES[GateKind.Tokens];
    return { allowed: false, retryAfterSec: retryAfterSeconds(o.waitMs), code, headers };
  }
}

const byName = ([a]: [string, unknown], [b]: [string, unknown]): number => (a < b ? -1 : a > b ? 1 : 0);

/** The day's 24 hours, totals and per model, from the stores' per-model hourly counters. */
function hourly(u: DayUsage): HourUsage[] {
  const models = [...u.byModelHour].sort(byName);
  const out: HourUsage[] = [];
  for (let hour = 0; hour < HOURS_PER_DAY; hour++) {
    const h: HourUsage = { hour, tokens: 0, requests: 0, by_model: {} };
    for (const [name, m] of models) {
      const tokens = m.tokens[hour] ?? 0;
      const requests = m.requests[hour] ?? 0;
      if (requests === 0 && tokens === 0) continue;
      h.tokens += tokens;
      h.requests += requests;
      h.by_model[name] = { tokens, requests };
    }
    out.push(h);
  }
  return out;
}

/** Logs and exposes the Redis state changes of a gate's store. */
export function reportRedisState(logger: Logger | undefined): (up: boolean, reason: string) => void {
  return (up, reason) => {
    gauges.redisUp = up ? 1 : 0;
    if (up) logger?.info('gates: deciding in Redis', { reason });
    else logger?.warn('gates: Redis unavailable, deciding in memory until it returns', { reason });
  };
}
