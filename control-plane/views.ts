// The JSON shapes the API and the CLI print for accounts.
import type { Account } from './accounts.js';
import { liveBalanceMicros } from './instances/live-balance.js';
import { toCredits } from './ledger.js';
import type { Repositories } from './store.js';

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

export async function profile(store: Repositories, a: Account): Promise<Profile> {
  return {
    id: a.id,
    email: a.email,
    credits: toCredits(await liveBalanceMicros(store, a.id)),
    verified: a.verified,
    is_editor: a.isEditor,
    provider: a.provider,
    api_token: a.verified ? await store.keys.current(a.id) : null,
    ssh_public_key: a.sshPublicKey,
  };
}

/** One row of `rc account list`: the profile without the key. */
export async function accountSummary(store: Repositories, a: Account) {
  const limits = await store.limits.get(a.id);
  return {
    id: a.id,
    email: a.email,
    credits: toCredits(await liveBalanceMicros(store, a.id)),
    verified: a.verified,
    is_editor: a.isEditor,
    provider: a.provider,
    has_api_token: (await store.keys.current(a.id)) !== null,
    limits: limits ? { rpm: limits.rpm, tpm: limits.tpm, daily_tokens: limits.dailyTokens } : null,
    created_at: new Date(a.createdAt).toISOString(),
  };
}
