// Who is calling: an API key (`Authorization: Bearer rc-...`) or a browser session cookie.
// Both are checked against the database on every platform request (primary-key lookups), so a
// rotated key or a signed-out session is refused at once.
import { hashKey, isWellFormedKey, matchesHash } from '../lib/keys.js';
import type { Account, Session } from './accounts.js';
import { ApiError, forbidden, INVALID_BEARER, NO_API_KEY, unauthorized } from './errors.js';
import type { Store } from './store.js';

export const SESSION_COOKIE = 'rc_session';
export const CSRF_HEADER = 'x-csrf-token';
export const SESSION_INVALID = 'Session expired or invalid; sign in again';
export const CSRF_INVALID = 'Missing or invalid CSRF token (send the x-csrf-token header given at sign-in)';

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
}

const BEARER = /^Bearer(?:[ \t]+(.*))?$/i;

/** The value of one cookie in a Cookie header, or undefined. */
export function cookieValue(header: string, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === name) return part.slice(i + 1).trim();
  }
  return undefined;
}

/**
 * Resolves the caller. Returns undefined when the request carries no credential at all, an
 * ApiError (401) for a bad one. With `ignoreBadSession`, a stale cookie counts as no credential
 * (public pages).
 */
export function identify(store: Store, h: CredentialHeaders, ignoreBadSession = false): Caller | ApiError | undefined {
  if (h.authorization !== '') {
    const m = BEARER.exec(h.authorization.trim());
    if (!m) return unauthorized(INVALID_BEARER);
    const key = (m[1] ?? '').trim();
    if (key === '') return unauthorized(NO_API_KEY);
    if (!isWellFormedKey(key)) return unauthorized(INVALID_BEARER);
    const accountId = store.keys.accountIdFor(hashKey(key));
    const account = accountId === undefined ? undefined : store.accounts.byId(accountId);
    // An unverified account holds no key; a key left over from before an un-verify is refused too.
    if (!account || !account.verified) return unauthorized(INVALID_BEARER);
    return { account, via: 'key' };
  }
  const token = cookieValue(h.cookie, SESSION_COOKIE);
  if (token === undefined || token === '') return undefined;
  const session = store.sessions.lookup(token);
  const account = session && store.accounts.byId(session.accountId);
  if (!session || !account) return ignoreBadSession ? undefined : unauthorized(SESSION_INVALID);
  return { account, via: 'session', session: { ...session, token } };
}

/** Cookie-authenticated writes need the session's CSRF token in the x-csrf-token header (compared by hash, in constant time). */
export function checkCsrf(caller: Caller, header: string): void {
  if (caller.via !== 'session') return;
  if (!matchesHash(header, caller.session!.csrfHash)) throw forbidden(CSRF_INVALID, 'csrf_invalid');
}

/** Set-Cookie value for a new session. */
export function sessionCookie(token: string, maxAgeSec: number, secure: boolean): string {
  return `${SESSION_COOKIE}=${token}; Path=/; HttpOnly; SameSite=Lax; Max-Age=${maxAgeSec}${secure ? '; Secure' : ''}`;
}

/** Set-Cookie value that removes the session cookie. */
export function clearSessionCookie(secure: boolean): string {
  return `${SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0${secure ? '; Secure' : ''}`;
}
