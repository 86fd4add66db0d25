// What a standalone gateway learns from the control plane at start and on every resync
// (GET /api/internal/gateway-snapshot, x-rc-internal-token): live key hashes, live browser
// sessions, per-account limit overrides, the shared model catalog, the live instance routes and
// the tunnel broker's settings. Between snapshots, bus events (lib/bus.ts) keep each part current.
// Produced by control-plane/internal-routes.ts, consumed by gateway/sync/.
import { z } from 'zod';
import { modelEntrySchema } from './config.js';

export const SNAPSHOT_PATH = '/api/internal/gateway-snapshot';
export const INTERNAL_TOKEN_HEADER = 'x-rc-internal-token';

const hash = z.string().regex(/^[0-9a-f]{64}$/);
const accountId = z.number().int().nonnegative();
const limit = z.number().int().positive().nullable().optional();

/** Where an instance's routed port is reachable (control-plane/instances InstanceRoute). */
export const instanceRouteSchema = z.object({
  instanceId: z.string().min(1).max(128),
  accountId,
  status: z.enum(['pending', 'ready', 'stopping', 'stopped', 'failed']),
  instanceType: z.string(),
  host: z.string().nullable(),
  port: z.number().int().min(1).max(65535).nullable(),
  routedPort: z.number().int().min(1).max(65535).nullable(),
});
export type InstanceRouteWire = z.output<typeof instanceRouteSchema>;

export const gatewaySnapshotSchema = z.object({
  keys: z.array(z.object({ keyHash: hash, accountId })),
  /** `modelAccess` false: an account under review whose shared model access is off (control-plane/model-access.ts). */
  sessions: z.array(z.object({ tokenHash: hash, csrfHash: hash, accountId, expiresAt: z.number(), modelAccess: z.boolean().optional() })),
  limits: z.array(z.object({ accountId, rpm: limit, tpm: limit, dailyTokens: limit })),
  models: z.array(modelEntrySchema),
  instances: z.array(instanceRouteSchema),
  /** The tunnel secret and the instance proxy's public URL (browsers without a key are sent there). */
  tunnel: z.object({ secret: z.string().min(16), proxyUrl: z.string() }),
});
export type GatewaySnapshot = z.output<typeof gatewaySnapshotSchema>;

/** A live key as gateways hold it (SHA-256 hex of the key). Shared by control-plane/sources.ts and gateway/auth/keys.ts. */
export interface KeyRecord {
  keyHash: string;
  accountId: number;
}

/**
 * One live browser session as gateways hold it (SHA-256 hex of the cookie token and of the CSRF
 * token). `modelAccess` false: an account under review while their daily cap is 0. Shared by
 * control-plane/sources.ts and gateway/auth/sessions.ts.
 */
export interface SessionRecord {
  tokenHash: string;
  csrfHash: string;
  accountId: number;
  expiresAt: number;
  modelAccess?: boolean;
}
