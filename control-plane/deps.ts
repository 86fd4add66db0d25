// What the route modules share: the store, the bus, the settings and the optional hooks.
import type { Bus } from '../lib/bus.js';
import { SETTINGS, type Config, type ModelEntry } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import type { Store } from './store.js';
import type { ModelContexts } from './model-contexts.js';

/** The settings the control plane reads (lib/config.ts SETTINGS). */
export type ControlPlaneSettings = Pick<Config, (typeof KEYS)[number]>;

const KEYS = [
  'apiMaxBodyBytes',
  'sessionTtlHours',
  'cookieSecure',
  'signup',
  'couponRedemption',
  'couponRetryAfterSec',
  'couponAttemptsPerAccountPerHour',
  'couponAttemptsPerAddressPerHour',
  'modelRpm',
  'modelTpm',
  'modelDailyTokens',
  'trustProxy',
  'loginPerAddressPerMinute',
  'signupPerAddressPerHour',
  'modelUnverifiedDailyTokens',
  'emailVerification',
  'smtpUrl',
  'mailFrom',
  'apiPublicUrl',
  'apiStreamsPerAccount',
  'apiStreamsPerAddress',
  'redisUrl',
  'gateKeyPrefix',
  'authRedisTimeoutMs',
] as const;

/** The documented defaults, overridden by `given`. */
export function resolveSettings(given: Partial<ControlPlaneSettings> = {}): ControlPlaneSettings {
  const out: Record<string, unknown> = {};
  for (const k of KEYS) out[k] = given[k] ?? SETTINGS[k].schema.parse(SETTINGS[k].default);
  return out as ControlPlaneSettings;
}

/**
 * GET /api/profile/model-usage's source: the gates' usage reader (gateway/gates LimitGate.readUsage),
 * wired by the lead. `day` (YYYY-MM-DD, default today) is read by the operator's usage page.
 */
export type ModelUsageReader = (accountId: number, day?: string) => unknown | Promise<unknown>;

export interface ApiDeps {
  store: Store;
  bus: Bus;
  logger: Logger;
  settings: ControlPlaneSettings;
  configuredModels: readonly ModelEntry[];
  modelUsage: ModelUsageReader | undefined;
  /** Public URL of the model gateway (for base URLs and snippets shown to users); undefined when unknown. */
  gatewayUrl: string | undefined;
  /** Each shared model's context window as its backends report it (Model APIs and the operator's Catalogs page). */
  modelContexts: ModelContexts;
}
