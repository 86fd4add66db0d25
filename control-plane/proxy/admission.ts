// Who the instance proxy lets through to which app (proxy.ts): it reads a request's host, cookie,
// credentials and Fetch Metadata and answers with the app to forward to, or the reply to send
// instead (a failure of the error table, the old path form's redirect, the hand-over's cookie).
// Everything is read from `req` synchronously (uWS invalidates it after the handler returns).
import { isPlatformKey } from '../../lib/instance-credentials.js';
import { instanceIdOfHost, instanceOrigin, isInstanceLabel } from '../../lib/instance-origin.js';
import { singleCookie } from '../../lib/session-cookie.js';
import type { HttpRequest } from '../../lib/uws.js';
import { mainEndpoint, type InstanceRoutes } from '../../lib/instance-routes.js';
import type { Detail } from '../api-error.js';
import { API_ERRORS } from '../errors.js';
import type { Store } from '../store.js';
import type { AppCookieSeals } from './app-cookies.js';
import { PROXY_COOKIE, type ProxyCookies, type ProxyTickets, SECURE_PROXY_COOKIE, sessionAccount } from './handover.js';

/** The old path form `<proxy>/instances/<id>/<path>`, redirected to the instance's origin. */
export const PROXY_PREFIX = '/instances/';

/** Where an admitted request goes. */
export interface Target {
  instanceId: string;
  /** The instance's owner, whose session this is (the proxy's per-account bounds: limits.ts). */
  accountId: number;
  address: string;
  /** The request's path, with its query. */
  path: string;
  /** The Cookie header the app gets ('' for none): its own cookies only (app-cookies.ts). */
  cookie: string;
}

/** A reply the proxy sends itself (an ApiError of the table fits): `{ detail }` with this status and headers. */
export interface ProxyReply {
  status: number;
  detail: Detail;
  headers?: Record<string, string> | undefined;
}

export interface AdmissionOptions {
  store: Store;
  routes: InstanceRoutes;
  tickets: ProxyTickets;
  cookies: ProxyCookies;
  /** Seals of the apps' own cookies (app-cookies.ts). */
  seals: AppCookieSeals;
  /** The proxy's public base URL (`RC_PROXY_PUBLIC_URL`), when set. */
  publicUrl: string | undefined;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  startingRetryAfterSec: number;
}

export class ProxyAdmission {
  /** Instance ids are prefixed to this host name. */
  private readonly baseHostname: string;
  /** Behind TLS (an https public URL): the cookie is __Host-rc_proxy, and Secure. */
  readonly secure: boolean;
  private readonly cookieName: string;

  constructor(private readonly o: AdmissionOptions) {
    const publicBase = o.publicUrl ? new URL(o.publicUrl) : undefined;
    this.baseHostname = publicBase?.hostname ?? 'localhost';
    this.secure = publicBase?.protocol === 'https:';
    this.cookieName = this.secure ? SECURE_PROXY_COOKIE : PROXY_COOKIE;
  }

  /** The instance whose origin `req` came to, or undefined (a host that names none). */
  instanceOf(req: HttpRequest): string | undefined {
    return instanceIdOfHost(req.getHeader('host'), this.baseHostname);
  }

  /**
   * Who may go where. Everything it needs from `req` is read before its first await (uWS's
   * request is gone once the handler returns).
   */
  async admit(req: HttpRequest, method: string): Promise<Target | ProxyReply> {
    const url = req.getUrl();
    const instanceId = this.instanceOf(req);
    if (instanceId === undefined) return this.oldForm(req, url);
    // Fetch Metadata: a sibling instance's app is same-site; only navigations may come from elsewhere.
    const site = req.getHeader('sec-fetch-site');
    if ((site === 'cross-site' || site === 'same-site') && !(req.getHeader('sec-fetch-mode') === 'navigate' && (method === 'GET' || method === 'HEAD')))
      return API_ERRORS.proxyCrossSite();
    const hash = this.sessionHash(req, instanceId);
    const query = req.getQuery();
    const cookieHeader = req.getHeader('cookie');
    if (typeof hash !== 'string') return hash;
    const session = await sessionAccount(this.o.store, hash);
    if (!session) return API_ERRORS.proxySignInRequired();
    const route = this.o.routes.get(instanceId);
    if (!route || isEnded(route.status)) return API_ERRORS.instanceNotRunning();
    if (route.accountId !== session.accountId) return API_ERRORS.instanceNoAccess();
    const endpoint = mainEndpoint(route);
    if (!endpoint) return API_ERRORS.instanceWithoutApp();
    if (route.status !== 'ready' || endpoint.address === '') return API_ERRORS.instanceStarting(this.o.startingRetryAfterSec);
    const cookie = this.o.seals.forwardable(instanceId, cookieHeader, this.secure);
    return { instanceId, accountId: route.accountId, address: endpoint.address, path: query ? `${url}?${query}` : url, cookie };
  }

  /** `GET /_rc/auth?ticket=T` on an instance's origin: the hand-over's second half (handover.ts) sets the proxy's cookie. */
  async redeem(req: HttpRequest, instanceId: string): Promise<ProxyReply> {
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return API_ERRORS.instanceNoAccess();
    const ticket = new URLSearchParams(req.getQuery() ?? '').get('ticket') ?? '';
    const grant = ticket === '' ? undefined : await this.o.tickets.redeem(ticket);
    if (!grant || grant.instanceId !== instanceId) return API_ERRORS.proxyTicketInvalid();
    const session = await sessionAccount(this.o.store, grant.sessionHash);
    if (!session) return API_ERRORS.proxySignInRequired();
    const route = this.o.routes.get(instanceId);
    if (!route || isEnded(route.status)) return API_ERRORS.instanceNotRunning();
    if (route.accountId !== session.accountId) return API_ERRORS.instanceNoAccess();
    const maxAge = Math.max(1, Math.floor((session.expiresAt - this.o.store.clock.now()) / 1000));
    return {
      status: 302,
      detail: 'Signed in to the instance',
      headers: {
        location: '/',
        'set-cookie': this.o.cookies.setCookie(instanceId, grant.sessionHash, this.secure, maxAge),
        'cache-control': 'no-store',
        'referrer-policy': 'no-referrer',
      },
    };
  }

  /** Where a request on a host that names no instance goes: the old path form redirects to the instance's origin. */
  private oldForm(req: HttpRequest, url: string): ProxyReply {
    if (!url.startsWith(PROXY_PREFIX)) return API_ERRORS.notFound();
    const slash = url.indexOf('/', PROXY_PREFIX.length);
    const instanceId = url.slice(PROXY_PREFIX.length, slash < 0 ? undefined : slash);
    if (!isInstanceLabel(instanceId)) return API_ERRORS.instanceNotRunning();
    const host = req.getHeader('host');
    const port = /:(\d+)$/.exec(host)?.[1];
    const base = this.o.publicUrl || `http://localhost${port ? `:${port}` : ''}`;
    const q = req.getQuery();
    const rest = slash < 0 ? '/' : url.slice(slash);
    return {
      status: 308,
      detail: "Moved to the instance's own origin",
      headers: { location: `${instanceOrigin(base, instanceId)}${rest}${q ? `?${q}` : ''}` },
    };
  }

  /** The session hash the proxy cookie on `instanceId`'s origin names, or a refusal (the session itself is looked up by admit). */
  private sessionHash(req: HttpRequest, instanceId: string): string | ProxyReply {
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return API_ERRORS.instanceNoAccess();
    const value = singleCookie(req.getHeader('cookie'), this.cookieName);
    // None, or two (one set by a sibling's script): no access.
    if (typeof value !== 'string') return API_ERRORS.proxySignInRequired();
    return this.o.cookies.sessionHashOf(instanceId, value) ?? API_ERRORS.proxySignInRequired();
  }
}

/** The proxy serves no instance that is ending or ended. */
const isEnded = (status: string) => status === 'stopping' || status === 'stopped' || status === 'failed';
