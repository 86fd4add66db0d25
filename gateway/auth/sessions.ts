// Browser sessions on the shared model routes. SPEC: an account under review has no API key, yet
// "free shared model APIs remain usable" from its browser session. The control plane announces
// each session on the bus (`session.started` / `session.ended`, hashes only); the gateway holds
// them in memory like keys, so no request touches SQLite. A session credential is the
// `rc_session` cookie plus the session's CSRF token in `x-csrf-token`: the custom header keeps
// other pages of the same site from spending the user's quota with the cookie alone.
import type { SessionRecord } from '../../lib/gateway-snapshot.js';
import type { Bus, BusEvent } from '../../lib/bus.js';
import { systemClock, type Clock } from '../../lib/clock.js';
import { hashKey, matchesHash } from '../../lib/keys.js';
import { SEVERAL_COOKIES, sessionCookieToken } from '../../lib/session-cookie.js';
import { AUTH_MISSING, type AuthFailure } from './keys.js';

export type { SessionRecord };
export { SESSION_COOKIE } from '../../lib/session-cookie.js';

/** A cookie that names no live session, or a missing or wrong CSRF token. */
export const AUTH_SESSION: AuthFailure = Object.freeze({ reason: 'session' });
/** A valid session of an account under review with no shared model access (403 account_not_verified). */
export const AUTH_UNVERIFIED: AuthFailure = Object.freeze({ reason: 'unverified' });

/**
 * The session token of a Cookie header (`__Host-rc_session` when `secure`, else `rc_session`), or
 * undefined; the same reading as the platform API's (lib/session-cookie.ts): a header with the
 * cookie twice has none.
 */
export function sessionToken(cookieHeader: string, secure = false): string | undefined | typeof SEVERAL_COOKIES {
  return sessionCookieToken(cookieHeader, secure);
}

export class SessionDirectory {
  private readonly byToken = new Map<string, SessionRecord>();
  private unsubscribe: (() => void) | undefined;

  constructor(private readonly clock: Clock = systemClock) {}

  get size(): number {
    return this.byToken.size;
  }

  /**
   * Sessions ended while the snapshot loads, so the snapshot cannot revive them. Only then: kept
   * past the load, it would hold a hash for every sign-out the process ever heard.
   */
  private endedDuringLoad: Set<string> | undefined;

  /** How many session ends are remembered for a snapshot still loading (0 once it is loaded). */
  get endsHeldForLoad(): number {
    return this.endedDuringLoad?.size ?? 0;
  }

  /** Subscribes to `bus`, then loads the snapshot; events that arrive meanwhile win over it. */
  async start(load: (() => Promise<Iterable<SessionRecord>>) | undefined, bus?: Bus): Promise<void> {
    this.endedDuringLoad = load ? new Set() : undefined;
    if (bus) {
      this.unsubscribe = bus.subscribe((ev) => {
        if (ev.type === 'session.ended') this.endedDuringLoad?.add(ev.tokenHash);
        this.apply(ev);
      });
    }
    try {
      if (load) {
        const ended = this.endedDuringLoad!;
        for (const r of await load()) if (!ended.has(r.tokenHash) && !this.byToken.has(r.tokenHash)) this.byToken.set(r.tokenHash, r);
      }
    } finally {
      this.endedDuringLoad = undefined;
    }
  }

  /** Replaces every session with a fresh snapshot, then applies the events that arrived while it was fetched (see KeyDirectory.replaceAll). */
  replaceAll(records: Iterable<SessionRecord>, since: readonly BusEvent[] = []): void {
    this.byToken.clear();
    for (const r of records) this.byToken.set(r.tokenHash, r);
    for (const ev of since) this.apply(ev);
  }

  stop(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  private apply(ev: BusEvent): void {
    if (ev.type === 'session.started') {
      this.byToken.set(ev.tokenHash, {
        tokenHash: ev.tokenHash,
        csrfHash: ev.csrfHash,
        accountId: ev.accountId,
        expiresAt: ev.expiresAt,
        modelAccess: ev.modelAccess,
      });
      if (this.byToken.size % 1024 === 0) this.purgeExpired();
    } else if (ev.type === 'session.ended') {
      this.byToken.delete(ev.tokenHash);
    }
  }

  purgeExpired(): void {
    const now = this.clock.now();
    for (const [hash, r] of this.byToken) if (r.expiresAt <= now) this.byToken.delete(hash);
  }

  /**
   * The account of a request's session: AUTH_MISSING when the Cookie header has no session
   * cookie, AUTH_SESSION when it has two or more (no session: lib/session-cookie.ts), when the
   * session is unknown or expired or `csrf` is not its CSRF token, AUTH_UNVERIFIED when the
   * account has no shared model access. `secure`: behind TLS, where the cookie is `__Host-rc_session`.
   */
  authenticate(cookieHeader: string, csrf: string, secure = false): number | AuthFailure {
    const token = sessionToken(cookieHeader, secure);
    if (token === undefined) return AUTH_MISSING;
    if (token === SEVERAL_COOKIES) return AUTH_SESSION;
    const tokenHash = hashKey(token);
    const r = this.byToken.get(tokenHash);
    if (!r) return AUTH_SESSION;
    if (r.expiresAt <= this.clock.now()) {
      this.byToken.delete(tokenHash);
      return AUTH_SESSION;
    }
    if (!matchesHash(csrf, r.csrfHash)) return AUTH_SESSION;
    return r.modelAccess === false ? AUTH_UNVERIFIED : r.accountId;
  }
}
