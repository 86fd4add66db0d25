// The gates in this process's memory: the default (no REDIS_URL) and the fallback while Redis is
// unreachable. Same arithmetic as the Redis script (see math.ts), synchronous, no allocation
// beyond the outcome on the hot path once an account's state exists.
import { GateKind } from './codes.js';
import { SCALE, type Outcome } from './math.js';
import type { AdmitInput, DayUsage, GateStore, ModelDayUsage, ModelHours, SettleInput } from './store.js';
import { emptyDayUsage, emptyModelDayUsage, emptyModelHours } from './store.js';
import type { Limits } from './limits.js';

interface Buckets {
  /** Request bucket level, scaled. */
  r: number;
  /** Token bucket level, scaled; negative after a debt. */
  t: number;
  /** Time of the levels, ms. */
  ts: number;
}

/** Days of usage kept per account (readUsage looks back this far). */
const KEEP_DAYS = 8;

export class MemoryGateStore implements GateStore {
  private readonly buckets = new Map<number, Buckets>();
  /** accountId -> day index -> usage */
  private readonly days = new Map<number, Map<number, DayUsage>>();

  admit(i: AdmitInput): Outcome {
    const { limits } = i;
    const now = i.nowMs ?? Date.now();
    const b = this.refilled(i.accountId, limits, now);
    const d = this.days.get(i.accountId)?.get(i.day);
    const used = d ? d.tokens + d.reserved : 0;

    // What is left for output after the input (exact caps: the route bounds max_tokens to it).
    let estimate = i.estimate;
    let maxOutput = -1;
    const dailyRoom = limits.dailyTokens - used - i.input; // read only when the input is known
    if (i.input >= 0) {
      maxOutput = Math.min(Math.floor(b.t / SCALE) - i.input, dailyRoom);
      // A default output shrinks to what is left (to the day's room when the bucket is what is
      // short: the bucket then refuses with its own, shorter wait).
      const room = maxOutput >= 1 ? maxOutput : dailyRoom;
      if (i.defaultOutput && room >= 1 && estimate - i.input > room) estimate = i.input + room;
    }

    let gate: number = GateKind.None;
    let waitMs = 0;
    if (b.r < SCALE) {
      gate = GateKind.Requests;
      waitMs = Math.ceil((SCALE - b.r) / limits.rpm);
    }
    // An estimate of 0 (count_tokens) meets the request bucket only.
    const needT = Math.min(estimate, limits.tpm) * SCALE;
    if (estimate > 0 && b.t < needT) {
      const w = Math.ceil((needT - b.t) / limits.tpm);
      if (w >= waitMs) {
        gate = GateKind.Tokens;
        waitMs = w;
      }
    }
    if (estimate > 0 && used + Math.min(estimate, limits.dailyTokens) > limits.dailyTokens) {
      gate = GateKind.Daily;
      if (i.msToNextDay > waitMs) waitMs = i.msToNextDay;
    }
    if (gate === GateKind.None && i.input >= 0 && maxOutput < 1) {
      // Nothing left for output: refused before the backend is reached.
      if (dailyRoom < 1) {
        gate = GateKind.Daily;
        waitMs = i.msToNextDay;
      } else {
        gate = GateKind.Tokens;
        waitMs = Math.ceil(((i.input + 1) * SCALE - b.t) / limits.tpm);
      }
    }
    if (i.recountBelow > 0 && i.input >= 0 && recountWanted(gate, maxOutput, i.recountBelow, b, limits.dailyTokens - used)) {
      gate = GateKind.Recount;
      waitMs = 0;
    }
    if (gate === GateKind.None) {
      b.r -= SCALE;
      b.t -= estimate * SCALE;
      const day = d ?? this.day(i.accountId, i.day);
      day.reserved += estimate;
      day.requests += 1;
      this.model(day, i.model).requests += 1;
    }
    return outcome(gate, waitMs, b, limits, maxOutput, estimate);
  }

  settle(i: SettleInput): void {
    const used = i.inputTokens + i.outputTokens;
    const refund = i.estimate - used;
    if (refund !== 0) {
      const now = i.nowMs ?? Date.now();
      const b = this.refilled(i.accountId, i.limits, now);
      b.t = Math.min(i.limits.tpm * SCALE, b.t + refund * SCALE);
    }
    const day = this.day(i.accountId, i.day);
    day.reserved -= i.estimate;
    day.tokens += used;
    const m = this.model(day, i.model);
    m.input_tokens += i.inputTokens;
    m.output_tokens += i.outputTokens;
    m.cached_input_tokens += i.cachedTokens;
    const h = this.hours(day, i.model);
    h.tokens[i.hour]! += used;
    h.requests[i.hour]! += 1;
  }

  usage(accountId: number, day: number): DayUsage {
    const d = this.days.get(accountId)?.get(day);
    if (!d) return emptyDayUsage();
    return {
      tokens: d.tokens,
      reserved: d.reserved,
      requests: d.requests,
      byModel: new Map([...d.byModel].map(([k, v]) => [k, { ...v }])),
      byModelHour: new Map([...d.byModelHour].map(([k, v]) => [k, { tokens: [...v.tokens], requests: [...v.requests] }])),
    };
  }

  /** Forgets buckets that are full again by `now` (a full bucket and a missing one behave alike). */
  sweep(now: number, limitsOf: (accountId: number) => Limits): void {
    for (const [id, b] of this.buckets) {
      const l = limitsOf(id);
      const el = now - b.ts;
      if (b.r + el * l.rpm >= l.rpm * SCALE && b.t + el * l.tpm >= l.tpm * SCALE) this.buckets.delete(id);
    }
  }

  /** The account's buckets refilled up to `now` (created full when missing). */
  private refilled(accountId: number, l: Limits, now: number): Buckets {
    const rCap = l.rpm * SCALE;
    const tCap = l.tpm * SCALE;
    let b = this.buckets.get(accountId);
    if (!b) {
      b = { r: rCap, t: tCap, ts: now };
      this.buckets.set(accountId, b);
      return b;
    }
    const el = now - b.ts;
    if (el > 0) {
      b.r = b.r + el * l.rpm;
      b.t = b.t + el * l.tpm;
      b.ts = now;
    }
    // Also clamps levels above a capacity that was lowered since.
    if (b.r > rCap) b.r = rCap;
    if (b.t > tCap) b.t = tCap;
    return b;
  }

  private day(accountId: number, day: number): DayUsage {
    let perDay = this.days.get(accountId);
    if (!perDay) {
      perDay = new Map();
      this.days.set(accountId, perDay);
    }
    let d = perDay.get(day);
    if (!d) {
      d = emptyDayUsage();
      perDay.set(day, d);
      for (const old of perDay.keys()) if (old <= day - KEEP_DAYS) perDay.delete(old);
    }
    return d;
  }

  private model(day: DayUsage, model: string): ModelDayUsage {
    let m = day.byModel.get(model);
    if (!m) {
      m = emptyModelDayUsage();
      day.byModel.set(model, m);
    }
    return m;
  }

  private hours(day: DayUsage, model: string): ModelHours {
    let h = day.byModelHour.get(model);
    if (!h) {
      h = emptyModelHours();
      day.byModelHour.set(model, h);
    }
    return h;
  }
}

/**
 * Whether an input bound bit (scripts.ts mirrors it): it leaves an admitted request fewer output
 * tokens than `recountBelow`, or it made the token bucket or the day refuse while the request
 * bucket has room and the allowance (bucket level, the day's room) could still hold an input and
 * an output token: an exact count may then pass or leave more.
 */
function recountWanted(gate: number, maxOutput: number, recountBelow: number, b: Buckets, dayLeft: number): boolean {
  if (gate === GateKind.None) return maxOutput < recountBelow;
  if (gate !== GateKind.Tokens && gate !== GateKind.Daily) return false;
  return b.r >= SCALE && Math.floor(b.t / SCALE) >= 2 && dayLeft >= 2;
}

function outcome(gate: number, waitMs: number, b: Buckets, l: Limits, maxOutput: number, estimate: number): Outcome {
  return {
    maxOutput,
    estimate,
    gate,
    waitMs,
    remainingRequests: Math.floor(b.r / SCALE),
    remainingTokens: Math.floor(b.t / SCALE),
    resetRequestsMs: Math.ceil((l.rpm * SCALE - b.r) / l.rpm),
    resetTokensMs: Math.ceil((l.tpm * SCALE - b.t) / l.tpm),
  };
}
