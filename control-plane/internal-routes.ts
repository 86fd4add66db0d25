// The internal API: what standalone gateways learn from the control plane (lib/gateway-snapshot.ts).
// Access `internal`: the x-rc-internal-token header must carry the internal token
// (RC_INTERNAL_TOKEN, or the data dir's internal.token). Never on a public path of its own: it
// lives under /api/internal/ and answers 401 to everyone else.
import type { ModelEntry } from '../lib/config.js';
import { SNAPSHOT_PATH, type GatewaySnapshot, type InstanceRouteWire } from '../lib/gateway-snapshot.js';
import type { ModelAccessSettings } from './model-access.js';
import { route, type Route } from './router.js';
import { storeKeySource, storeLimitOverrides } from './sources.js';
import type { Store } from './store.js';

export interface InternalSources {
  store: Store;
  /** The shared catalog as gateways serve it (embedded sims' URLs filled in). */
  catalog(): Promise<ModelEntry[]>;
  /** Every live instance's route. */
  instanceRoutes(): InstanceRouteWire[];
  tunnel: GatewaySnapshot['tunnel'];
  /** The unverified accounts' model access and cap, applied as the embedded gateway applies them. */
  access?: ModelAccessSettings;
}

export async function gatewaySnapshot(src: InternalSources): Promise<GatewaySnapshot> {
  const { store } = src;
  // The same sources as the embedded gateway's (control-plane/sources.ts), so a replica applies
  // the same effective limits and session access.
  const keySource = storeKeySource(store, src.access);
  return {
    keys: await store.keys.all(),
    sessions: [...((await keySource.loadSessions?.()) ?? [])],
    limits: (await storeLimitOverrides(store, src.access)).map(([accountId, l]) => ({
      accountId,
      rpm: l.rpm ?? null,
      tpm: l.tpm ?? null,
      dailyTokens: l.dailyTokens ?? null,
    })),
    models: await src.catalog(),
    instances: src.instanceRoutes(),
    tunnel: src.tunnel,
  };
}

export function internalRoutes(src: InternalSources): Route[] {
  return [route({ method: 'get', path: SNAPSHOT_PATH, access: 'internal', handle: async () => ({ body: await gatewaySnapshot(src) }) })];
}
