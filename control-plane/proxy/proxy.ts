// The instance proxy: browser access to an instance's app (notebook UI, gradio, streamlit,
// comfyui), HTTP and WebSocket, each app on an origin of its own: `<instance id>.<proxy host>`
// (lib/instance-origin.ts; `http://<id>.localhost:8081/` by default). The app is served at its
// origin's root and sees the request's own path.
//
// - Access comes from the proxy's own host-only cookie (`rc_proxy`, `__Host-rc_proxy` behind TLS),
//   set by `/_rc/auth?ticket=...` after the platform API's hand-over route (handover.ts). It names
//   the console session, so only the owner's live browser session gets through; no cookie, two of
//   them, a forged one or one made for another instance: 401; a session of another account: 403.
//   The console's own `rc_session` is never sent here (another host), and is not read.
// - A platform key (`Authorization: Bearer rc-...` or `x-api-key: rc-...`) gets 403 `You do not
//   have access to this instance` (SPEC). Other Authorization schemes (for example Jupyter's
//   `token ...`) belong to the app and pass through.
// - The platform's cookies (the proxy's own included), CSRF header and keys are removed
//   (forwardedHeaders, lib/instance-credentials.ts), so the app never holds a platform credential,
//   and its Set-Cookie for a platform cookie is dropped.
// - Apps of other instances are same-site with this one (sibling host names): requests another
//   site or a sibling started are refused unless they are top-level navigations (Fetch Metadata),
//   so an app cannot make its owner's browser post to another instance's app with its cookie.
// - The old path form `<proxy>/instances/<id>/<path>` redirects (308) to the instance's origin.
// - Traffic (requests and WebSocket messages) counts as activity (throttled by the routes).
import type { us_socket_context_t } from 'uWebSockets.js';
import WebSocket, { type RawData } from 'ws';
import { declaredLength, listen, readBody, sendJson, track, type Res, type Server } from '../../lib/http.js';
import { createLogger, type Logger } from '../../lib/log.js';
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp, type WebSocket as UwsWebSocket } from '../../lib/uws.js';
import { isPlatformKey } from '../../lib/instance-credentials.js';
import { instanceIdOfHost, instanceOrigin, isInstanceLabel } from '../../lib/instance-origin.js';
import { singleCookie } from '../../lib/session-cookie.js';
import type { Store } from '../store.js';
import { forward, forwardedHeaders, InstancePools, ResponseRelay, type PoolOptions } from '../../gateway/dedicated/forward.js';
import { mainEndpoint, type InstanceRoutes } from '../../gateway/dedicated/instance-routes.js';
import type { Detail } from '../api-error.js';
import { API_ERRORS } from '../errors.js';
import { AUTH_PATH, PROXY_COOKIE, ProxyCookies, ProxyTickets, SECURE_PROXY_COOKIE, sessionAccount } from './handover.js';

export const PROXY_PREFIX = '/instances/';

const DROP_HEADERS: ReadonlySet<string> = new Set();
const WS_DROP_HEADERS: ReadonlySet<string> = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-extensions', 'sec-websocket-protocol']);

export interface InstanceProxyOptions {
  /** Sessions and accounts (the control plane's store). */
  store: Store;
  routes: InstanceRoutes;
  /** The hand-over tickets the platform API mints (handover.ts); shared with its open route. */
  tickets: ProxyTickets;
  /** The proxy's public base URL (`RC_PROXY_PUBLIC_URL`); default `http://localhost:<the port a request came to>`. Its host name is what instance ids are prefixed to. */
  publicUrl?: string;
  /** MACs of the proxy cookie (default: a key of this process). */
  cookies?: ProxyCookies;
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
  /** Registers every path (HTTP and WebSocket) on a uWS app of its own. */
  register(app: TemplatedApp): void;
  /** The proxy's cookies (tests mint one to skip the hand-over). */
  readonly cookies: ProxyCookies;
  close(): Promise<void>;
}

interface Target {
  instanceId: string;
  address: string;
  /** The request's path, with its query. */
  path: string;
}

/** A reply the proxy sends itself (an ApiError of the table fits): `{ detail }` with this status and headers. */
interface Refusal {
  status: number;
  detail: Detail;
  headers?: Record<string, string> | undefined;
}

interface WsData {
  upstream: WebSocket;
  instanceId: string;
  closed: boolean;
}

/** Sends a reply the proxy makes itself, `{ detail }`. */
function answer(res: Res, reply: Refusal): void {
  sendJson(res, reply.status, { detail: reply.detail }, reply.headers);
}

export function createInstanceProxy(options: InstanceProxyOptions): InstanceProxy {
  const { store, routes } = options;
  const logger = (options.logger ?? createLogger()).child({ part: 'instance-proxy' });
  const pools = new InstancePools(options.pool);
  const maxBody = options.maxBodyBytes ?? 32 * 1024 * 1024;
  const retryAfterSec = options.startingRetryAfterSec ?? 10;
  const upstreams = new Set<WebSocket>();
  const { tickets } = options;
  const cookies = options.cookies ?? new ProxyCookies();
  const publicBase = options.publicUrl ? new URL(options.publicUrl) : undefined;
  // Instance ids are prefixed to this host name; behind TLS the cookie is __Host-rc_proxy.
  const baseHostname = publicBase?.hostname ?? 'localhost';
  const secure = publicBase?.protocol === 'https:';
  const cookieName = secure ? SECURE_PROXY_COOKIE : PROXY_COOKIE;

  /** Where a request on a host that names no instance goes: the old path form redirects to the instance's origin. */
  function oldForm(req: HttpRequest, url: string): Refusal {
    if (!url.startsWith(PROXY_PREFIX)) return API_ERRORS.notFound();
    const slash = url.indexOf('/', PROXY_PREFIX.length);
    const instanceId = url.slice(PROXY_PREFIX.length, slash < 0 ? undefined : slash);
    if (!isInstanceLabel(instanceId)) return API_ERRORS.instanceNotRunning();
    const host = req.getHeader('host');
    const port = /:(\d+)$/.exec(host)?.[1];
    const base = options.publicUrl || `http://localhost${port ? `:${port}` : ''}`;
    const q = req.getQuery();
    const rest = slash < 0 ? '/' : url.slice(slash);
    return {
      status: 308,
      detail: "Moved to the instance's own origin",
      headers: { location: `${instanceOrigin(base, instanceId)}${rest}${q ? `?${q}` : ''}` },
    };
  }

  /** The live session account of the proxy cookie on `instanceId`'s origin, or a refusal. */
  function holder(req: HttpRequest, instanceId: string): number | Refusal {
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return API_ERRORS.instanceNoAccess();
    const value = singleCookie(req.getHeader('cookie'), cookieName);
    // None, or two (one set by a sibling's script): no access.
    if (typeof value !== 'string') return API_ERRORS.proxySignInRequired();
    const hash = cookies.sessionHashOf(instanceId, value);
    const session = hash === undefined ? undefined : sessionAccount(store, hash);
    return session ? session.accountId : API_ERRORS.proxySignInRequired();
  }

  /** Who may go where; reads everything it needs from `req` synchronously. */
  function admit(req: HttpRequest, method: string): Target | Refusal {
    const url = req.getUrl();
    const instanceId = instanceIdOfHost(req.getHeader('host'), baseHostname);
    if (instanceId === undefined) return oldForm(req, url);
    // Fetch Metadata: a sibling instance's app is same-site; only navigations may come from elsewhere.
    const site = req.getHeader('sec-fetch-site');
    if ((site === 'cross-site' || site === 'same-site') && !(req.getHeader('sec-fetch-mode') === 'navigate' && (method === 'GET' || method === 'HEAD')))
      return API_ERRORS.proxyCrossSite();
    const accountId = holder(req, instanceId);
    if (typeof accountId !== 'number') return accountId;
    const route = routes.get(instanceId);
    if (!route || route.status === 'stopping' || route.status === 'stopped' || route.status === 'failed') return API_ERRORS.instanceNotRunning();
    if (route.accountId !== accountId) return API_ERRORS.instanceNoAccess();
    const endpoint = mainEndpoint(route);
    if (!endpoint) return API_ERRORS.instanceWithoutApp();
    if (route.status !== 'ready' || endpoint.address === '') return API_ERRORS.instanceStarting(retryAfterSec);
    const query = req.getQuery();
    return { instanceId, address: endpoint.address, path: query ? `${url}?${query}` : url };
  }

  /** `GET /_rc/auth?ticket=T` on an instance's origin: the hand-over's second half (handover.ts). */
  function redeem(res: Res, req: HttpRequest, instanceId: string): void {
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return answer(res, API_ERRORS.instanceNoAccess());
    const ticket = new URLSearchParams(req.getQuery() ?? '').get('ticket') ?? '';
    const grant = ticket === '' ? undefined : tickets.redeem(ticket);
    if (!grant || grant.instanceId !== instanceId) return answer(res, API_ERRORS.proxyTicketInvalid());
    const session = sessionAccount(store, grant.sessionHash);
    if (!session) return answer(res, API_ERRORS.proxySignInRequired());
    const route = routes.get(instanceId);
    if (!route || route.status === 'stopping' || route.status === 'stopped' || route.status === 'failed') return answer(res, API_ERRORS.instanceNotRunning());
    if (route.accountId !== session.accountId) return answer(res, API_ERRORS.instanceNoAccess());
    const maxAge = Math.max(1, Math.floor((session.expiresAt - store.clock.now()) / 1000));
    sendJson(
      res,
      302,
      { detail: 'Signed in to the instance' },
      {
        location: '/',
        'set-cookie': cookies.setCookie(instanceId, grant.sessionHash, secure, maxAge),
        'cache-control': 'no-store',
        'referrer-policy': 'no-referrer',
      },
    );
  }

  function httpHandler(uwsRes: HttpResponse, req: HttpRequest): void {
    const res = track(uwsRes);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    if (req.getUrl() === AUTH_PATH) {
      const instanceId = instanceIdOfHost(req.getHeader('host'), baseHostname);
      if (instanceId !== undefined) return method === 'GET' ? redeem(res, req, instanceId) : answer(res, API_ERRORS.methodNotAllowed('GET'));
    }
    const target = admit(req, method);
    if (!('address' in target)) {
      answer(res, target);
      return;
    }
    routes.recordActivity(target.instanceId);
    const headers = forwardedHeaders(req, DROP_HEADERS);
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
    const target = admit(req, 'GET');
    if (!('address' in target)) {
      answer(res, target);
      return;
    }
    const key = req.getHeader('sec-websocket-key');
    const protocols = req
      .getHeader('sec-websocket-protocol')
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean);
    const flat = forwardedHeaders(req, WS_DROP_HEADERS);
    const headers: Record<string, string> = {};
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
      answer(res, API_ERRORS.instanceUnreachable());
    });
    upstream.on('unexpected-response', (_r, response) => {
      response.resume();
      answer(res, API_ERRORS.instanceRefusedWebSocket(response.statusCode));
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
    cookies,
    register(app) {
      app.ws<WsData>('/*', {
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
      app.any('/*', httpHandler);
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
