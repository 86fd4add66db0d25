// The JSON shapes the API and the CLI print for accounts.
import type { Account } from './accounts.js';
import { liveBalanceMicros } from './instances/live-balance.js';
import { toCredits } from './ledger.js';
import type { Store } from './store.js';

/** GET /api/me: SPEC's account profile fields, exactly. */
export interface Profile {
  id: number;
  email: string;
  /** The live balance: the ledger minus what running instances accrued since their last written period. */
  credits: number;
  verified: boolean;
  is_editor: boolean;
  provider: string;
  /** The current key; null for an account without one (unverified). */
  api_token: string | null;
  ssh_public_key: string | null;
}

export function profile(store: Store, a: Account): Profile {
  return {
    id: a.id,
    email: a.email,
    credits: toCredits(liveBalanceMicros(store, a.id)),
    verified: a.verified,
    is_editor: a.isEditor,
    provider: a.provider,
    api_token: a.verified ? store.keys.current(a.id) : null,
    ssh_public_key: a.sshPublicKey,
  };
}

/** One row of `rc account list`: the profile without the key. */
export function accountSummary(store: Store, a: Account) {
  const limits = store.limits.get(a.id);
  return {
    id: a.id,
    email: a.email,
    credits: toCredits(liveBalanceMicros(store, a.id)),
    verified: a.verified,
    is_editor: a.isEditor,
    provider: a.provider,
    has_api_token: store.keys.current(a.id) !== null,
    limits: limits ? { rpm: limits.rpm, tpm: limits.tpm, daily_tokens: limits.dailyTokens } : null,
    created_at: new Date(a.createdAt).toISOString(),
  };
}
