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
// - Of the browser's other cookies the app gets only its own (app-cookies.ts): those its server set
//   through the proxy, with their values (a seal cookie beside each), and `__Host-` ones; a cookie
//   another page tossed with `Domain=` is never forwarded.
// - Apps of other instances are same-site with this one (sibling host names): requests another
//   site or a sibling started are refused unless they are top-level navigations (Fetch Metadata),
//   so an app cannot make its owner's browser post to another instance's app with its cookie.
// - The old path form `<proxy>/instances/<id>/<path>` redirects (308) to the instance's origin.
// - Traffic (requests and WebSocket messages) counts as activity (throttled by the routes).
// - Per instance, account and client address: requests in flight (WebSockets included) and bytes
//   of request bodies still arriving are bounded (limits.ts; 429, or a WebSocket closed with 1013).
//
// admission.ts decides who goes where, websocket.ts relays WebSockets, handover.ts holds the
// tickets and the proxy's cookie; this module wires them on a uWS app and forwards HTTP.
import type WebSocket from 'ws';
import { declaredLength, listen, readBody, sendJson, track, type BodyWatch, type Res, type Server } from '../../lib/http.js';
import { createLogger, type Logger } from '../../lib/log.js';
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp } from '../../lib/uws.js';
import type { Store } from '../store.js';
import { forward, forwardedHeaders, InstancePools, ResponseRelay, type PoolOptions } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { API_ERRORS } from '../errors.js';
import { clientAddress } from '../../lib/client-address.js';
import { ProxyAdmission, type ProxyReply, type Target } from './admission.js';
import { AppCookieSeals } from './app-cookies.js';
import { AUTH_PATH, ProxyCookies, type ProxyTickets } from './handover.js';
import { headerNameIs } from '../../lib/relay/response-writer.js';
import { proxyWebSocket, type WsData } from './websocket.js';
import { createProxyLimits, type ProxyLimits, type ProxyLimitSettings } from './limits.js';
import type { Upload, UploadRefusal } from '../../lib/upload-limits.js';

/** The browser's Cookie header is replaced by the app's own cookies (Target.cookie, app-cookies.ts). */
const DROP_HEADERS: ReadonlySet<string> = new Set(['cookie']);
const SET_COOKIE = Buffer.from('set-cookie');

/** A ResponseRelay that adds the seal of every cookie the app sets (app-cookies.ts). */
class SealingRelay extends ResponseRelay {
  constructor(
    res: Res,
    method: string,
    private readonly seal: (setCookie: string) => string | undefined,
    onEnded: (status: number) => void,
  ) {
    super(res, method, onEnded);
  }

  override head(status: number, headers: readonly (string | Buffer)[]): void {
    let seals: string[] | undefined;
    for (let i = 0; i + 1 < headers.length; i += 2) {
      if (!headerNameIs(headers[i]!, SET_COOKIE)) continue;
      const seal = this.seal(headers[i + 1]!.toString());
      if (seal !== undefined) (seals ??= []).push('set-cookie', seal);
    }
    super.head(status, seals ? [...headers, ...seals] : headers);
  }
}

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
  /** Seals of the apps' own cookies (default: a key of this process). */
  seals?: AppCookieSeals;
  logger?: Logger;
  /** Largest request body (413 beyond); default 32 MiB. */
  maxBodyBytes?: number;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  startingRetryAfterSec?: number;
  /** Largest WebSocket message; default 16 MiB. */
  maxWsMessageBytes?: number;
  pool?: Partial<PoolOptions>;
  /** Per-tenant bounds (RC_PROXY_INFLIGHT_*, RC_PROXY_UPLOAD_BYTES_*); the defaults for what is left out. */
  limits?: Partial<ProxyLimitSettings>;
  /**
   * Behind a reverse proxy (RC_TRUST_PROXY, as the platform API): a client's address for the
   * per-address bounds is the last X-Forwarded-For entry, else every browser would share one.
   */
  trustProxy?: boolean;
}

export interface InstanceProxy {
  /** Registers every path (HTTP and WebSocket) on a uWS app of its own. */
  register(app: TemplatedApp): void;
  /** The proxy's cookies (tests mint one to skip the hand-over). */
  readonly cookies: ProxyCookies;
  /** Instance addresses with a connection pool (dropped when the instance goes: routes.onGone). */
  readonly pools: number;
  /** What is held per instance, account and address (tests: back to nothing when requests end). */
  readonly limits: ProxyLimits;
  close(): Promise<void>;
}

/** Sends a reply the proxy makes itself, `{ detail }`. */
function answer(res: Res, reply: ProxyReply): void {
  sendJson(res, reply.status, { detail: reply.detail }, reply.headers);
}

export function createInstanceProxy(options: InstanceProxyOptions): InstanceProxy {
  const logger = (options.logger ?? createLogger()).child({ part: 'instance-proxy' });
  const pools = new InstancePools(options.pool);
  // An ended instance's pool is closed (its requests in flight finish), not kept for good.
  const unfollow = options.routes.onGone?.((_id, addresses) => {
    for (const a of addresses) pools.drop(a);
  });
  const upstreams = new Set<WebSocket>();
  const cookies = options.cookies ?? new ProxyCookies(options.store.sealKey);
  const seals = options.seals ?? new AppCookieSeals();
  const admission = new ProxyAdmission({
    store: options.store,
    routes: options.routes,
    tickets: options.tickets,
    cookies,
    seals,
    publicUrl: options.publicUrl,
    startingRetryAfterSec: options.startingRetryAfterSec ?? 10,
  });
  const limits = createProxyLimits(options.limits);
  const trustProxy = options.trustProxy === true;
  const http = proxyHttp({ admission, seals, pools, routes: options.routes, maxBody: options.maxBodyBytes ?? 32 * 1024 * 1024, logger, limits, trustProxy });
  const maxWsMessageBytes = options.maxWsMessageBytes ?? 16 * 1024 * 1024;
  return {
    cookies,
    limits,
    register(app) {
      app.ws<WsData>(
        '/*',
        proxyWebSocket({ admission, routes: options.routes, logger, maxMessageBytes: maxWsMessageBytes, upstreams, inflight: limits.inflight, trustProxy }),
      );
      app.any('/*', http);
    },
    get pools() {
      return pools.size;
    },
    async close() {
      unfollow?.();
      for (const u of upstreams) u.terminate();
      await pools.close();
    },
  };
}

interface ProxyHttpOptions {
  admission: ProxyAdmission;
  seals: AppCookieSeals;
  pools: InstancePools;
  routes: InstanceRoutes;
  maxBody: number;
  logger: Logger;
  limits: ProxyLimits;
  trustProxy: boolean;
}

/** The HTTP handler: the hand-over's redemption on AUTH_PATH, else an admitted request forwarded to the app. */
function proxyHttp(o: ProxyHttpOptions) {
  const { admission, logger } = o;
  const wrongMethod = API_ERRORS.methodNotAllowed('GET');
  const failed = (res: Res) => (err: unknown) => {
    logger.error('instance proxy failed', { err });
    answer(res, API_ERRORS.internal());
  };
  return (uwsRes: HttpResponse, req: HttpRequest): void => {
    const res = track(uwsRes);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    if (req.getUrl() === AUTH_PATH) {
      const instanceId = admission.instanceOf(req);
      if (instanceId !== undefined) {
        if (method !== 'GET') return answer(res, wrongMethod);
        admission.redeem(req, instanceId).then((reply) => answer(res, reply), failed(res));
        return;
      }
    }
    // Everything from req is read now (admit reads its part before its first await); the body is
    // read while the session is looked up (uWS delivers it to a handler attached now or never).
    const admitted = admission.admit(req, method);
    const headers = forwardedHeaders(req, DROP_HEADERS);
    const client = clientAddress(res, req, o.trustProxy);
    const body = readProxiedBody(o, res, req, client);
    admitted.then((target) => {
      if (!('address' in target) || res.aborted) {
        // Refused (or gone): the rest of a body still arriving is not read (nor counted), the connection closes.
        if (body.pending()) res.closeAfter = true;
        body.abandon();
        return 'address' in target ? undefined : answer(res, target);
      }
      forwardAdmitted(o, res, method, target, headers, body, client);
    }, failed(res));
  };
}

/** A request body as the proxy reads it: the bytes, and the upload they count as while they arrive. */
interface ProxiedBody {
  bytes: Promise<Buffer | undefined>;
  /** A refusal of the upload limits while the body arrived (the body is then never whole). */
  refused(): { message: string; retryAfterSec: number } | undefined;
  /** Whether some of the body may still arrive (a refusal answered now closes the connection, its rest unread). */
  pending(): boolean;
  /** Admission named the body's owner: what it holds, and what arrives from now on, counts against them too. */
  claim(accountId: number, instanceId: string): UploadRefusal | undefined;
  /** The request was refused or its client went: what the body holds is free, and the rest is not read. */
  abandon(): void;
}

/** Starts reading the request's body (now: uWS gives it to a handler attached now or never), counting it per address. */
function readProxiedBody(o: ProxyHttpOptions, res: Res, req: HttpRequest, client: string): ProxiedBody {
  const length = declaredLength(req);
  if ((length === '' || length === '0') && req.getHeader('transfer-encoding') === '')
    return { bytes: Promise.resolve(undefined), refused: () => undefined, pending: () => false, claim: () => undefined, abandon: () => {} };
  let upload: Upload | undefined;
  let owner: { accountId: number; instanceId: string } | undefined;
  let refusal: { message: string; retryAfterSec: number } | undefined;
  let stop: ((err: unknown) => void) | undefined;
  let abandoned = false;
  const watch: BodyWatch = (bytes, last) => {
    if (abandoned) return false;
    if (upload === undefined) {
      if (last) return true; // whole in one read: never in flight
      upload = o.limits.uploads.start(client, owner?.accountId, owner?.instanceId);
    }
    refusal = upload.received(bytes, last);
    if (refusal === undefined) return true;
    res.closeAfter = true; // the rest of the body is never read
    stop?.(refusal);
    return false;
  };
  const bytes = new Promise<Buffer>((resolve, reject) => {
    stop = reject;
    readBody(res, length, o.maxBody, resolve, reject, watch);
  });
  let settled = false;
  bytes.then(
    () => (settled = true),
    () => (settled = true), // a refused request's body is not awaited
  );
  return {
    bytes,
    refused: () => refusal,
    pending: () => !settled,
    claim(accountId, instanceId) {
      owner = { accountId, instanceId };
      return upload?.claim(accountId, instanceId);
    },
    abandon() {
      abandoned = true;
      upload?.release();
    },
  };
}

/**
 * An admitted request: a place among the requests in flight of its instance, account and address,
 * its body's bytes charged to them, then forwarded; what it holds is given back when its response
 * ends, however it ends.
 */
function forwardAdmitted(o: ProxyHttpOptions, res: Res, method: string, target: Target, headers: string[], body: ProxiedBody, client: string): void {
  const { instanceId, accountId } = target;
  const held = o.limits.inflight.take(accountId, client, instanceId);
  if (held) {
    if (body.pending()) res.closeAfter = true;
    body.abandon();
    return answer(res, API_ERRORS.proxyLimit(held.message, held.retryAfterSec));
  }
  o.routes.recordActivity(instanceId);
  if (target.cookie !== '') headers.push('cookie', target.cookie);
  const relay = new SealingRelay(
    res,
    method,
    (setCookie) => o.seals.sealFor(instanceId, setCookie, o.admission.secure),
    () => {
      o.limits.inflight.give(accountId, client, instanceId);
      body.abandon();
    },
  );
  const claimed = body.claim(accountId, instanceId);
  const refused = claimed ?? body.refused();
  if (refused) {
    res.closeAfter = true;
    return relay.fail(429, refused.message, { 'retry-after': String(refused.retryAfterSec) });
  }
  body.bytes.then(
    (bytes) => {
      if (!relay.finished) forward(o.pools, target.address, { method, path: target.path, headers, body: bytes }, relay);
    },
    (err: unknown) => {
      const e = body.refused() ?? (err as { status: number; message: string });
      if ('retryAfterSec' in e) return relay.fail(429, e.message, { 'retry-after': String(e.retryAfterSec) });
      relay.fail(e.status, e.message);
    },
  );
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
