// Shared model access of accounts under review (issue 14). Open sign-up creates unverified
// accounts, each with a daily cap: one person could multiply the cap with many accounts. Their
// cap is `modelUnverifiedDailyTokens` (RC_MODEL_UNVERIFIED_DAILY_TOKENS) unless the operator set
// the account's own with `rc account set-limits` (the operator's value wins); 0 turns the shared
// model routes off for them (their sessions are announced with `modelAccess: false`, and the
// gateway answers 403 account_not_verified). Applied through the gates' per-account overrides,
// so the gateway needs no new setting.
import type { ControlPlaneSettings } from './deps.js';
import type { LimitOverrides } from './sources.js';

export type ModelAccessSettings = Pick<ControlPlaneSettings, 'modelDailyTokens' | 'modelUnverifiedDailyTokens'>;

/** Whether an account may use the shared model routes from its browser session. */
export function hasSharedModelAccess(verified: boolean, s: ModelAccessSettings): boolean {
  return verified || s.modelUnverifiedDailyTokens > 0;
}

/** The gate overrides the gateway applies: the stored ones; under review, the daily cap bounded by the setting. */
export function effectiveOverrides(stored: LimitOverrides | null | undefined, verified: boolean, s: ModelAccessSettings): LimitOverrides | null {
  if (verified || stored?.dailyTokens != null || s.modelUnverifiedDailyTokens === 0 || s.modelUnverifiedDailyTokens >= s.modelDailyTokens)
    return stored ?? null;
  return { ...stored, dailyTokens: s.modelUnverifiedDailyTokens };
}
