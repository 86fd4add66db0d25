// What the gateway reads from the control plane's store, once at start (then kept current by
// bus events): live keys, per-account limit overrides, and the shared model catalog.
import type { ModelEntry } from '../lib/config.js';
import type { Store } from './store.js';

/** Structurally identical to gateway/keys.ts KeySource (kept local so this part compiles alone). */
export interface KeyRecord { keyHash: string; accountId: number }
export interface SessionRecord { tokenHash: string; csrfHash: string; accountId: number; expiresAt: number }
export interface KeySource { load(): Promise<Iterable<KeyRecord>>; loadSessions?(): Promise<Iterable<SessionRecord>> }

/** A KeySource over the database: every live key (one per verified account) and every live browser session. */
export function storeKeySource(store: Store): KeySource {
  return { load: async () => store.keys.all(), loadSessions: async () => store.sessions.live() };
}

/** An account's limit overrides as the gates take them (gateway/gates/limits.ts LimitOverrides); null: none. */
export type LimitOverrides = { rpm?: number | null; tpm?: number | null; dailyTokens?: number | null };

/** For AccountLimits.follow(bus, lookup): the account's current overrides. */
export function storeLimitsLookup(store: Store): (accountId: number) => LimitOverrides | null {
  return (accountId) => {
    const l = store.limits.get(accountId);
    return l ? { rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens } : null;
  };
}

/** For AccountLimits.load(entries): every stored override. */
export function storeLimitOverrides(store: Store): [number, LimitOverrides][] {
  return store.limits.all().map((l) => [l.accountId, { rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens }]);
}

/**
 * The shared model catalog: the configured models (RC_CONFIG, or the default sim models) merged
 * with the models added by `rc model add`; on the same name the database entry wins. Call it
 * again on every `catalog.changed` event.
 */
export function mergedCatalog(configured: readonly ModelEntry[], store: Store): ModelEntry[] {
  const byName = new Map<string, ModelEntry>();
  for (const m of configured) byName.set(m.name, m);
  for (const m of store.models.list()) byName.set(m.name, m);
  return [...byName.values()];
}

/** A catalog source function for the gateway. */
export function storeCatalogSource(configured: readonly ModelEntry[], store: Store): () => ModelEntry[] {
  return () => mergedCatalog(configured, store);
}
