// Who may reach which instance's app through the proxy, decided from the request alone: the
// instance its Host names, the proxy cookie (a live console session of the instance's owner),
// platform keys (refused), Fetch Metadata (only navigations from another site or a sibling
// instance), and the instance's state. Also the hand-over's second half, `/_rc/auth?ticket=`,
// which sets that cookie (handover.ts has the first half and the cookie's MAC).
import { sendJson, type Res } from '../../lib/http.js';
import type { HttpRequest } from '../../lib/uws.js';
import { isPlatformKey } from '../../lib/instance-credentials.js';
import { instanceIdOfHost, instanceOrigin, isInstanceLabel } from '../../lib/instance-origin.js';
import { singleCookie } from '../../lib/session-cookie.js';
import type { Store } from '../store.js';
import { mainEndpoint, type InstanceRoutes } from '../../lib/instance-routes.js';
import { NO_ACCESS, NOT_FOUND, PROXY_COOKIE, type ProxyCookies, type ProxyTickets, SECURE_PROXY_COOKIE, sessionAccount } from './handover.js';

export const PROXY_PREFIX = '/instances/';
export const SIGN_IN_REQUIRED = 'A browser session is required to open an instance: open it from the console';
export const TICKET_INVALID = 'This sign-in link is invalid, expired or used already: open the instance from the console again';
export const CROSS_SITE = 'Cross-site request refused: only navigations may come from another site';
export const STARTING = 'Instance is still starting; retry after the Retry-After delay';

/** Where an admitted request goes. */
export interface Target {
  instanceId: string;
  address: string;
  /** The request's path, with its query. */
  path: string;
}

/** The answer to a request that goes nowhere (a refusal, or the old path form's redirect). */
export interface Refusal {
  status: number;
  detail: string;
  headers?: Record<string, string>;
}

export interface ProxyAccessOptions {
  store: Store;
  routes: InstanceRoutes;
  tickets: ProxyTickets;
  cookies: ProxyCookies;
  /** The proxy's public base URL; undefined: `http://localhost:<the port a request came to>`. */
  publicUrl: string | undefined;
  /** Retry-After (seconds) of the 503 while an instance starts. */
  startingRetryAfterSec: number;
}

export class ProxyAccess {
  /** The host name instance ids are prefixed to. */
  private readonly baseHostname: string;
  /** Behind TLS: the cookie is __Host-rc_proxy, and Secure. */
  private readonly secure: boolean;
  private readonly cookieName: string;
  private readonly retryAfter: string;

  constructor(private readonly o: ProxyAccessOptions) {
    const publicBase = o.publicUrl ? new URL(o.publicUrl) : undefined;
    this.baseHostname = publicBase?.hostname ?? 'localhost';
    this.secure = publicBase?.protocol === 'https:';
    this.cookieName = this.secure ? SECURE_PROXY_COOKIE : PROXY_COOKIE;
    this.retryAfter = String(o.startingRetryAfterSec);
  }

  /** The instance whose origin the request came to, or undefined (the proxy's own host). */
  instanceOf(req: HttpRequest): string | undefined {
    return instanceIdOfHost(req.getHeader('host'), this.baseHostname);
  }

  /** Who may go where; reads everything it needs from `req` synchronously. */
  admit(req: HttpRequest, method: string): Target | Refusal {
    const url = req.getUrl();
    const instanceId = this.instanceOf(req);
    if (instanceId === undefined) return this.oldForm(req, url);
    // Fetch Metadata: a sibling instance's app is same-site; only navigations may come from elsewhere.
    const site = req.getHeader('sec-fetch-site');
    if ((site === 'cross-site' || site === 'same-site') && !(req.getHeader('sec-fetch-mode') === 'navigate' && (method === 'GET' || method === 'HEAD')))
      return { status: 403, detail: CROSS_SITE };
    const accountId = this.holder(req, instanceId);
    if (typeof accountId !== 'number') return accountId;
    const route = this.o.routes.get(instanceId);
    if (!route || route.status === 'stopping' || route.status === 'stopped' || route.status === 'failed') return { status: 404, detail: NOT_FOUND };
    if (route.accountId !== accountId) return { status: 403, detail: NO_ACCESS };
    const endpoint = mainEndpoint(route);
    if (!endpoint) return { status: 404, detail: 'This instance has no app port' };
    if (route.status !== 'ready' || endpoint.address === '') return { status: 503, detail: STARTING, headers: { 'retry-after': this.retryAfter } };
    const query = req.getQuery();
    return { instanceId, address: endpoint.address, path: query ? `${url}?${query}` : url };
  }

  /** `GET /_rc/auth?ticket=T` on an instance's origin: the hand-over's second half (handover.ts). */
  redeem(res: Res, req: HttpRequest, instanceId: string): void {
    const { store, routes, tickets, cookies } = this.o;
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return sendJson(res, 403, { detail: NO_ACCESS });
    const ticket = new URLSearchParams(req.getQuery() ?? '').get('ticket') ?? '';
    const grant = ticket === '' ? undefined : tickets.redeem(ticket);
    if (!grant || grant.instanceId !== instanceId) return sendJson(res, 401, { detail: TICKET_INVALID });
    const session = sessionAccount(store, grant.sessionHash);
    if (!session) return sendJson(res, 401, { detail: SIGN_IN_REQUIRED });
    const route = routes.get(instanceId);
    if (!route || route.status === 'stopping' || route.status === 'stopped' || route.status === 'failed') return sendJson(res, 404, { detail: NOT_FOUND });
    if (route.accountId !== session.accountId) return sendJson(res, 403, { detail: NO_ACCESS });
    const maxAge = Math.max(1, Math.floor((session.expiresAt - store.clock.now()) / 1000));
    sendJson(
      res,
      302,
      { detail: 'Signed in to the instance' },
      {
        location: '/',
        'set-cookie': cookies.setCookie(instanceId, grant.sessionHash, this.secure, maxAge),
        'cache-control': 'no-store',
        'referrer-policy': 'no-referrer',
      },
    );
  }

  /** Where a request on a host that names no instance goes: the old path form redirects to the instance's origin. */
  private oldForm(req: HttpRequest, url: string): Refusal {
    if (!url.startsWith(PROXY_PREFIX)) return { status: 404, detail: 'Not Found' };
    const slash = url.indexOf('/', PROXY_PREFIX.length);
    const instanceId = url.slice(PROXY_PREFIX.length, slash < 0 ? undefined : slash);
    if (!isInstanceLabel(instanceId)) return { status: 404, detail: NOT_FOUND };
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

  /** The live session account of the proxy cookie on `instanceId`'s origin, or a refusal. */
  private holder(req: HttpRequest, instanceId: string): number | Refusal {
    if (isPlatformKey(req.getHeader('authorization')) || isPlatformKey(req.getHeader('x-api-key'))) return { status: 403, detail: NO_ACCESS };
    const value = singleCookie(req.getHeader('cookie'), this.cookieName);
    // None, or two (one set by a sibling's script): no access.
    if (typeof value !== 'string') return { status: 401, detail: SIGN_IN_REQUIRED };
    const hash = this.o.cookies.sessionHashOf(instanceId, value);
    const session = hash === undefined ? undefined : sessionAccount(this.o.store, hash);
    return session ? session.accountId : { status: 401, detail: SIGN_IN_REQUIRED };
  }
}
