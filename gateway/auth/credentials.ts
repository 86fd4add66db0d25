// The credential rules of the shared model routes, beside the keys and the sessions they read:
// - an API key, from `Authorization: Bearer` or `x-api-key`; Bearer wins when both are present
//   (x-api-key is then not even read);
// - without a key, a browser session: the session cookie plus the session's CSRF token in
//   `x-csrf-token` (the custom header means a cross-site page cannot use the cookie alone). The
//   cookie is read as the platform API reads it (lib/session-cookie.ts): `__Host-rc_session`
//   only behind TLS (RC_COOKIE_SECURE; `auto` by X-Forwarded-Proto).
// Dedicated endpoints take keys only (`key`).
import { headerName } from '../../lib/http.js';
import { secureCookies, type CookieSecureMode } from '../../lib/session-cookie.js';
import type { HttpRequest } from '../../lib/uws.js';
import { AUTH_MISSING, type AuthFailure, type KeyDirectory } from './keys.js';
import type { SessionDirectory } from './sessions.js';

// Header names as bytes: uWS takes them without a string conversion (lib/http.ts headerName).
const AUTHORIZATION = headerName('authorization');
const X_API_KEY = headerName('x-api-key');
const COOKIE = headerName('cookie');
const X_CSRF_TOKEN = headerName('x-csrf-token');
const X_FORWARDED_PROTO = headerName('x-forwarded-proto');

/** The header values the credential rules read ('' when absent): the first of each name, as uWS's getHeader gives it. */
export interface CredentialHeaders {
  authorization: string;
  xApiKey: string;
  cookie: string;
  csrfToken: string;
  forwardedProto: string;
}

export class Credentials {
  constructor(
    private readonly keys: KeyDirectory,
    private readonly sessions: SessionDirectory,
    private readonly cookieSecure: CookieSecureMode = 'auto',
  ) {}

  /** Account id for the `authorization` and `x-api-key` header values ('' when absent), or why not. */
  key(authorization: string, xApiKey: string): number | AuthFailure {
    return this.keys.authenticate(authorization, xApiKey);
  }

  /**
   * shared() from header values read already ('' when absent; front-door.ts reads them in its one
   * walk over the headers): the same rules.
   */
  sharedOf(h: CredentialHeaders): number | AuthFailure {
    const authorization = h.authorization;
    const auth = this.keys.authenticate(authorization, authorization === '' ? h.xApiKey : '');
    if (auth !== AUTH_MISSING) return auth;
    const cookie = h.cookie;
    if (cookie === '') return auth;
    const mode = this.cookieSecure;
    const secure = mode === 'auto' ? secureCookies('auto', h.forwardedProto) : mode === 'always';
    return this.sessions.authenticate(cookie, h.csrfToken, secure);
  }

  /**
   * The shared model routes' credential: a key, else a browser session (cookie + x-csrf-token).
   * Reads the headers it needs from `req` (call synchronously in the handler).
   */
  shared(req: HttpRequest): number | AuthFailure {
    const authorization = req.getHeader(AUTHORIZATION);
    // x-api-key only counts without Authorization (Bearer wins), so it is read only then.
    const auth = this.keys.authenticate(authorization, authorization === '' ? req.getHeader(X_API_KEY) : '');
    if (auth !== AUTH_MISSING) return auth;
    const cookie = req.getHeader(COOKIE);
    if (cookie === '') return auth;
    const mode = this.cookieSecure;
    const secure = mode === 'auto' ? secureCookies('auto', req.getHeader(X_FORWARDED_PROTO)) : mode === 'always';
    return this.sessions.authenticate(cookie, req.getHeader(X_CSRF_TOKEN), secure);
  }
}
