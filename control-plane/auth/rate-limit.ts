// Rate limits of sign-in, sign-up and coupon redemption, in this process's memory: the default
// (one control plane), and the fallback while Redis is unreachable. With REDIS_URL the same
// policy is decided in Redis, shared by every control plane (redis-limits.ts, limit-scripts.ts;
// attempt-limits.ts chooses).
//
// Sign-in policy (control-plane/README.md, "Sign-in limits"):
// 1. Per client address, every attempt: a bucket of `loginPerAddressPerMinute` attempts that
//    refills at that rate. Bounds the scrypt work one address can cause and password spraying.
// 2. Per (account, address), failures: `FREE_FAILURES` free, then each further failure makes that
//    address wait 1 s, doubling, at most `MAX_PAIR_WAIT_MS`; forgotten `PAIR_FORGET_MS` after the
//    last failure. An attacker's failures slow the
//    attacker's address only, never the real user's.
// 3. Per account across addresses, failures: a bucket of `ACCOUNT_FAILURE_BURST` refilling one per
//    `ACCOUNT_FAILURE_REFILL_MS`. When it is empty (a distributed guess), only addresses that
//    signed in to this account successfully before (remembered `KNOWN_ADDRESS_TTL_MS`) may try;
//    others wait for the next token (at most a minute). So a real user on a known address is never
//    locked out; one on a new address waits at most a minute per attempt while an attack lasts.
// A refused attempt (429) checks no password and does not count as a failure, so hammering
// does not extend anyone's wait. A success clears the pair's failures.
import { isIPv6 } from 'node:net';
import { systemClock, type Clock } from '../../lib/clock.js';

export const FREE_FAILURES = 5;
export const MAX_PAIR_WAIT_MS = 5 * 60_000;
export const ACCOUNT_FAILURE_BURST = 20;
export const ACCOUNT_FAILURE_REFILL_MS = 60_000;
export const KNOWN_ADDRESS_TTL_MS = 30 * 86_400_000;
/** A pair's failures are forgotten this long after its last one. */
export const PAIR_FORGET_MS = 15 * 60_000;
/** Entries kept per map before idle ones are swept (memory stays bounded under a flood of addresses). */
const SWEEP_AT = 10_000;
/** At most one sweep per map this often (a sweep walks the map: never on every request of a flood). */
const SWEEP_EVERY_MS = 10_000;

/**
 * The key a client address is limited by: an IPv4 address as is, an IPv6 address by its /64
 * (one host usually holds a whole /64 and could otherwise rotate through it).
 */
export function addressKey(address: string): string {
  const a = address.trim().toLowerCase();
  if (a.startsWith('::ffff:') && a.includes('.')) return a.slice(7); // IPv4-mapped
  if (!isIPv6(a)) return a;
  const [head = '', tail] = a.split('::');
  const left = head ? head.split(':') : [];
  const right = tail ? tail.split(':') : [];
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

/** The key of an (account, client address) pair. */
const pairKeyOf = (email: string, address: string): string => `${email}\0${address}`;

/** Token buckets by key: `capacity` tokens, refilled continuously at `capacity` per `periodMs`. */
export class KeyedBuckets {
  private readonly buckets = new Map<string, { tokens: number; at: number }>();
  private lastSweep = 0;

  constructor(
    private readonly capacity: number,
    private readonly periodMs: number,
    private readonly clock: Clock = systemClock,
  ) {}

  private level(key: string, now: number): { tokens: number; at: number } {
    const b = this.buckets.get(key);
    if (!b) return { tokens: this.capacity, at: now };
    return { tokens: Math.min(this.capacity, b.tokens + ((now - b.at) * this.capacity) / this.periodMs), at: now };
  }

  /** Milliseconds until `key` has a token (0: it has one now). */
  waitMs(key: string): number {
    const b = this.level(key, this.clock.now());
    return b.tokens >= 1 ? 0 : Math.ceil(((1 - b.tokens) * this.periodMs) / this.capacity);
  }

  /** Takes a token; returns 0, or the milliseconds to wait when there is none (nothing taken). */
  take(key: string): number {
    const now = this.clock.now();
    const b = this.level(key, now);
    if (b.tokens < 1) return Math.ceil(((1 - b.tokens) * this.periodMs) / this.capacity);
    b.tokens -= 1;
    this.buckets.set(key, b);
    if (this.buckets.size > SWEEP_AT && now - this.lastSweep >= SWEEP_EVERY_MS) this.sweep(now);
    return 0;
  }

  /** Forgets buckets that have refilled completely. */
  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [k, b] of this.buckets) if (b.tokens + ((now - b.at) * this.capacity) / this.periodMs >= this.capacity) this.buckets.delete(k);
  }
}

export interface SignInLimitOptions {
  /** Sign-in attempts per client address per minute (burst of the same size). */
  perAddressPerMinute: number;
  clock?: Clock;
}

/** The sign-in limits (see the policy above). */
export class SignInLimits {
  private readonly addresses: KeyedBuckets;
  private readonly accountFailures: KeyedBuckets;
  private readonly pairs = new Map<string, { failures: number; blockedUntil: number; at: number }>();
  /** `email\0address` -> when it last signed in successfully. */
  private readonly known = new Map<string, number>();
  private readonly clock: Clock;
  private lastSweep = 0;

  constructor(o: SignInLimitOptions) {
    this.clock = o.clock ?? systemClock;
    this.addresses = new KeyedBuckets(o.perAddressPerMinute, 60_000, this.clock);
    this.accountFailures = new KeyedBuckets(ACCOUNT_FAILURE_BURST, ACCOUNT_FAILURE_BURST * ACCOUNT_FAILURE_REFILL_MS, this.clock);
  }

  /** Before checking a password: 0 when the attempt may go ahead, else milliseconds to wait. */
  admit(email: string, clientAddress: string): number {
    const address = addressKey(clientAddress);
    const now = this.clock.now();
    const pairKey = pairKeyOf(email, address);
    const pair = this.pairs.get(pairKey);
    if (pair && pair.blockedUntil > now) return pair.blockedUntil - now;
    const knownAt = this.known.get(pairKey);
    const isKnown = knownAt !== undefined && now - knownAt < KNOWN_ADDRESS_TTL_MS;
    if (!isKnown) {
      const wait = this.accountFailures.waitMs(email);
      if (wait > 0) return wait;
    }
    return this.addresses.take(address);
  }

  /** A wrong password (or unknown e-mail) from `address`. */
  failed(email: string, clientAddress: string): void {
    const now = this.clock.now();
    const pairKey = pairKeyOf(email, addressKey(clientAddress));
    const old = this.pairs.get(pairKey);
    const pair = old && now - old.at < PAIR_FORGET_MS ? old : { failures: 0, blockedUntil: 0, at: now };
    pair.failures += 1;
    pair.at = now;
    if (pair.failures > FREE_FAILURES) pair.blockedUntil = now + Math.min(MAX_PAIR_WAIT_MS, 1000 * 2 ** (pair.failures - FREE_FAILURES - 1));
    this.pairs.set(pairKey, pair);
    this.accountFailures.take(email);
    if (this.pairs.size > SWEEP_AT && now - this.lastSweep >= SWEEP_EVERY_MS) this.sweepPairs(now);
  }

  /** A successful sign-in: the pair's failures are forgotten and the address becomes known. */
  succeeded(email: string, clientAddress: string): void {
    const now = this.clock.now();
    const pairKey = pairKeyOf(email, addressKey(clientAddress));
    this.pairs.delete(pairKey);
    this.known.set(pairKey, now);
    if (this.known.size > SWEEP_AT && now - this.lastSweep >= SWEEP_EVERY_MS) {
      this.lastSweep = now;
      for (const [k, at] of this.known) if (now - at >= KNOWN_ADDRESS_TTL_MS) this.known.delete(k);
    }
  }

  private sweepPairs(now: number): void {
    this.lastSweep = now;
    for (const [k, p] of this.pairs) if (p.blockedUntil <= now && now - p.at > MAX_PAIR_WAIT_MS) this.pairs.delete(k);
  }
}

/**
 * Redemption attempts per account and per client address, each a token bucket refilled over an
 * hour: every attempt takes one from both (a success too, so a right guess costs what a wrong
 * one does), and one refused costs no lookup. 650-1,770 tries a second from one account found a
 * 4-character code in a minute (issue 44); Stripe limits redemption-like calls the same way.
 */
export class RedemptionLimits {
  private readonly perAccount: KeyedBuckets;
  private readonly perAddress: KeyedBuckets;

  constructor(perAccountPerHour: number, perAddressPerHour: number, clock: Clock = systemClock) {
    this.perAccount = new KeyedBuckets(perAccountPerHour, 3_600_000, clock);
    this.perAddress = new KeyedBuckets(perAddressPerHour, 3_600_000, clock);
  }

  /** Takes an attempt for both; returns 0, or the milliseconds to wait (nothing taken). */
  take(accountId: number, address: string): number {
    const account = String(accountId);
    const at = addressKey(address);
    const wait = Math.max(this.perAccount.waitMs(account), this.perAddress.waitMs(at));
    if (wait > 0) return wait;
    this.perAccount.take(account);
    this.perAddress.take(at);
    return 0;
  }
}
