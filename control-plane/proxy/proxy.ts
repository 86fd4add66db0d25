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
//
// Where each part is: access.ts (who may go where; the ticket's redemption), http-relay.ts
// (requests), websocket-relay.ts (WebSockets), handover.ts (tickets and the proxy cookie).
import { listen, type Server } from '../../lib/http.js';
import { createLogger, type Logger } from '../../lib/log.js';
import { uws, type TemplatedApp } from '../../lib/uws.js';
import type { Store } from '../store.js';
import { InstancePools, type PoolOptions } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { ProxyAccess } from './access.js';
import { NO_ACCESS, NOT_FOUND, ProxyCookies, type ProxyTickets } from './handover.js';
import { HttpRelay } from './http-relay.js';
import { WebSocketRelay, type WsData } from './websocket-relay.js';

export { NO_ACCESS, NOT_FOUND };
export { CROSS_SITE, PROXY_PREFIX, SIGN_IN_REQUIRED, STARTING, TICKET_INVALID } from './access.js';

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

export function createInstanceProxy(options: InstanceProxyOptions): InstanceProxy {
  const { routes } = options;
  const logger = (options.logger ?? createLogger()).child({ part: 'instance-proxy' });
  const pools = new InstancePools(options.pool);
  const cookies = options.cookies ?? new ProxyCookies();
  const access = new ProxyAccess({
    store: options.store,
    routes,
    tickets: options.tickets,
    cookies,
    publicUrl: options.publicUrl,
    startingRetryAfterSec: options.startingRetryAfterSec ?? 10,
  });
  const http = new HttpRelay({ access, routes, pools, maxBodyBytes: options.maxBodyBytes ?? 32 * 1024 * 1024 });
  const websockets = new WebSocketRelay({ access, routes, maxMessageBytes: options.maxWsMessageBytes ?? 16 * 1024 * 1024, logger });
  return {
    cookies,
    register(app) {
      app.ws<WsData>('/*', websockets.behavior());
      app.any('/*', (res, req) => http.handle(res, req));
    },
    async close() {
      websockets.close();
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
