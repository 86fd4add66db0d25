// Getting a browser session onto an instance's own origin (issue 27). The app lives on
// `<instance id>.<proxy host>`, where the browser sends no console cookie, so:
//
// 1. `GET /api/instances/<id>/open` on the platform API (the status object's `base_url`, the
//    console's "Open" link): the owner's browser session only (a key gets 403 `You do not have
//    access to this instance`, SPEC), mints a single-use ticket (60 s, in this process's memory)
//    and redirects to `<instance origin>/_rc/auth?ticket=...`;
// 2. the proxy (same process) redeems it once and sets its own host-only cookie `rc_proxy`
//    (`__Host-rc_proxy` behind TLS; HttpOnly, SameSite=Lax), then redirects to `/`;
// 3. every proxied request checks that cookie: it names the console session by its hash and is
//    MACed together with the instance id, so it works only on that instance's origin and only as
//    long as the session lives (signing out ends proxy access at once), and only for the
//    instance's owner.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { hashKey } from '../../lib/keys.js';
import { instanceOrigin, isInstanceLabel } from '../../lib/instance-origin.js';
import type { Clock } from '../../lib/clock.js';
import type { Caller } from '../auth.js';
import { API_ERRORS } from '../errors.js';
import { route, type Route } from '../router.js';
import type { Store } from '../store.js';

/** The path on an instance's origin where a ticket is redeemed (reserved: never forwarded to the app). */
export const AUTH_PATH = '/_rc/auth';
export const TICKET_TTL_MS = 60_000;
/** Tickets held at most (the oldest is dropped beyond): memory is bounded whatever callers do. */
const MAX_TICKETS = 10_000;

export interface Ticket {
  instanceId: string;
  /** SHA-256 hex of the console session's token. */
  sessionHash: string;
  expiresAt: number;
}

/** Single-use, short-lived hand-over tickets, in the memory of the process that runs API and proxy. */
export class ProxyTickets {
  private readonly byToken = new Map<string, Ticket>();

  constructor(
    private readonly clock: Clock,
    private readonly ttlMs = TICKET_TTL_MS,
  ) {}

  mint(instanceId: string, sessionHash: string): string {
    const now = this.clock.now();
    if (this.byToken.size >= MAX_TICKETS) {
      for (const [t, v] of this.byToken) if (v.expiresAt <= now) this.byToken.delete(t);
      if (this.byToken.size >= MAX_TICKETS) this.byToken.delete(this.byToken.keys().next().value!);
    }
    const token = randomBytes(32).toString('base64url');
    this.byToken.set(hashKey(token), { instanceId, sessionHash, expiresAt: now + this.ttlMs });
    return token;
  }

  /** The ticket's grant, once: a second redemption, an unknown or an expired ticket give undefined. */
  redeem(token: string): Ticket | undefined {
    const key = hashKey(token);
    const t = this.byToken.get(key);
    if (!t) return undefined;
    this.byToken.delete(key);
    return t.expiresAt > this.clock.now() ? t : undefined;
  }
}

/** The proxy's own cookie: host-only on the instance's origin. */
export const PROXY_COOKIE = 'rc_proxy';
export const SECURE_PROXY_COOKIE = '__Host-rc_proxy';

/** MACs proxy cookies; one key per process (a restart means opening the instance from the console again). */
export class ProxyCookies {
  constructor(private readonly key: Buffer = randomBytes(32)) {}

  private mac(instanceId: string, sessionHash: string): Buffer {
    return createHmac('sha256', this.key).update(`rc-proxy\n${instanceId}\n${sessionHash}`).digest();
  }

  /** The cookie value granting `sessionHash`'s browser access to `instanceId`'s origin. */
  value(instanceId: string, sessionHash: string): string {
    return `${sessionHash}.${this.mac(instanceId, sessionHash).toString('base64url')}`;
  }

  /** The session hash a cookie value grants on `instanceId`'s origin, or undefined (forged, or made for another instance). */
  sessionHashOf(instanceId: string, value: string): string | undefined {
    const dot = value.indexOf('.');
    if (dot !== 64) return undefined;
    const hash = value.slice(0, dot);
    if (!/^[0-9a-f]{64}$/.test(hash)) return undefined;
    const given = Buffer.from(value.slice(dot + 1), 'base64url');
    const want = this.mac(instanceId, hash);
    return given.length === want.length && timingSafeEqual(given, want) ? hash : undefined;
  }

  /** Set-Cookie for it: `__Host-rc_proxy` (Secure) on https, else `rc_proxy`; host-only, Path=/. */
  setCookie(instanceId: string, sessionHash: string, secure: boolean, maxAgeSec: number): string {
    const name = secure ? SECURE_PROXY_COOKIE : PROXY_COOKIE;
    return `${name}=${this.value(instanceId, sessionHash)}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeSec}${secure ? '; Secure' : ''}`;
  }
}

/** Who owns an instance and whether the proxy serves it (the proxy's route table). */
export interface OwnedInstance {
  accountId: number;
  status: string;
}

/** The live account behind a session hash, or undefined. */
export async function sessionAccount(store: Store, sessionHash: string): Promise<{ accountId: number; expiresAt: number } | undefined> {
  const s = await store.sessions.lookupHash(sessionHash);
  return s && (await store.accounts.byId(s.accountId)) ? s : undefined;
}

export interface OpenRouteOptions {
  tickets: ProxyTickets;
  /** The proxy's base URL (`http://localhost:8081`, `https://apps.example.net`), read per request (known once the proxy listens). */
  proxyBase: () => string;
  /** The instance as the proxy sees it (undefined: unknown or not live). */
  instance(id: string): OwnedInstance | undefined;
}

/** `GET /api/instances/:id/open`: the hand-over from the console's session to the app's origin. */
export function openInstanceRoutes(o: OpenRouteOptions): Route[] {
  return [
    route({
      method: 'get',
      path: '/api/instances/:id/open',
      summary: "Open an instance's app in the browser: redirects to its own origin with a single-use ticket (browser session only)",
      access: 'required',
      handle({ params }, caller: Caller) {
        // SPEC: the instance proxy requires a browser session; a bearer key gets 403.
        if (caller.via !== 'session' || !caller.session) throw API_ERRORS.instanceNoAccess();
        const id = params[0]!;
        const inst = o.instance(id);
        if (!inst || inst.status === 'stopping' || inst.status === 'stopped' || inst.status === 'failed') throw API_ERRORS.instanceNotRunning();
        if (inst.accountId !== caller.account.id) throw API_ERRORS.instanceNoAccess();
        if (!isInstanceLabel(id)) throw API_ERRORS.instanceWithoutOrigin();
        const ticket = o.tickets.mint(id, hashKey(caller.session.token));
        return {
          status: 302,
          body: { detail: 'Opening the instance' },
          // The ticket is in the URL: no referrer carries it anywhere.
          headers: { location: `${instanceOrigin(o.proxyBase(), id)}${AUTH_PATH}?ticket=${ticket}`, 'referrer-policy': 'no-referrer' },
        };
      },
    }),
  ];
}
