// Which of the browser's cookies an instance's app receives through the proxy (issue 44, item 8).
//
// Apps are siblings: `<a>.apps.example.net` and `<b>.apps.example.net` share the registrable
// domain example.net (unless the apps host is a public suffix), so a page of app A can run
// `document.cookie = "sid=evil; domain=apps.example.net"` and the browser sends `sid=evil` to app B
// as well. The server cannot see which host set a cookie (a Cookie header carries names and values
// only), so the rule rests on names and values the platform controls. The proxy forwards a cookie
// to the app on instance I only when
// - its name starts with `__Host-`: browsers take such a cookie only host-only, Secure, Path=/, so
//   only I's own origin (its server or its pages) can have set it; or
// - the app's server set it, with this value, through the proxy for I: on every `Set-Cookie` the
//   app sends, the proxy adds a seal cookie `__Host-rcseal.<name>` (`rcseal.<name>` on plain
//   http), HttpOnly, host-only, living as long as the app's cookie, whose value is an HMAC of
//   (instance id, name, value) under this process's key. A sibling can plant any name and value, a
//   seal cookie too, but cannot compute the HMAC for I; a seal made for another instance does not
//   match.
// Everything else is dropped: a tossed cookie, a cookie the app's own page script set or changed
// under another name (set it from the server, or name it `__Host-`), a nameless one. Where the
// browser holds the app's cookie and a tossed one of the same name, the app gets its own only.
// Seals are never forwarded to the app. (They are not `rc_` names: the relay drops every `rc_`
// Set-Cookie an instance answers, lib/instance-credentials.ts, and a seal rides on the app's
// response. An app that sets an `rcseal.` cookie itself cannot make its MAC.) The key is per process, like the proxy's cookie (handover.ts): after
// a restart the app's cookies are dropped until it sets them again.
import { createHmac, randomBytes } from 'node:crypto';
import { isPlatformCookieName, isPlatformSetCookie } from '../../lib/instance-credentials.js';

/** Seal cookies' name prefixes: behind TLS (host-only by the browser's rule) and on plain http. */
export const SECURE_SEAL_PREFIX = '__Host-rcseal.';
export const SEAL_PREFIX = 'rcseal.';
/** Names browsers let only the setting host hold. */
const HOST_ONLY_PREFIX = '__Host-';

/** The name and value of a `Set-Cookie` value's cookie pair, and its lifetime attributes; undefined for a nameless cookie. */
function parseSetCookie(setCookie: string): { name: string; value: string; lifetime: string } | undefined {
  const parts = setCookie.split(';');
  const pair = parts[0]!;
  const eq = pair.indexOf('=');
  if (eq <= 0) return undefined;
  const name = pair.slice(0, eq).trim();
  if (name === '') return undefined;
  let lifetime = '';
  for (const attr of parts.slice(1)) {
    const a = attr.trim();
    if (/^(max-age|expires)\s*=/i.test(a)) lifetime += `; ${a}`;
  }
  return { name, value: pair.slice(eq + 1).trim(), lifetime };
}

export class AppCookieSeals {
  constructor(private readonly key: Buffer = randomBytes(32)) {}

  private mac(instanceId: string, name: string, value: string): string {
    return createHmac('sha256', this.key).update(`rc-app-cookie\n${instanceId}\n${name}\n${value}`).digest().subarray(0, 16).toString('base64url');
  }

  /**
   * The seal's Set-Cookie for an app's `Set-Cookie` value on instance `instanceId`, or undefined
   * when none is needed (a `__Host-` name, a platform name, which is dropped anyway, a nameless cookie).
   */
  sealFor(instanceId: string, setCookie: string, secure: boolean): string | undefined {
    if (isPlatformSetCookie(setCookie)) return undefined;
    const c = parseSetCookie(setCookie);
    if (!c || c.name.startsWith(HOST_ONLY_PREFIX)) return undefined;
    const sealName = `${secure ? SECURE_SEAL_PREFIX : SEAL_PREFIX}${c.name}`;
    return `${sealName}=${this.mac(instanceId, c.name, c.value)}; Path=/; HttpOnly; SameSite=Lax${c.lifetime}${secure ? '; Secure' : ''}`;
  }

  /** The Cookie header to forward to instance `instanceId`'s app ('' when nothing is left): see the top of this file. */
  forwardable(instanceId: string, header: string, secure: boolean): string {
    if (header === '') return '';
    const sealPrefix = secure ? SECURE_SEAL_PREFIX : SEAL_PREFIX;
    const pairs: [string, string][] = [];
    const seals = new Map<string, Set<string>>();
    for (const part of header.split(';')) {
      const p = part.trim();
      const eq = p.indexOf('=');
      if (eq <= 0) continue; // nameless: no one can tell who set it
      const name = p.slice(0, eq).trim();
      const value = p.slice(eq + 1).trim();
      if (name.startsWith(sealPrefix) || name.startsWith(SEAL_PREFIX) || name.startsWith(SECURE_SEAL_PREFIX)) {
        if (!name.startsWith(sealPrefix)) continue; // a seal of the other scheme counts for nothing
        const sealed = name.slice(sealPrefix.length);
        let values = seals.get(sealed);
        if (!values) seals.set(sealed, (values = new Set()));
        values.add(value);
      } else if (!isPlatformCookieName(name)) pairs.push([name, value]);
    }
    const kept: string[] = [];
    for (const [name, value] of pairs) {
      if (name.startsWith(HOST_ONLY_PREFIX) || seals.get(name)?.has(this.mac(instanceId, name, value))) kept.push(`${name}=${value}`);
    }
    return kept.join('; ');
  }
}
