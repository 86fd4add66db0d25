// The gates of the model gateway: createGate() builds the RequestGate the gateway calls
// (gateway/gates/gate.ts), from the settings. See README.md in this folder.
import type { Bus } from '../../lib/bus.js';
import type { Clock } from '../../lib/clock.js';
import type { Config } from '../../lib/config.js';
import type { Logger } from '../../lib/log.js';
import { AccountLimits, type LimitsLookup } from './limits.js';
import { LimitGate, reportRedisState } from './limit-gate.js';
import { RedisGateStore, type GateRedis } from './redis-store.js';
import { RespClient } from './resp-client.js';

export { AccountLimits, type Limits, type LimitOverrides, type LimitsLookup, type LimitsSource } from './limits.js';
export { LimitGate, InvalidDayError, type HourUsage, type ModelUsage } from './limit-gate.js';
export { GateRedisError, RedisGateStore, type GateRedis } from './redis-store.js';
export { RespClient } from './resp-client.js';
export { MemoryGateStore } from './memory-store.js';
export { gateMetrics } from './metrics.js';
export { GATE_CODES, RATE_LIMIT_MESSAGE, type GateCode } from './codes.js';

export type GateConfig = Pick<Config, 'modelRpm' | 'modelTpm' | 'modelDailyTokens' | 'redisUrl' | 'gateRedisTimeoutMs' | 'gateKeyPrefix'>;

export interface CreateGateOptions {
  /** A Redis client to use instead of one opened from config.redisUrl (the gate does not close it). Give it `enableOfflineQueue: false`. */
  redis?: GateRedis | undefined;
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

  let client: GateRedis | undefined = options.redis;
  let own: RespClient | undefined;
  if (!client && config.redisUrl !== '') {
    // The gate's own connection (resp-client.ts): a command never waits for a connection, the
    // admissions and settlements of one event-loop turn go out in one write, and a lost
    // connection is retried after min(attempt * 100, 1000) ms.
    own = new RespClient(config.redisUrl, { connectTimeoutMs: 2000 });
    own.on('error', () => {}); // state changes are logged through the store
    client = own;
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
      own?.disconnect();
    },
  });
}
