// The attempt limits as the routes ask them (issue #43): sign-in (routes-auth.ts), sign-up and
// verification mails (one bucket per address: each can send a mail; routes-auth.ts,
// routes-email.ts), coupon redemption (routes-account.ts). Two implementations decide the same
// policy (rate-limit.ts header, control-plane/README.md "Sign-in limits"): this process's memory
// (MemoryAttemptLimits, the default: synchronous, nothing new on the SQLite path) and Redis
// (redis-limits.ts), shared by every control plane; shared-limits.ts picks and falls back.
import type { Clock } from '../../lib/clock.js';
import type { Config } from '../../lib/config.js';
import { ACCOUNT_FAILURE_BURST, ACCOUNT_FAILURE_REFILL_MS, addressKey, KeyedBuckets, RedemptionLimits, SignInLimits } from './rate-limit.js';

/** A value, or a promise of it (the memory limits answer at once; the routes await either). */
export type Awaitable<T> = T | Promise<T>;

/** Every answer that is a number is 0 (go ahead; an attempt was counted) or the milliseconds to wait (nothing counted). */
export interface AttemptLimits {
  /** Before checking a password. */
  admitSignIn(email: string, clientAddress: string): Awaitable<number>;
  /** A wrong password (or unknown e-mail). */
  signInFailed(email: string, clientAddress: string): Awaitable<void>;
  /** A right password: the pair's failures are forgotten, the address becomes known to the account. */
  signInSucceeded(email: string, clientAddress: string): Awaitable<void>;
  /** A sign-up or a request for a new verification mail from the address. */
  takeSignUp(clientAddress: string): Awaitable<number>;
  /** A coupon redemption attempt by the account from the address. */
  takeRedemption(accountId: number, clientAddress: string): Awaitable<number>;
}

/** The settings the limits read. */
export type AttemptLimitSettings = Pick<
  Config,
  'loginPerAddressPerMinute' | 'signupPerAddressPerHour' | 'couponAttemptsPerAccountPerHour' | 'couponAttemptsPerAddressPerHour'
>;

export interface BucketRate {
  capacity: number;
  periodMs: number;
}

/** Each bucket's capacity and refill period, from the settings: the same for memory and Redis. */
export function bucketRates(s: AttemptLimitSettings) {
  const hour = 3_600_000;
  return {
    signInPerAddress: { capacity: s.loginPerAddressPerMinute, periodMs: 60_000 },
    failuresPerAccount: { capacity: ACCOUNT_FAILURE_BURST, periodMs: ACCOUNT_FAILURE_BURST * ACCOUNT_FAILURE_REFILL_MS },
    signUpPerAddress: { capacity: s.signupPerAddressPerHour, periodMs: hour },
    couponsPerAccount: { capacity: s.couponAttemptsPerAccountPerHour, periodMs: hour },
    couponsPerAddress: { capacity: s.couponAttemptsPerAddressPerHour, periodMs: hour },
  } satisfies Record<string, BucketRate>;
}

/** The limits in this process's memory (one control plane; the fallback while Redis is away). */
export class MemoryAttemptLimits implements AttemptLimits {
  private readonly signIns: SignInLimits;
  private readonly signUps: KeyedBuckets;
  private readonly redemptions: RedemptionLimits;

  constructor(settings: AttemptLimitSettings, clock?: Clock) {
    const r = bucketRates(settings);
    this.signIns = new SignInLimits({ perAddressPerMinute: settings.loginPerAddressPerMinute, clock });
    this.signUps = new KeyedBuckets(r.signUpPerAddress.capacity, r.signUpPerAddress.periodMs, clock);
    this.redemptions = new RedemptionLimits(r.couponsPerAccount.capacity, r.couponsPerAddress.capacity, clock);
  }

  admitSignIn(email: string, clientAddress: string): number {
    return this.signIns.admit(email, clientAddress);
  }
  signInFailed(email: string, clientAddress: string): void {
    this.signIns.failed(email, clientAddress);
  }
  signInSucceeded(email: string, clientAddress: string): void {
    this.signIns.succeeded(email, clientAddress);
  }
  takeSignUp(clientAddress: string): number {
    return this.signUps.take(addressKey(clientAddress));
  }
  takeRedemption(accountId: number, clientAddress: string): number {
    return this.redemptions.take(accountId, clientAddress);
  }
}
