// The gates of the model gateway: createGate() builds the RequestGate the gateway calls
// (gateway/gate.ts), from the settings. See README.md in this folder.
import { Redis, type Cluster } from 'ioredis';
import type { Bus } from '../../lib/bus.js';
import type { Clock } from '../../lib/clock.js';
import type { Config } from '../../lib/config.js';
import type { Logger } from '../../lib/log.js';
import { AccountLimits, type LimitsLookup } from './limits.js';
import { LimitGate, reportRedisState } from './limit-gate.js';
import { RedisGateStore } from './redis-store.js';

export { AccountLimits, type Limits, type LimitOverrides, type LimitsLookup, type LimitsSource } from './limits.js';
export { LimitGate, InvalidDayError, type HourUsage, type ModelUsage } from './limit-gate.js';
export { GateRedisError, RedisGateStore } from './redis-store.js';
export { MemoryGateStore } from './memory-store.js';
export { gateMetrics } from './metrics.js';
export { GATE_CODES, RATE_LIMIT_MESSAGE, type GateCode } from './codes.js';

export type GateConfig = Pick<Config, 'modelRpm' | 'modelTpm' | 'modelDailyTokens' | 'redisUrl' | 'gateRedisTimeoutMs' | 'gateKeyPrefix'>;

export interface CreateGateOptions {
  /** A Redis client to use instead of one opened from config.redisUrl (the gate does not close it). Give it `enableOfflineQueue: false`. */
  redis?: Redis | Cluster | undefined;
  /** Follow `account.changed` events for per-account limit overrides. */
  bus?: Bus | undefined;
  /** Resolves an account's overrides on `account.changed` events that carry none. */
  lookup?: LimitsLookup | undefined;
  /** Per-account limits; default: AccountLimits from the config defaults. */
  limits?: AccountLimits | undefined;
  /** For tests: drives bucket time (in Redis too) and the UTC day. */
  clock?: Clock | undefined;
  logger?: Logger | undefined;
}

/**
 * Builds the gates: in memory, or in Redis when config.redisUrl is set (or `redis` is given),
 * with the in-memory gates as the fallback while Redis is unreachable.
 */
export function createGate(config: GateConfig, options: CreateGateOptions = {}): LimitGate {
  const logger = options.logger?.child({ part: 'gates' });
  const limits = options.limits ?? new AccountLimits({ rpm: config.modelRpm, tpm: config.modelTpm, dailyTokens: config.modelDailyTokens });
  const unfollow = options.bus
    ? limits.follow(options.bus, options.lookup, (err, accountId) => logger?.warn('gates: ignoring bad limits for account', { accountId, err }))
    : undefined;

  let client: Redis | Cluster | undefined = options.redis;
  const ownClient = !client && config.redisUrl !== '';
  if (ownClient) {
    client = new Redis(config.redisUrl, {
      // Never queue or retry a gate call: a request waits on Redis at most gateRedisTimeoutMs.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      connectTimeout: 2000,
      retryStrategy: (attempt: number) => Math.min(attempt * 100, 1000),
      // The admissions and settlements of the requests handled in one event-loop turn go to
      // Redis in one write (and come back in one read) instead of a socket write each.
      enableAutoPipelining: true,
    });
    client.on('error', () => {}); // state changes are logged through the store
  }
  const redis = client
    ? new RedisGateStore(client, { prefix: config.gateKeyPrefix, timeoutMs: config.gateRedisTimeoutMs, onState: reportRedisState(logger) })
    : undefined;

  return new LimitGate({
    limits,
    redis,
    clock: options.clock,
    onClose: () => {
      unfollow?.();
      if (ownClient) client?.disconnect();
    },
  });
}
