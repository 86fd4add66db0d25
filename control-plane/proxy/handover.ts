// Getting a browser session onto an instance's own origin (issue 27). The app lives on
// `<instance id>.<proxy host>`, where the browser sends no console cookie, so:
//
// 1. `GET /api/instances/<id>/open` on the platform API (the status object's `base_url`, the
//    console's "Open" link): the owner's browser session only (a key gets 403 `You do not have
//    access to this instance`, SPEC), mints a single-use ticket (60 s, a row in the database, so
//    any control plane's proxy redeems it) and redirects to `<instance origin>/_rc/auth?ticket=...`;
// 2. the proxy redeems it once (the row is deleted) and sets its own host-only cookie `rc_proxy`
//    (`__Host-rc_proxy` behind TLS; HttpOnly, SameSite=Lax), then redirects to `/`;
// 3. every proxied request checks that cookie: it names the console session by its hash and is
//    MACed together with the instance id, so it works only on that instance's origin and only as
//    long as the session lives (signing out ends proxy access at once), and only for the
//    instance's owner.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { hashKey } from '../../lib/keys.js';
import { instanceOrigin, isInstanceLabel } from '../../lib/instance-origin.js';
import type { Caller } from '../auth.js';
import { API_ERRORS } from '../errors.js';
import { route, type Route } from '../router.js';
import type { Store } from '../store.js';

/** The path on an instance's origin where a ticket is redeemed (reserved: never forwarded to the app). */
export const AUTH_PATH = '/_rc/auth';
export const TICKET_TTL_MS = 60_000;

export interface Ticket {
  instanceId: string;
  /** SHA-256 hex of the console session's token. */
  sessionHash: string;
  expiresAt: number;
}

/**
 * Single-use, short-lived hand-over tickets, in the database (table proxy_tickets): with several
 * control planes, the one that mints a ticket need not be the one whose proxy redeems it. Only the
 * ticket's hash is stored; redeeming deletes the row in the same statement, so a ticket works once
 * whichever control planes race for it. Minting first deletes the expired rows: the table holds at
 * most a minute of tickets.
 */
export class ProxyTickets {
  private readonly insert;
  private readonly take;
  private readonly purge;

  constructor(
    private readonly store: Store,
    private readonly ttlMs = TICKET_TTL_MS,
  ) {
    this.insert = store.sql.prepare<[string, string, string, number]>(
      'INSERT INTO proxy_tickets (token_hash, instance_id, session_hash, expires_at) VALUES (?, ?, ?, ?)',
    );
    this.take = store.sql.prepare<[string], { instance_id: string; session_hash: string; expires_at: number }>(
      'DELETE FROM proxy_tickets WHERE token_hash = ? RETURNING instance_id, session_hash, expires_at',
    );
    this.purge = store.sql.prepare<[number]>('DELETE FROM proxy_tickets WHERE expires_at <= ?');
  }

  async mint(instanceId: string, sessionHash: string): Promise<string> {
    const now = this.store.clock.now();
    await this.purge.run(now);
    const token = randomBytes(32).toString('base64url');
    await this.insert.run(hashKey(token), instanceId, sessionHash, now + this.ttlMs);
    return token;
  }

  /** The ticket's grant, once: a second redemption, an unknown or an expired ticket give undefined. */
  async redeem(token: string): Promise<Ticket | undefined> {
    const t = await this.take.get(hashKey(token));
    if (!t || t.expires_at <= this.store.clock.now()) return undefined;
    return { instanceId: t.instance_id, sessionHash: t.session_hash, expiresAt: t.expires_at };
  }
}

/** The proxy's own cookie: host-only on the instance's origin. */
export const PROXY_COOKIE = 'rc_proxy';
export const SECURE_PROXY_COOKIE = '__Host-rc_proxy';

/**
 * MACs proxy cookies. The key derives from the platform's seal key (which every control plane on
 * one database shares, control-plane/secrets.ts), so a cookie set through one control plane's
 * proxy works through another's and across restarts; without one, a random key per process.
 */
export class ProxyCookies {
  private readonly key: Buffer;

  constructor(sealKey?: Buffer) {
    this.key = sealKey ? createHmac('sha256', sealKey).update('rc-proxy-cookie-key').digest() : randomBytes(32);
  }

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
      async handle({ params }, caller: Caller) {
        // SPEC: the instance proxy requires a browser session; a bearer key gets 403.
        if (caller.via !== 'session' || !caller.session) throw API_ERRORS.instanceNoAccess();
        const id = params[0]!;
        const inst = o.instance(id);
        if (!inst || inst.status === 'stopping' || inst.status === 'stopped' || inst.status === 'failed') throw API_ERRORS.instanceNotRunning();
        if (inst.accountId !== caller.account.id) throw API_ERRORS.instanceNoAccess();
        if (!isInstanceLabel(id)) throw API_ERRORS.instanceWithoutOrigin();
        const ticket = await o.tickets.mint(id, hashKey(caller.session.token));
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
