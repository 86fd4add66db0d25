// What the gateway reads from the control plane's store, once at start (then kept current by
// bus events): live keys, per-account limit overrides, and the shared model catalog.
import type { ModelEntry } from '../lib/config.js';
import type { KeyRecord, SessionRecord } from '../lib/gateway-snapshot.js';
import { effectiveOverrides, hasSharedModelAccess, type ModelAccessSettings } from './model-access.js';
import type { Store } from './store.js';

export type { KeyRecord, SessionRecord };
/** Structurally the gateway's KeySource (gateway/auth/keys.ts). */
export interface KeySource {
  load(): Promise<Iterable<KeyRecord>>;
  loadSessions?(): Promise<Iterable<SessionRecord>>;
}

/**
 * A KeySource over the database: every live key (one per verified account) and every live browser
 * session; with `access`, sessions of accounts without shared model access are marked (model-access.ts).
 */
export function storeKeySource(store: Store, access?: ModelAccessSettings): KeySource {
  // Only when accounts under review have no shared model access is each session's account read.
  const reviewClosed = access !== undefined && !hasSharedModelAccess(false, access);
  const withAccess = async (r: SessionRecord): Promise<SessionRecord> =>
    reviewClosed && !((await store.accounts.byId(r.accountId))?.verified ?? false) ? { ...r, modelAccess: false } : r;
  return { load: () => store.keys.all(), loadSessions: async () => Promise.all((await store.sessions.live()).map(withAccess)) };
}

/** An account's limit overrides as the gates take them (gateway/gates/limits.ts LimitOverrides); null: none. */
export type LimitOverrides = { rpm?: number | null; tpm?: number | null; dailyTokens?: number | null };

/**
 * For AccountLimits.follow(bus, lookup): the account's current overrides; with `access`, an
 * unverified account's daily cap is bounded (model-access.ts).
 */
export function storeLimitsLookup(store: Store, access?: ModelAccessSettings): (accountId: number) => Promise<LimitOverrides | null> {
  return async (accountId) => {
    const l = await store.limits.get(accountId);
    const stored = l ? { rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens } : null;
    return access ? effectiveOverrides(stored, (await store.accounts.byId(accountId))?.verified ?? true, access) : stored;
  };
}

/** For AccountLimits.load(entries): every stored override; with `access`, also the unverified accounts' caps. */
export async function storeLimitOverrides(store: Store, access?: ModelAccessSettings): Promise<[number, LimitOverrides][]> {
  const out = new Map<number, LimitOverrides>((await store.limits.all()).map((l) => [l.accountId, { rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens }]));
  if (access) {
    for (const a of await store.accounts.list()) {
      const o = effectiveOverrides(out.get(a.id), a.verified, access);
      if (o) out.set(a.id, o);
    }
  }
  return [...out];
}

/**
 * The shared model catalog: the configured models (RC_CONFIG, or the default sim models) merged
 * with the models added by `rc model add`; on the same name the database entry wins. Call it
 * again on every `catalog.changed` event.
 */
export async function mergedCatalog(configured: readonly ModelEntry[], store: Store): Promise<ModelEntry[]> {
  const byName = new Map<string, ModelEntry>();
  for (const m of configured) byName.set(m.name, m);
  for (const m of await store.models.list()) byName.set(m.name, m);
  return [...byName.values()];
}

/** A catalog source function for the gateway. */
export function storeCatalogSource(configured: readonly ModelEntry[], store: Store): () => Promise<ModelEntry[]> {
  return () => mergedCatalog(configured, store);
}
