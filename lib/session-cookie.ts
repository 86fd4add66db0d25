// The platform's browser session cookie, read one way by every part that accepts it: the platform
// API and console (control-plane/auth.ts), the gateway's cookie-authenticated shared model routes
// (gateway/auth/sessions.ts) and, for its own cookie, the instance proxy (control-plane/proxy/).
//
// One cookie or none (issue 27, cookie tossing): cookies are scoped by host, not by port, so any
// page served on the platform's host name (a tunnel, an instance app on another port) can run
// `document.cookie = "rc_session=<its own>; path=/api"`. The browser then sends two cookies of that
// name, the longer path first, and a parser that takes the first one signs the victim's requests
// in as the attacker. A Cookie header that holds the session cookie more than once, whatever the
// values and order, therefore has no session at all: never the first one, never the last one.
//
// Behind TLS the cookie is `__Host-rc_session` (Secure, Path=/, no Domain): browsers refuse to set
// a `__Host-` cookie from another host, from plain http, or with a path, so it cannot be tossed.
// There only that name is read; an `rc_session` beside it is ignored (a sibling host's page can
// still set that one with `Domain=`, and it must not lock the user out). On plain http the cookie
// is `rc_session` and only that name is read.
//
// No tenant page shares the console's registrable domain (issue 44): start-up refuses apps or
// tunnels on a domain the console or the gateway is under (lib/cookie-sites.ts), so no tenant can
// toss a `Domain=` cookie here at all; the rules above hold for whatever else shares the host.

/** The session cookie on plain http. */
export const SESSION_COOKIE = 'rc_session';
/** The session cookie behind TLS: host-only, Secure, Path=/ (the browser enforces the prefix's rules). */
export const SECURE_SESSION_COOKIE = '__Host-rc_session';

/** Returned when a Cookie header carries the cookie more than once: no session. */
export const SEVERAL_COOKIES: unique symbol = Symbol('several session cookies');
export type CookieRead = string | typeof SEVERAL_COOKIES | undefined;

/** `RC_COOKIE_SECURE`: auto (Secure when X-Forwarded-Proto is https), always, never. */
export type CookieSecureMode = 'auto' | 'always' | 'never';

/** Whether a request's session cookie is the Secure `__Host-` one. */
export function secureCookies(mode: CookieSecureMode, forwardedProto: string): boolean {
  if (mode === 'always') return true;
  if (mode === 'never') return false;
  return forwardedProto.trim().toLowerCase() === 'https';
}

/** The session cookie's name for a request over TLS (`secure`) or plain http. */
export function sessionCookieName(secure: boolean): string {
  return secure ? SECURE_SESSION_COOKIE : SESSION_COOKIE;
}

/**
 * The value of cookie `name` in a Cookie header: undefined when absent or empty, SEVERAL_COOKIES
 * when the name occurs more than once (a nameless cookie whose text is the name counts too: some
 * parsers read it as the name). The header is parsed once, without allocating when the name does
 * not occur.
 */
export function singleCookie(header: string, name: string): CookieRead {
  if (header === '' || !header.includes(name)) return undefined;
  let value: string | undefined;
  let seen = false;
  let start = 0;
  while (start < header.length) {
    let end = header.indexOf(';', start);
    if (end < 0) end = header.length;
    const eq = header.indexOf('=', start);
    const nameEnd = eq < 0 || eq > end ? end : eq;
    if (header.slice(start, nameEnd).trim() === name) {
      if (seen) return SEVERAL_COOKIES;
      seen = true;
      value = nameEnd === end ? '' : header.slice(nameEnd + 1, end).trim();
    }
    start = end + 1;
  }
  return value === '' ? undefined : value;
}

/** The session token of a request (see the top of this file for which name counts). */
export function sessionCookieToken(header: string, secure: boolean): CookieRead {
  return singleCookie(header, sessionCookieName(secure));
}
