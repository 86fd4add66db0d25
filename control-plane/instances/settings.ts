// The settings the instance service reads (lib/config.ts SETTINGS), resolved to defaults.
import { SETTINGS, type Config } from '../../lib/config.js';

const KEYS = [
  'host', 'gatewayPort', 'instanceCreditsPerGpuHour', 'instanceBillingPeriodSec', 'instanceMaxLifetimeSec', 'instanceIdleTimeoutSec',
  'instanceLaunchRate', 'instanceSchedule', 'instanceTickMs', 'instanceHostUnreachableMs', 'instanceHostLostMs', 'instancePublicUrl',
  'launchTokenTtlSec',
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
  return spec.split(',').filter(Boolean).map((w) => {
    const [sec, max] = w.split(':').map(Number);
    return { ms: sec! * 1000, max: max! };
  });
}

/** Where instance URLs point: the gateway's public URL, without a trailing slash. */
export function publicBaseUrl(s: InstanceSettings): string {
  if (s.instancePublicUrl) return s.instancePublicUrl.replace(/\/+$/, '');
  const host = s.host === '0.0.0.0' || s.host === '::' ? '127.0.0.1' : s.host.includes(':') ? `[${s.host}]` : s.host;
  return `http://${host}:${s.gatewayPort}`;
}
