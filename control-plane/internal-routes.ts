// The internal API: what standalone gateways learn from the control plane (lib/gateway-snapshot.ts).
// Access `internal`: the x-rc-internal-token header must carry the internal token
// (RC_INTERNAL_TOKEN, or the data dir's internal.token). Never on a public path of its own: it
// lives under /api/internal/ and answers 401 to everyone else.
import type { ModelEntry } from '../lib/config.js';
import { SNAPSHOT_PATH, type GatewaySnapshot, type InstanceRouteWire } from '../lib/gateway-snapshot.js';
import { route, type Route } from './router.js';
import type { Store } from './store.js';

export interface InternalSources {
  store: Store;
  /** The shared catalog as gateways serve it (embedded sims' URLs filled in). */
  catalog(): ModelEntry[];
  /** Every live instance's route. */
  instanceRoutes(): InstanceRouteWire[];
  tunnel: GatewaySnapshot['tunnel'];
}

export function gatewaySnapshot(src: InternalSources): GatewaySnapshot {
  const { store } = src;
  return {
    keys: store.keys.all().map((k) => ({ keyHash: k.keyHash, accountId: k.accountId })),
    sessions: store.sessions.live(),
    limits: store.limits.all().map((l) => ({ accountId: l.accountId, rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens })),
    models: src.catalog(),
    instances: src.instanceRoutes(),
    tunnel: src.tunnel,
  };
}

export function internalRoutes(src: InternalSources): Route[] {
  return [route({ method: 'get', path: SNAPSHOT_PATH, access: 'internal', handle: () => ({ body: gatewaySnapshot(src) }) })];
}
