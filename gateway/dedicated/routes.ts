// Dedicated endpoints: `/dedicated/<instance id>/<port>/<path>` on the gateway, relayed to the
// serving backend (vLLM, SGLang) running on the instance. `/instances/<instance id>/<path>` is
// the same with the instance's main routed port (browsers without a key are redirected to the
// instance proxy when its URL is configured). The URL forms are read in urls.ts; admission and
// the verbatim relay of one request are in relay.ts.
import type { Config } from '../../lib/config.js';
import { HeldLimits, type HeldLimitSettings } from '../../lib/held-limits.js';
import { track } from '../../lib/http.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { InstancePools, type PoolOptions } from '../../lib/relay/forward.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { DedicatedRelay } from './relay.js';
import { parseDedicatedUrl, parseInstanceUrl } from './urls.js';

export { DEDICATED_ROUTE, MESSAGES_NOT_SERVED, NO_ACCESS, SERVING_TYPES, STARTING } from './relay.js';
export { DEDICATED_PREFIX, INSTANCE_PREFIX, isMessagesPath, parseDedicatedUrl, parseInstanceUrl, type DedicatedTarget } from './urls.js';

export interface DedicatedOptions {
  routes: InstanceRoutes;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  startingRetryAfterSec?: number;
  /** Largest request body (413 beyond); default: the gateway's limit. */
  maxBodyBytes?: number;
  pool?: Partial<PoolOptions>;
  /** Public URL of the instance proxy: browsers (no key) on `<gateway>/instances/...` are redirected there. */
  proxyUrl?: string;
  /** Requests in flight per instance, account and client address (RC_DEDICATED_INFLIGHT_*); DEFAULT_DEDICATED_INFLIGHT for what is left out. */
  inflight?: Partial<HeldLimitSettings>;
}

export const DEFAULT_DEDICATED_INFLIGHT: HeldLimitSettings = { perInstance: 512, perAccount: 1024, perAddress: 1024 };

/** Seconds a refused client is told to wait: requests to an instance end within seconds to minutes. */
export const DEDICATED_RETRY_AFTER_SEC = 5;

/** The settings' part of createDedicatedEndpoints' options. */
export function dedicatedInflightFromConfig(config: Config): HeldLimitSettings {
  return {
    perInstance: config.dedicatedInflightPerInstance,
    perAccount: config.dedicatedInflightPerAccount,
    perAddress: config.dedicatedInflightPerAddress,
  };
}

export interface DedicatedEndpoints {
  plugin: RoutePlugin;
  /** Instance addresses with a connection pool (dropped when the instance goes: routes.onGone). */
  readonly pools: number;
  /** Requests in flight per instance, account and address (tests: back to nothing when they end). */
  readonly inflight: HeldLimits;
  /** Closes the connection pools to instances. */
  close(): Promise<void>;
}

export function createDedicatedEndpoints(options: DedicatedOptions): DedicatedEndpoints {
  let pools: InstancePools | undefined;
  const inflight = new HeldLimits(
    'requests in flight',
    { ...DEFAULT_DEDICATED_INFLIGHT, ...options.inflight },
    { perInstance: 'RC_DEDICATED_INFLIGHT_PER_INSTANCE', perAccount: 'RC_DEDICATED_INFLIGHT_PER_ACCOUNT', perAddress: 'RC_DEDICATED_INFLIGHT_PER_ADDRESS' },
    DEDICATED_RETRY_AFTER_SEC,
  );
  // An ended instance's pool is closed (its requests in flight finish): one pool per instance ever
  // launched stayed behind otherwise.
  const unfollow = options.routes.onGone?.((_id, addresses) => {
    for (const a of addresses) pools?.drop(a);
  });

  const plugin: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
    const up = ctx.upstreams.opts;
    pools = new InstancePools({
      connectTimeoutMs: up.connectTimeoutMs,
      headersTimeoutMs: up.headersTimeoutMs,
      idleTimeoutMs: up.idleTimeoutMs,
      requestTimeoutMs: up.requestTimeoutMs,
      ...options.pool,
    });
    const relay = new DedicatedRelay(ctx, {
      routes: options.routes,
      pools,
      maxBodyBytes: options.maxBodyBytes ?? ctx.limits.maxBodyBytes,
      retryAfter: String(options.startingRetryAfterSec ?? 10),
      inflight,
    });

    app.any('/dedicated/*', (uwsRes: HttpResponse, req: HttpRequest) => {
      relay.handle(track(uwsRes), req, parseDedicatedUrl(req.getUrl()));
    });

    // The instance's base URL on the gateway: with a key, the dedicated endpoint on the main
    // routed port (`<gateway>/instances/<id>/v1` works as an OpenAI base URL); without one, a
    // browser: sent to the instance proxy (which needs a session), when its URL is configured.
    app.any('/instances/*', (uwsRes: HttpResponse, req: HttpRequest) => {
      const res = track(uwsRes);
      if (options.proxyUrl && req.getHeader('authorization') === '' && req.getHeader('x-api-key') === '') {
        const query = req.getQuery();
        relay.answer(res, 307, 'Open this instance through the instance proxy', {
          location: `${options.proxyUrl.replace(/\/+$/, '')}${req.getUrl()}${query ? `?${query}` : ''}`,
        });
        return;
      }
      relay.handle(res, req, parseInstanceUrl(req.getUrl()));
    });
  };

  return {
    plugin,
    get pools() {
      return pools?.size ?? 0;
    },
    inflight,
    async close() {
      unfollow?.();
      await pools?.close();
    },
  };
}
