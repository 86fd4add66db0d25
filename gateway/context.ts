// What every gateway route gets: the seam between the gateway core and route modules such as
// gateway/messages/. A RoutePlugin receives the uWS app and this context and registers its routes.
import type { Logger } from '../lib/log.js';
import type { HeldLimits } from '../lib/held-limits.js';
import type { UploadLimits, UploadLimitSettings } from '../lib/upload-limits.js';
import type { HttpRequest, TemplatedApp } from '../lib/uws.js';
import type { Catalog } from './backends/model-catalog.js';
import type { RequestGate } from './gates/gate.js';
import type { AuthFailure, KeyDirectory } from './auth/keys.js';
import type { CredentialHeaders } from './auth/credentials.js';
import type { GatewayMetrics } from './metrics.js';
import type { UpstreamRegistry } from './backends/upstreams.js';
import type { ParseBudget } from './request/parse-budget.js';
import type { StreamLimitSettings } from './request/held-streams.js';

export interface GatewayLimits {
  /** Largest request body (413 beyond). */
  maxBodyBytes: number;
  /** Requests forwarded to backends at once before 503 pool exhausted. */
  maxInflight: number;
  /** Output tokens reserved at admission when the request gives no max_tokens. */
  defaultMaxTokens: number;
  /** Tools, messages and blocks one body may hold (request/parse-budget.ts; 400 beyond). */
  parseBudget: ParseBudget;
  /** Request bodies in flight per client address and per account (lib/upload-limits.ts). */
  uploads: UploadLimitSettings;
  /** Streams on the shared model routes per account and per client address (request/held-streams.ts). */
  streams: StreamLimitSettings;
}

/** Requests in flight to backends, across every route. */
export class Admission {
  inflight = 0;
  constructor(public max: number) {}
  /** Takes a slot; false when all are taken (answer 503 pool exhausted with Retry-After: 5). */
  tryEnter(): boolean {
    if (this.inflight >= this.max) return false;
    this.inflight++;
    return true;
  }
  leave(): void {
    this.inflight--;
  }
}

export interface GatewayContext {
  readonly limits: GatewayLimits;
  /**
   * Behind a reverse proxy (RC_TRUST_PROXY): the per-address limits count the last
   * X-Forwarded-For entry instead of the peer, which would be the proxy for every client.
   */
  readonly trustProxy: boolean;
  readonly logger: Logger;
  readonly keys: KeyDirectory;
  readonly catalog: Catalog;
  readonly upstreams: UpstreamRegistry;
  readonly admission: Admission;
  /** Request bodies in flight per client address and per account. */
  readonly uploads: UploadLimits;
  /** Streams on the shared model routes, per account and per client address. */
  readonly streams: HeldLimits;
  readonly gate: RequestGate;
  readonly metrics: GatewayMetrics;
  /** Account id for the `authorization` and `x-api-key` header values ('' when absent), or why not. */
  authenticate(authorization: string, xApiKey: string): number | AuthFailure;
  /**
   * The shared model routes' credential: a key, else a browser session (cookie + x-csrf-token).
   * Reads the headers it needs from `req` (call synchronously in the handler).
   */
  authenticateShared(req: HttpRequest): number | AuthFailure;
  /** authenticateShared() from header values read already (auth/credentials.ts sharedOf). */
  authenticateHeaders(h: CredentialHeaders): number | AuthFailure;
}

/** Registers routes on the gateway's uWS app. Called once, before the app listens. */
export type RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => void;
