// Which attempt limits a control plane uses (issue #43): without REDIS_URL this process's memory,
// as before; with it Redis, shared by every control plane, and this process's memory while Redis
// is unreachable.
//
// Redis unreachable (refused, closed, or no answer within RC_AUTH_REDIS_TIMEOUT_MS): the
// decision is this process's in-memory limits' (fail open to local limits, as the gateway's gates
// do), and Redis is skipped for BACKOFF_MS before it is asked again. Why not refuse (fail
// closed): a Redis outage would then be an outage of sign-in, sign-up and coupons for every
// user, real ones included, while the local limits still bound each process's scrypt work and
// every guessing rule (per address, per pair, per account); for the outage an attacker gets at
// most N times the limits across N control planes, which is what every control plane allowed
// before the limits were shared. What was counted in memory meanwhile is not carried to Redis
// when it returns; a call abandoned at the timeout may still count there.
import { Redis } from 'ioredis';
import { systemClock, type Clock } from '../../lib/clock.js';
import type { Config } from '../../lib/config.js';
import type { Logger } from '../../lib/log.js';
import { TIMED_OUT, within } from '../../lib/within.js';
import { MemoryAttemptLimits, type AttemptLimits, type AttemptLimitSettings, type Awaitable } from './attempt-limits.js';
import { RedisAttemptLimits } from './redis-limits.js';

/** After a failed or timed-out call, Redis is skipped this long (a frozen Redis must not cost every sign-in the timeout). */
export const BACKOFF_MS = 1000;
/** The longest a starting control plane waits for its first connection to Redis (then it starts on its memory). */
const CONNECT_WAIT_MS = 2000;

/** Redis while it answers, else `local`. */
export class SharedAttemptLimits implements AttemptLimits {
  private backoffUntil = 0;
  /** What was last logged: Redis decides (true) or memory (false). */
  private onRedis = true;

  constructor(
    private readonly shared: RedisAttemptLimits,
    private readonly local: MemoryAttemptLimits,
    private readonly o: { timeoutMs: number; logger?: Logger | undefined },
  ) {
    shared.redis.on('ready', this.onReady);
    shared.redis.on('close', this.onClose);
    if (shared.redis.status !== 'ready') this.report(false, `connection ${shared.redis.status}`);
  }

  private readonly onReady = () => this.report(true, 'connected');
  private readonly onClose = () => this.report(false, 'connection closed');

  /** Closes the connection (the control plane's close: not an outage to log). */
  close(): void {
    this.shared.redis.off('ready', this.onReady);
    this.shared.redis.off('close', this.onClose);
    this.shared.redis.disconnect();
  }

  /** True while Redis decides: connected, and no failure in the last BACKOFF_MS. */
  get usingRedis(): boolean {
    if (this.shared.redis.status !== 'ready') return false;
    return Date.now() >= this.backoffUntil;
  }

  admitSignIn(email: string, clientAddress: string): Awaitable<number> {
    return this.decide((l) => l.admitSignIn(email, clientAddress));
  }
  signInFailed(email: string, clientAddress: string): Awaitable<void> {
    return this.decide((l) => l.signInFailed(email, clientAddress));
  }
  signInSucceeded(email: string, clientAddress: string): Awaitable<void> {
    return this.decide((l) => l.signInSucceeded(email, clientAddress));
  }
  takeSignUp(clientAddress: string): Awaitable<number> {
    return this.decide((l) => l.takeSignUp(clientAddress));
  }
  takeRedemption(accountId: number, clientAddress: string): Awaitable<number> {
    return this.decide((l) => l.takeRedemption(accountId, clientAddress));
  }

  private decide<T>(call: (l: AttemptLimits) => Awaitable<T>): Awaitable<T> {
    return this.usingRedis ? this.viaRedis(call) : call(this.local);
  }

  private async viaRedis<T>(call: (l: AttemptLimits) => Awaitable<T>): Promise<T> {
    try {
      const answer = await within(Promise.resolve(call(this.shared)), this.o.timeoutMs);
      if (answer === TIMED_OUT) throw new Error(`no answer within ${this.o.timeoutMs} ms`);
      this.report(true, 'answering');
      return answer;
    } catch (err) {
      this.backoffUntil = Date.now() + BACKOFF_MS;
      this.report(false, (err as Error).message);
      return call(this.local);
    }
  }

  /** Logs a change of who decides (once per change, not per call). */
  private report(onRedis: boolean, reason: string): void {
    if (onRedis === this.onRedis) return;
    this.onRedis = onRedis;
    if (onRedis) this.o.logger?.info('attempt limits: back on Redis (shared by every control plane)', { reason });
    else this.o.logger?.warn("attempt limits: Redis unreachable, this process's in-memory limits decide", { reason });
  }
}

export interface OpenedLimits {
  limits: AttemptLimits;
  close(): void;
}

/**
 * The control plane's limits: in memory without `redisUrl`; else shared in Redis over a
 * connection of their own, waiting at most CONNECT_WAIT_MS (or the first failure) for it.
 */
export async function openAttemptLimits(
  settings: AttemptLimitSettings & Pick<Config, 'redisUrl' | 'gateKeyPrefix' | 'authRedisTimeoutMs'>,
  o: { clock?: Clock | undefined; logger?: Logger | undefined } = {},
): Promise<OpenedLimits> {
  const local = new MemoryAttemptLimits(settings, o.clock);
  if (settings.redisUrl === '') return { limits: local, close: () => {} };
  // No offline queue and no retries: a call while Redis is away fails at once (memory decides)
  // instead of waiting for a reconnection.
  const redis = new Redis(settings.redisUrl, { enableOfflineQueue: false, maxRetriesPerRequest: 0, connectTimeout: CONNECT_WAIT_MS });
  redis.on('error', () => {}); // state changes are logged by SharedAttemptLimits
  await new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      redis.off('ready', done);
      redis.off('close', done);
      resolve();
    };
    const timer = setTimeout(done, CONNECT_WAIT_MS);
    redis.once('ready', done);
    redis.once('close', done);
  });
  // The system clock's times come from Redis (TIME): one clock for every control plane.
  const clock = o.clock === systemClock ? undefined : o.clock;
  const shared = new RedisAttemptLimits(redis, { prefix: settings.gateKeyPrefix, settings, clock });
  const limits = new SharedAttemptLimits(shared, local, { timeoutMs: settings.authRedisTimeoutMs, logger: o.logger });
  return { limits, close: () => limits.close() };
}
