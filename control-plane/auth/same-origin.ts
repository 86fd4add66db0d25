// Login CSRF: a page on another site must not sign a browser in (to an attacker's account, whose
// activity the victim then feeds), sign it up or sign it out. Sign-in, sign-up and logout are
// refused unless they are JSON (a cross-site page can only send `application/json` after a CORS
// preflight, which the platform never grants) and, when the browser names the page's origin
// (`Origin`, `Sec-Fetch-Site`), that origin is the platform API's own. Clients that are not
// browsers send no Origin and pass.
import { API_ERRORS } from '../errors.js';

/** The request headers the check reads ('' when absent, as uWS gives them). */
export interface OriginHeaders {
  origin: string;
  contentType: string;
  secFetchSite: string;
  host: string;
  /** X-Forwarded-Host, considered only when the platform trusts its reverse proxy. */
  forwardedHost: string;
}

const JSON_TYPE = /^application\/json[ \t]*(;|$)/i;

/** host[:port] of an Origin value, lower case; undefined when it is not a URL origin (`null` included). */
function originHost(origin: string): string | undefined {
  try {
    const u = new URL(origin);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.host.toLowerCase() : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Throws 415 for a body that is not declared JSON (`bodyRequired`: a missing Content-Type too)
 * and 403 for a cross-origin browser request.
 */
export function checkSameOriginJson(h: OriginHeaders, bodyRequired: boolean): void {
  if (h.contentType === '' ? bodyRequired : !JSON_TYPE.test(h.contentType.trim())) {
    throw API_ERRORS.notJson();
  }
  if (h.secFetchSite !== '' && h.secFetchSite !== 'same-origin' && h.secFetchSite !== 'none') {
    throw API_ERRORS.crossOrigin();
  }
  if (h.origin === '') return;
  const from = originHost(h.origin);
  const own = [h.host, h.forwardedHost].filter(Boolean).map((x) => x.trim().toLowerCase());
  if (from === undefined || !own.includes(from)) throw API_ERRORS.crossOrigin();
}
