// Platform credentials never cross to an instance. Three front doors relay traffic to tenant
// code: the tunnel broker (gateway/tunnel/), dedicated endpoints (gateway/dedicated/) and the
// instance proxy (control-plane/proxy/). Whatever a visitor's browser or client attaches to a
// request there, the instance must not receive a platform credential, and whatever the instance
// answers, it must not set or clear a platform cookie (cookies are scoped by host, not port or
// path, so every front door on the platform's host shares the browser's cookie jar).
//
// Platform credentials:
// - cookies whose name starts with `rc_` (the platform reserves the prefix; today `rc_session`),
//   also behind the `__Host-` / `__Secure-` prefixes;
// - the CSRF header `x-csrf-token`;
// - an API key: `Authorization: Bearer rc-...` or `x-api-key: rc-...` (with or without Bearer);
// - the operator's admin token header `x-rc-admin-token`.
// Other Authorization schemes and other cookies belong to the instance's app and pass through
// here; the instance proxy forwards only those of them its app set itself (issue 44,
// control-plane/proxy/app-cookies.ts: a sibling's page can toss any name with `Domain=`).
//
// Never relayed back either: `Service-Worker-Allowed`. It lets a service worker take a scope
// above its script's path; tenant content must never widen a worker beyond its own path, on
// whatever origin it is served (with tunnels on a shared origin it let one tunnel's worker serve
// every other tunnel's URLs in the visitor's browser).

/** Prefix reserved for the platform's cookie names (`rc_session`). */
export const PLATFORM_COOKIE_PREFIX = 'rc_';
/** The session's CSRF header. */
export const CSRF_HEADER = 'x-csrf-token';
/** Response header an instance never sets through a front door (see above). */
export const SERVICE_WORKER_ALLOWED_HEADER = 'service-worker-allowed';
/** The admin token header of the rc CLI (control-plane/admin-client.ts). */
export const ADMIN_TOKEN_HEADER = 'x-rc-admin-token';

const PLATFORM_KEY = /^[ \t]*(?:Bearer[ \t]+)?rc-/i;
const MAY_HOLD_PLATFORM_COOKIE = /rc_/i;

/** True for a cookie name the platform reserves (case-insensitive, `__Host-`/`__Secure-` prefixes seen through). */
export function isPlatformCookieName(name: string): boolean {
  let n = name.trim().toLowerCase();
  if (n.startsWith('__host-')) n = n.slice(7);
  else if (n.startsWith('__secure-')) n = n.slice(9);
  return n.startsWith(PLATFORM_COOKIE_PREFIX);
}

/** A Cookie header without the platform's cookies ('' when nothing is left). */
export function withoutPlatformCookies(header: string): string {
  if (!MAY_HOLD_PLATFORM_COOKIE.test(header)) return header; // the common case: nothing to rebuild
  const kept: string[] = [];
  for (const part of header.split(';')) {
    const p = part.trim();
    if (p === '') continue;
    const eq = p.indexOf('=');
    if (!isPlatformCookieName(eq < 0 ? p : p.slice(0, eq))) kept.push(p);
  }
  return kept.join('; ');
}

/** True when an Authorization or x-api-key value carries a platform API key. */
export function isPlatformKey(value: string): boolean {
  return PLATFORM_KEY.test(value);
}

/**
 * The value to forward for a request header (`name` in lower case), or undefined when it must not
 * reach the instance: the CSRF header, a platform key, the platform's cookies.
 */
export function forwardableRequestHeader(name: string, value: string): string | undefined {
  switch (name) {
    case 'cookie': {
      const rest = withoutPlatformCookies(value);
      return rest === '' ? undefined : rest;
    }
    case 'authorization':
    case 'x-api-key':
      return isPlatformKey(value) ? undefined : value;
    case CSRF_HEADER:
    case ADMIN_TOKEN_HEADER:
      return undefined;
    default:
      return value;
  }
}

/**
 * True when a Set-Cookie value from an instance targets a platform cookie (it would replace or
 * clear the visitor's session, or plant one: session fixation). Such headers are dropped; the
 * app's other cookies pass through.
 */
export function isPlatformSetCookie(value: string): boolean {
  const semi = value.indexOf(';');
  const pair = semi < 0 ? value : value.slice(0, semi);
  const eq = pair.indexOf('=');
  // A pair without '=' is a nameless cookie whose value is the text; browsers send it as that
  // text alone, which parsers may read as a name: treat the text as the name.
  return isPlatformCookieName(eq < 0 ? pair : pair.slice(0, eq));
}
