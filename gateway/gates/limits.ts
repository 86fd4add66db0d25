// Per-account limits: the defaults from the settings, overridden per account by the control
// plane (`rc account set-limits`). Held in memory: the request path never waits for them.
// Overrides arrive through the bus (`account.changed`, optionally carrying the new limits) or
// through a lookup the owner of the accounts provides.
import { z } from 'zod';
import type { Bus, BusEvent } from '../../lib/bus.js';
import { ConfigError } from '../../lib/errors.js';
import { MAX_TPM } from './math.js';

export interface Limits {
  /** Requests per minute. */
  rpm: number;
  /** Input + output tokens per minute. */
  tpm: number;
  /** Tokens per UTC day. */
  dailyTokens: number;
}

/** An account's overrides: a missing or null field keeps the default. */
export type LimitOverrides = { [K in keyof Limits]?: number | null };

/** Where the gates read an account's limits from, on every admission (synchronously). */
export interface LimitsSource {
  get(accountId: number): Limits;
}

/** Called on `account.changed` events that carry no limits: resolves the account's current overrides (undefined or null: none). */
export type LimitsLookup = (accountId: number) => LimitOverrides | null | undefined | Promise<LimitOverrides | null | undefined>;

const limit = (max: number) => z.number().int().positive().max(max);
export const limitsSchema = z.strictObject({
  rpm: limit(1_000_000_000),
  tpm: limit(MAX_TPM),
  dailyTokens: limit(1e15),
});
export const limitOverridesSchema = z.strictObject({
  rpm: limit(1_000_000_000).nullable().optional(),
  tpm: limit(MAX_TPM).nullable().optional(),
  dailyTokens: limit(1e15).nullable().optional(),
});

/** The defaults plus a map of per-account overrides. */
export class AccountLimits implements LimitsSource {
  readonly defaults: Limits;
  private readonly overrides = new Map<number, Limits>();

  constructor(defaults: Limits) {
    const parsed = limitsSchema.safeParse(defaults);
    if (!parsed.success)
      throw new ConfigError(`Invalid default model limits: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`);
    this.defaults = Object.freeze(parsed.data);
  }

  get(accountId: number): Limits {
    return this.overrides.get(accountId) ?? this.defaults;
  }

  /** Sets (or with undefined/null/all-null, clears) an account's overrides. Throws a ZodError on bad values. */
  set(accountId: number, overrides: LimitOverrides | null | undefined): void {
    const o = overrides ? limitOverridesSchema.parse(overrides) : {};
    if (o.rpm == null && o.tpm == null && o.dailyTokens == null) {
      this.overrides.delete(accountId);
      return;
    }
    const d = this.defaults;
    this.overrides.set(accountId, Object.freeze({ rpm: o.rpm ?? d.rpm, tpm: o.tpm ?? d.tpm, dailyTokens: o.dailyTokens ?? d.dailyTokens }));
  }

  /** Replaces every override (for a start-up load). */
  load(entries: Iterable<readonly [number, LimitOverrides | null | undefined]>): void {
    this.overrides.clear();
    for (const [id, o] of entries) this.set(id, o);
  }

  /**
   * Applies `account.changed` events from the bus: their `limits` when the event carries them,
   * otherwise the result of `lookup` (if given). Returns the unsubscribe function.
   * Bad values in an event are ignored (reported through `onError`).
   */
  follow(bus: Bus, lookup?: LimitsLookup, onError: (err: unknown, accountId: number) => void = () => {}): () => void {
    return bus.subscribe((event: BusEvent) => {
      if (event.type !== 'account.changed' || !Number.isSafeInteger(event.accountId)) return;
      const id = event.accountId;
      try {
        if ('limits' in event && event.limits !== undefined) {
          this.set(id, event.limits);
          return;
        }
        if (!lookup) return;
        Promise.resolve(lookup(id)).then(
          (o) => {
            try {
              this.set(id, o);
            } catch (err) {
              onError(err, id);
            }
          },
          (err: unknown) => onError(err, id),
        );
      } catch (err) {
        onError(err, id);
      }
    });
  }
}
