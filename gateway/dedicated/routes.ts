// Dedicated endpoints: `/dedicated/<instance id>/<port>/<path>` on the gateway, relayed to the
// serving backend (vLLM, SGLang) running on the instance. `/instances/<instance id>/<path>` is
// the same with the instance's main routed port (browsers without a key are redirected to the
// instance proxy when its URL is configured).
//
// Admission, in order: a key (401) -> the key's account owns the instance, the instance serves
// a model API (vllm / sglang) and <port> is its routed port (else 403, the same answer whatever
// did not match, so nothing is learnt about other accounts' instances) -> not /v1/messages
// (404) -> the instance is ready (503 with Retry-After while it starts). After admission the
// backend's response is relayed verbatim. No model gates: credits pay for the instance.
import { declaredLength, readBody, sendJson, track, type Res } from '../../lib/http.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { AUTH_MISSING } from '../auth/keys.js';
import { NO_MODEL } from '../metrics.js';
import { forward, forwardedHeaders, InstancePools, ResponseRelay, type PoolOptions } from '../../lib/relay/forward.js';
import { mainEndpoint, type InstanceRoutes } from '../../lib/instance-routes.js';

export const DEDICATED_PREFIX = '/dedicated/';
export const INSTANCE_PREFIX = '/instances/';
export const DEDICATED_ROUTE = 'dedicated';
/** Instance types whose routed port is a model API reachable with a key. */
export const SERVING_TYPES: ReadonlySet<string> = new Set(['vllm', 'sglang']);

export const NO_ACCESS = 'You do not have access to this instance';
export const STARTING = 'Instance is still starting; retry after the Retry-After delay';
export const MESSAGES_NOT_SERVED = 'Not Found: /v1/messages is not served on a dedicated endpoint (no protocol translation); use /v1/chat/completions';

/** The platform key and its twin never reach the instance. */
const DROP_HEADERS: ReadonlySet<string> = new Set(['authorization', 'x-api-key']);

export interface DedicatedOptions {
  routes: InstanceRoutes;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  startingRetryAfterSec?: number;
  /** Largest request body (413 beyond); default: the gateway's limit. */
  maxBodyBytes?: number;
  pool?: Partial<PoolOptions>;
  /** Public URL of the instance proxy: browsers (no key) on `<gateway>/instances/...` are redirected there. */
  proxyUrl?: string;
}

export interface DedicatedEndpoints {
  plugin: RoutePlugin;
  /** Closes the connection pools to instances. */
  close(): Promise<void>;
}

export interface DedicatedTarget {
  instanceId: string;
  /** Routed port; undefined: the instance's main port. */
  port: number | undefined;
  /** Path on the backend (without query). */
  path: string;
}

/** A parsed `/dedicated/<id>/<port>/<path>` URL, or undefined when it is not one. */
export function parseDedicatedUrl(url: string): DedicatedTarget | undefined {
  if (!url.startsWith(DEDICATED_PREFIX)) return undefined;
  const idEnd = url.indexOf('/', DEDICATED_PREFIX.length);
  if (idEnd < 0) return undefined;
  const portEnd = url.indexOf('/', idEnd + 1);
  const portText = url.slice(idEnd + 1, portEnd < 0 ? undefined : portEnd);
  if (!/^[1-9][0-9]{0,4}$/.test(portText)) return undefined;
  const port = Number(portText);
  if (port > 65535) return undefined;
  const instanceId = url.slice(DEDICATED_PREFIX.length, idEnd);
  if (instanceId === '') return undefined;
  return { instanceId, port, path: portEnd < 0 ? '/' : url.slice(portEnd) };
}

/** A parsed `/instances/<id>/<path>` URL (the main port), or undefined when it is not one. */
export function parseInstanceUrl(url: string): DedicatedTarget | undefined {
  if (!url.startsWith(INSTANCE_PREFIX)) return undefined;
  const idEnd = url.indexOf('/', INSTANCE_PREFIX.length);
  const instanceId = url.slice(INSTANCE_PREFIX.length, idEnd < 0 ? undefined : idEnd);
  if (instanceId === '') return undefined;
  return { instanceId, port: undefined, path: idEnd < 0 ? '/' : url.slice(idEnd) };
}

/** /v1/messages and its sub-paths (count_tokens), with or without the /api prefix. */
export function isMessagesPath(path: string): boolean {
  const p = path.startsWith('/api/') ? path.slice(4) : path;
  return p === '/v1/messages' || p.startsWith('/v1/messages/') || p === '/v1/messages/';
}

export function createDedicatedEndpoints(options: DedicatedOptions): DedicatedEndpoints {
  const routes = options.routes;
  const retryAfter = String(options.startingRetryAfterSec ?? 10);
  let pools: InstancePools | undefined;

  const plugin: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
    const up = ctx.upstreams.opts;
    pools = new InstancePools({
      connectTimeoutMs: up.connectTimeoutMs,
      headersTimeoutMs: up.headersTimeoutMs,
      idleTimeoutMs: up.idleTimeoutMs,
      ...options.pool,
    });
    const maxBody = options.maxBodyBytes ?? ctx.limits.maxBodyBytes;
    const p = pools;
    const answer = (res: Res, status: number, detail: string, headers?: Record<string, string>) => {
      ctx.metrics.request(DEDICATED_ROUTE, NO_MODEL, status);
      sendJson(res, status, { detail }, headers);
    };

    /** Admission then relay; `target` undefined: a malformed URL (403 after the key check). */
    const handle = (res: Res, req: HttpRequest, target: DedicatedTarget | undefined): void => {
      const auth = ctx.authenticate(req.getHeader('authorization'), req.getHeader('x-api-key'));
      if (typeof auth !== 'number') {
        answer(res, 401, auth === AUTH_MISSING ? 'Unauthorized: No API key provided.' : 'Invalid bearer token');
        return;
      }
      const route = target && routes.get(target.instanceId);
      const port = target && route ? (target.port ?? mainEndpoint(route)?.port) : undefined;
      const address = route && port !== undefined && route.accountId === auth && SERVING_TYPES.has(route.instanceType) ? route.ports.get(port) : undefined;
      if (!target || !route || address === undefined || (route.status !== 'ready' && route.status !== 'pending')) {
        answer(res, 403, NO_ACCESS);
        return;
      }
      if (isMessagesPath(target.path)) {
        answer(res, 404, MESSAGES_NOT_SERVED);
        return;
      }
      if (route.status !== 'ready' || address === '') {
        answer(res, 503, STARTING, { 'retry-after': retryAfter });
        return;
      }
      routes.recordActivity(target.instanceId);
      const method = req.getCaseSensitiveMethod().toUpperCase();
      const query = req.getQuery();
      const path = query ? `${target.path}?${query}` : target.path;
      const headers = forwardedHeaders(req, DROP_HEADERS);
      const relay = new ResponseRelay(res, method, (status) => ctx.metrics.request(DEDICATED_ROUTE, NO_MODEL, status));
      const length = declaredLength(req);
      const chunked = req.getHeader('transfer-encoding') !== '';
      if ((length === '' || length === '0') && !chunked) {
        forward(p, address, { method, path, headers, body: undefined }, relay);
        return;
      }
      readBody(
        res,
        length,
        maxBody,
        (body) => {
          if (!relay.finished) forward(p, address, { method, path, headers, body }, relay);
        },
        (err) => relay.fail(err.status, err.message),
      );
    };

    app.any('/dedicated/*', (uwsRes: HttpResponse, req: HttpRequest) => {
      handle(track(uwsRes), req, parseDedicatedUrl(req.getUrl()));
    });

    // The instance's base URL on the gateway: with a key, the dedicated endpoint on the main
    // routed port (`<gateway>/instances/<id>/v1` works as an OpenAI base URL); without one, a
    // browser: sent to the instance proxy (which needs a session), when its URL is configured.
    app.any('/instances/*', (uwsRes: HttpResponse, req: HttpRequest) => {
      const res = track(uwsRes);
      if (options.proxyUrl && req.getHeader('authorization') === '' && req.getHeader('x-api-key') === '') {
        const query = req.getQuery();
        answer(res, 307, 'Open this instance through the instance proxy', {
          location: `${options.proxyUrl.replace(/\/+$/, '')}${req.getUrl()}${query ? `?${query}` : ''}`,
        });
        return;
      }
      handle(res, req, parseInstanceUrl(req.getUrl()));
    });
  };

  return {
    plugin,
    async close() {
      await pools?.close();
    },
  };
}
