// The settings the instance service reads (lib/config.ts SETTINGS), resolved to defaults.
import { SETTINGS, type Config } from '../../lib/config.js';
import { proxyBaseUrl } from '../../lib/instance-origin.js';

const KEYS = [
  'host',
  'gatewayPort',
  'instanceCreditsPerGpuHour',
  'instanceBillingPeriodSec',
  'instanceMaxLifetimeSec',
  'instanceIdleTimeoutSec',
  'instanceStopWarningSec',
  'instanceGpuBusyPct',
  'instanceGpuBusyWindowSec',
  'instanceGpuHistorySamples',
  'instanceLaunchRate',
  'instanceSchedule',
  'instanceTickMs',
  'instanceLeaseMs',
  'instanceHostUnreachableMs',
  'instanceHostLostMs',
  'instanceHostStallMs',
  'instancePublicUrl',
  'launchTokenTtlSec',
  'proxyPort',
  'proxyPublicUrl',
  'apiPort',
  'apiPublicUrl',
] as const;

export type InstanceSettings = Pick<Config, (typeof KEYS)[number]>;

/** The documented defaults, overridden by `given` (a Config works as is). */
export function resolveInstanceSettings(given: Partial<InstanceSettings> = {}): InstanceSettings {
  const out: Record<string, unknown> = {};
  for (const k of KEYS) out[k] = given[k] ?? SETTINGS[k].schema.parse(SETTINGS[k].default);
  return out as InstanceSettings;
}

export interface RateWindow {
  /** Window length in ms. */
  ms: number;
  /** Launches allowed within it. */
  max: number;
}

/** Parses "60:1,600:3,3600:5" (seconds:launches). */
export function parseRateWindows(spec: string): RateWindow[] {
  return spec
    .split(',')
    .filter(Boolean)
    .map((w) => {
      const [sec, max] = w.split(':').map(Number);
      return { ms: sec! * 1000, max: max! };
    });
}

/** Public URLs of an instance's front doors, without a trailing slash. */
export interface PublicUrls {
  /** The model gateway: dedicated endpoints `<gateway>/dedicated/<id>/<port>/v1`. */
  gateway: string;
  /** The instance proxy's base: each app on its own origin `<scheme>://<id>.<proxy host>` (lib/instance-origin.ts). */
  proxy: string;
  /** The platform API: browser access starts at its hand-over route `<api>/api/instances/<id>/open`. */
  readonly api: string;
}

export function publicUrls(s: InstanceSettings, apiUrl?: () => string): PublicUrls {
  const host = s.host === '0.0.0.0' || s.host === '::' ? '127.0.0.1' : s.host.includes(':') ? `[${s.host}]` : s.host;
  const trim = (u: string) => u.replace(/\/+$/, '');
  return {
    gateway: s.instancePublicUrl ? trim(s.instancePublicUrl) : `http://${host}:${s.gatewayPort}`,
    proxy: proxyBaseUrl(s.proxyPublicUrl, s.proxyPort),
    get api() {
      return trim(apiUrl?.() || s.apiPublicUrl || `http://${host}:${s.apiPort}`);
    },
  };
}
