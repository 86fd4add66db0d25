// The instance proxy: browser access to an instance's app (notebook UI, gradio, streamlit,
// comfyui) at `/instances/<instance id>/<path>`, HTTP and WebSocket.
//
// - Only a browser session of the instance's owner gets through. A platform key
//   (`Authorization: Bearer rc-...` or `x-api-key: rc-...`) gets 403 `You do not have access to
//   this instance`, as does a session of another account. Other Authorization schemes (for
//   example Jupyter's `token ...`) belong to the app and pass through.
// - The app sees `/<path>` with `X-Forwarded-Prefix: /instances/<instance id>`; the platform's
//   cookies, CSRF header and keys are removed (forwardedHeaders, lib/instance-credentials.ts), so
//   the app never holds a platform credential, and its Set-Cookie for a platform cookie is dropped.
// - Cookie-authenticated writes rely on the session cookie's SameSite=Lax: a cross-site page
//   cannot make the browser send it with a POST.
// - Traffic (requests and WebSocket messages) counts as activity (throttled by the routes).
import type { us_socket_context_t } from 'uWebSockets.js';
import WebSocket, { type RawData } from 'ws';
import { declaredLength, listen, readBody, sendJson, track, type Server } from '../../lib/http.js';
import { createLogger, type Logger } from '../../lib/log.js';
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp, type WebSocket as UwsWebSocket } from '../../lib/uws.js';
import { isPlatformKey } from '../../lib/instance-credentials.js';
import { sessionCookieToken } from '../../lib/session-cookie.js';
import type { Store } from '../store.js';
import { forward, forwardedHeaders, InstancePools, ResponseRelay, type PoolOptions } from '../../gateway/dedicated/forward.js';
import { mainEndpoint, type InstanceRoutes } from '../../gateway/dedicated/instance-routes.js';

export const PROXY_PREFIX = '/instances/';
export const NO_ACCESS = 'You do not have access to this instance';
export const SIGN_IN_REQUIRED = 'A browser session is required to open an instance; sign in first';
export const NOT_FOUND = 'Instance not found or not running';
export const STARTING = 'Instance is still starting; retry after the Retry-After delay';

const DROP_HEADERS: ReadonlySet<string> = new Set();
const WS_DROP_HEADERS: ReadonlySet<string> = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-extensions', 'sec-websocket-protocol']);

export interface InstanceProxyOptions {
  /** Sessions and accounts (the control plane's store). */
  store: Store;
  routes: InstanceRoutes;
  logger?: Logger;
  /** Largest request body (413 beyond); default 32 MiB. */
  maxBodyBytes?: number;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  startingRetryAfterSec?: number;
  /** Largest WebSocket message; default 16 MiB. */
  maxWsMessageBytes?: number;
  pool?: Partial<PoolOptions>;
}

export interface InstanceProxy {
  /** Registers `/instances/*` (HTTP and WebSocket) on a uWS app. */
  register(app: TemplatedApp): void;
  close(): Promise<void>;
}

interface Target {
  instanceId: string;
  address: string;
  /** Path below the prefix, with its query. */
  path: string;
  prefix: string;
}

interface Refusal {
  status: number;
  detail: string;
  headers?: Record<string, string>;
}

interface WsData {
  upstream: WebSocket;
  instanceId: string;
  closed: boolean;
}

export function createInstanceProxy(options: InstanceProxyOptions): InstanceProxy {
  const { store, routes } = options;
  const logger = (options.logger ?? createLogger()).child({ part: 'instance-proxy' });
  const pools = new InstancePools(options.pool);
  const maxBody = options.maxBodyBytes ?? 32 * 1024 * 1024;
  const retryAfter = String(options.startingRetryAfterSec ?? 10);
  const upstreams = new Set<WebSocket>();

  /** Who may go where; reads everything it needs from `req` synchronously. */
  function admit(req: HttpRequest): Target | Refusal {
    const url = req.getUrl();
    const slash = url.indexOf('/', PROXY_PREFIX.length);
    const instanceId = url.slice(PROXY_PREFIX.length, slash < 0 ? undefined : slash);
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return { status: 403, detail: NO_ACCESS };
    const cookieHeader = req.getHeader('cookie');
    const token = sessionCookieToken(cookieHeader, false);
    const session = typeof token === 'string' ? store.sessions.lookup(token) : undefined;
    const account = session && store.accounts.byId(session.accountId);
    if (!account) return { status: 401, detail: SIGN_IN_REQUIRED };
    const route = instanceId ? routes.get(instanceId) : undefined;
    if (!route || route.status === 'stopping' || route.status === 'stopped' || route.status === 'failed') return { status: 404, detail: NOT_FOUND };
    if (route.accountId !== account.id) return { status: 403, detail: NO_ACCESS };
    if (slash < 0) {
      const q = req.getQuery();
      return { status: 308, detail: 'Moved', headers: { location: `${url}/${q ? `?${q}` : ''}` } };
    }
    const endpoint = mainEndpoint(route);
    if (!endpoint) return { status: 404, detail: 'This instance has no app port' };
    if (route.status !== 'ready' || endpoint.address === '') return { status: 503, detail: STARTING, headers: { 'retry-after': retryAfter } };
    const query = req.getQuery();
    const rest = url.slice(slash);
    return {
      instanceId,
      address: endpoint.address,
      path: query ? `${rest}?${query}` : rest,
      prefix: url.slice(0, slash),
    };
  }

  function httpHandler(uwsRes: HttpResponse, req: HttpRequest): void {
    const res = track(uwsRes);
    const target = admit(req);
    if (!('address' in target)) {
      sendJson(res, target.status, { detail: target.detail }, target.headers);
      return;
    }
    routes.recordActivity(target.instanceId);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    const headers = forwardedHeaders(req, DROP_HEADERS);
    headers.push('x-forwarded-prefix', target.prefix);
    const relay = new ResponseRelay(res, method);
    const length = declaredLength(req);
    if ((length === '' || length === '0') && req.getHeader('transfer-encoding') === '') {
      forward(pools, target.address, { method, path: target.path, headers, body: undefined }, relay);
      return;
    }
    readBody(
      res,
      length,
      maxBody,
      (body) => {
        if (!relay.finished) forward(pools, target.address, { method, path: target.path, headers, body }, relay);
      },
      (err) => relay.fail(err.status, err.message),
    );
  }

  function upgrade(uwsRes: HttpResponse, req: HttpRequest, context: us_socket_context_t): void {
    const res = track(uwsRes);
    const target = admit(req);
    if (!('address' in target)) {
      sendJson(res, target.status, { detail: target.detail }, target.headers);
      return;
    }
    const key = req.getHeader('sec-websocket-key');
    const protocols = req
      .getHeader('sec-websocket-protocol')
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean);
    const flat = forwardedHeaders(req, WS_DROP_HEADERS);
    const headers: Record<string, string> = { 'x-forwarded-prefix': target.prefix };
    for (let i = 0; i + 1 < flat.length; i += 2) headers[flat[i]!] = flat[i + 1]!;
    const upstream = new WebSocket(`ws://${target.address}${target.path}`, protocols, {
      headers,
      perMessageDeflate: false,
      handshakeTimeout: 10_000,
      maxPayload: options.maxWsMessageBytes ?? 16 * 1024 * 1024,
    });
    upstreams.add(upstream);
    upstream.once('close', () => upstreams.delete(upstream));
    res.onAbort = () => upstream.terminate();
    upstream.on('error', (err) => {
      logger.debug('instance websocket error', { instanceId: target.instanceId, err });
      sendJson(res, 502, { detail: 'The instance is unreachable' });
    });
    upstream.on('unexpected-response', (_r, response) => {
      response.resume();
      sendJson(res, response.statusCode ?? 502, { detail: `The instance refused the WebSocket (HTTP ${response.statusCode})` });
      upstream.terminate();
    });
    upstream.on('open', () => {
      if (res.aborted) {
        upstream.terminate();
        return;
      }
      res.aborted = true;
      res.onAbort = undefined;
      routes.recordActivity(target.instanceId);
      const data: WsData = { upstream, instanceId: target.instanceId, closed: false };
      res.cork(() => res.upgrade(data, key, upstream.protocol, '', context));
    });
  }

  const maxBackpressure = 1024 * 1024;

  return {
    register(app) {
      app.ws<WsData>('/instances/*', {
        maxPayloadLength: options.maxWsMessageBytes ?? 16 * 1024 * 1024,
        maxBackpressure: 64 * 1024 * 1024,
        idleTimeout: 120,
        sendPingsAutomatically: true,
        upgrade,
        open(ws: UwsWebSocket<WsData>) {
          const d = ws.getUserData();
          d.upstream.on('message', (msg: RawData, isBinary: boolean) => {
            if (d.closed) return;
            ws.send(msg as Buffer, isBinary);
            // A slow browser: stop reading the instance until uWS drains.
            if (ws.getBufferedAmount() > maxBackpressure) d.upstream.pause();
          });
          d.upstream.on('close', (code: number, reason: Buffer) => {
            if (d.closed) return;
            d.closed = true;
            ws.end(code >= 1000 && code < 5000 && code !== 1005 && code !== 1006 && code !== 1015 ? code : 1000, reason);
          });
        },
        message(ws, message, isBinary) {
          const d = ws.getUserData();
          routes.recordActivity(d.instanceId);
          if (d.upstream.readyState === WebSocket.OPEN) d.upstream.send(Buffer.from(message.slice(0)), { binary: isBinary });
        },
        drain(ws) {
          const d = ws.getUserData();
          if (d.upstream.isPaused && ws.getBufferedAmount() < maxBackpressure / 2) d.upstream.resume();
        },
        close(ws, code) {
          const d = ws.getUserData();
          if (d.closed) return;
          d.closed = true;
          try {
            d.upstream.close(code >= 1000 && code < 5000 && code !== 1005 && code !== 1006 && code !== 1015 ? code : 1000);
          } catch {
            d.upstream.terminate();
          }
        },
      });
      app.any('/instances/*', httpHandler);
    },
    async close() {
      for (const u of upstreams) u.terminate();
      await pools.close();
    },
  };
}

/** The proxy on its own listener (its own origin: the app's scripts cannot read the platform API). */
export async function startInstanceProxyServer(options: InstanceProxyOptions & { host?: string; port?: number }): Promise<Server & { proxy: InstanceProxy }> {
  const app = uws().App();
  const proxy = createInstanceProxy(options);
  proxy.register(app);
  app.any('/*', (res: HttpResponse) => sendJson(track(res), 404, { detail: 'Not Found' }));
  const server = await listen(app, options.host ?? '127.0.0.1', options.port ?? 0);
  return {
    ...server,
    host: server.host,
    port: server.port,
    url: server.url,
    proxy,
    async close(graceMs?: number) {
      await proxy.close();
      await server.close(graceMs);
    },
  };
}
