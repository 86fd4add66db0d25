// Who is calling: an API key (`Authorization: Bearer rc-...`) or a browser session cookie.
// Both are checked against the database on every platform request (primary-key lookups), so a
// rotated key or a signed-out session is refused at once.
import { hashKey, isWellFormedKey, matchesHash } from '../lib/keys.js';
import { SECURE_SESSION_COOKIE, SESSION_COOKIE, SEVERAL_COOKIES, sessionCookieName, sessionCookieToken } from '../lib/session-cookie.js';
import type { Account, Session } from './accounts.js';
import { API_ERRORS, type ApiError } from './errors.js';
import type { Store } from './store.js';

export { SESSION_COOKIE, SECURE_SESSION_COOKIE };
export const CSRF_HEADER = 'x-csrf-token';

export interface Caller {
  account: Account;
  via: 'key' | 'session';
  /** The session and its cookie token, when signed in through the browser. */
  session?: Session & { token: string };
}

/** The raw credential headers of a request ('' when absent, as uWS gives them). */
export interface CredentialHeaders {
  authorization: string;
  cookie: string;
  csrf: string;
  /** Behind TLS (lib/session-cookie.ts secureCookies): only `__Host-rc_session` is read. */
  secure: boolean;
}

const BEARER = /^Bearer(?:[ \t]+(.*))?$/i;

/**
 * Resolves the caller. Returns undefined when the request carries no credential at all, an
 * ApiError (401) for a bad one. With `ignoreBadSession`, a stale cookie counts as no credential
 * (public pages).
 */
export async function identify(store: Store, h: CredentialHeaders, ignoreBadSession = false): Promise<Caller | ApiError | undefined> {
  if (h.authorization !== '') {
    const m = BEARER.exec(h.authorization.trim());
    if (!m) return API_ERRORS.invalidBearer();
    const key = (m[1] ?? '').trim();
    if (key === '') return API_ERRORS.noApiKey();
    if (!isWellFormedKey(key)) return API_ERRORS.invalidBearer();
    const accountId = await store.keys.accountIdFor(hashKey(key));
    const account = accountId === undefined ? undefined : await store.accounts.byId(accountId);
    // An unverified account holds no key; a key left over from before an un-verify is refused too.
    if (!account || !account.verified || account.disabled) return API_ERRORS.invalidBearer();
    return { account, via: 'key' };
  }
  const token = sessionCookieToken(h.cookie, h.secure);
  if (token === undefined) return undefined;
  // Two session cookies (one tossed in by a page on another port of this host): no session, not
  // even on public pages, so that nothing is done or shown as either account.
  if (token === SEVERAL_COOKIES) return ignoreBadSession ? undefined : API_ERRORS.sessionInvalid();
  const session = await store.sessions.lookup(token);
  const account = session && (await store.accounts.byId(session.accountId));
  // A disabled account's sessions were ended; one made in the same instant is refused here too.
  if (!session || !account || account.disabled) return ignoreBadSession ? undefined : API_ERRORS.sessionInvalid();
  return { account, via: 'session', session: { ...session, token } };
}

/** Cookie-authenticated writes need the session's CSRF token in the x-csrf-token header (compared by hash, in constant time). */
export function checkCsrf(caller: Caller, header: string): void {
  if (caller.via !== 'session') return;
  if (!matchesHash(header, caller.session!.csrfHash)) throw API_ERRORS.csrfInvalid();
}

/** Set-Cookie value for a new session: `__Host-rc_session` behind TLS, else `rc_session`; host-only, Path=/. */
export function sessionCookie(token: string, maxAgeSec: number, secure: boolean): string {
  return `${sessionCookieName(secure)}=${token}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeSec}${secure ? '; Secure' : ''}`;
}

/**
 * Set-Cookie values that expire every session cookie the platform reads or once set, on each of
 * `paths` (a cookie is replaced only with its own name, path and host). Sign-in sends them for
 * the API's paths so that a tossed cookie beside the new one is gone (`keepRoot`: not the new
 * cookie itself); sign-out adds `Clear-Site-Data: "cookies"` for paths nobody can list.
 */
export function expiredSessionCookies(secure: boolean, paths: readonly string[], keepRoot = false): string[] {
  const out: string[] = [];
  for (const path of paths) {
    if (path === '/' && keepRoot && !secure) continue;
    out.push(`${SESSION_COOKIE}=; Path=${path}; Max-Age=0${secure ? '; Secure' : ''}`);
  }
  if (secure && !keepRoot) out.push(`${SECURE_SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0; Secure`);
  return out;
}

/**
 * The paths a session cookie could have been set on to reach the API's routes: `/`, and every
 * static prefix of a route's path with and without its trailing slash (`/api`, `/api/`,
 * `/api/profile`, `/api/profile/`, `/api/profile/ssh-key`...). A cookie path matches a request
 * when it is a prefix ending at a `/`, so these are all the paths that matter, parameters aside.
 */
export function sessionCookiePaths(routePaths: Iterable<string>): string[] {
  const paths = new Set<string>(['/']);
  for (const p of routePaths) {
    const segments = p.split('/').slice(1);
    let prefix = '';
    for (let i = 0; i < segments.length; i++) {
      const seg = segments[i]!;
      if (seg.startsWith(':') || seg === '*' || seg === '') break;
      prefix += `/${seg}`;
      paths.add(prefix);
      if (i < segments.length - 1) paths.add(`${prefix}/`);
    }
  }
  return [...paths].sort();
}
