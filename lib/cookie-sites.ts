// The platform's public origins must not share a cookie site where tenant content is served
// (issue 44, item 8). Browsers scope cookies by registrable domain (eTLD+1 by the Public Suffix
// List): a page on `t1.tunnels.example.net` can run `document.cookie = "x=1; domain=example.net"`,
// and every host under example.net then receives that cookie: the console (a second `rc_session`:
// the signed-in visitor is locked out, a signed-out one is signed in as the attacker), the gateway,
// and every instance app. Ports and sub-domains do not separate cookie jars; registrable domains do.
//
// The rule, checked when the configuration loads (lib/config.ts):
// - a tenant family (instance apps on the proxy, `<id>.<RC_PROXY_PUBLIC_URL host>`; tunnels,
//   `<id>.<RC_TUNNEL_PUBLIC_URL host>`) shares its registrable domain with no other public origin,
//   platform or tenant;
// - unless the family's host is itself a public suffix (the PSL lists it, as github.io or
//   herokuapp.com are; `localhost` counts, as browsers let no page set `Domain=localhost`): then
//   every tenant is a registrable domain of its own and can set cookies for nobody else;
// - the platform's own origins (the console and API, the gateway) may share one: they serve no
//   tenant page, so nothing on them can write a cookie the other reads. (Dedicated endpoints on the
//   gateway answer only requests with a key, which a browser navigation never carries.)
//
// IP addresses have no registrable domain: a page on an address sets host-only cookies, and no page
// on a name can set a cookie for an address. So `npm start`'s defaults pass: the console and the
// gateway on 127.0.0.1, apps and tunnels on `*.localhost`, each tenant name a site of its own.
//
// The Public Suffix List comes with `tldts` (its copy of publicsuffix.org's list, private section
// included, as browsers use it; no network at run time). An unknown top-level domain is read by the
// list's default rule (`*`): `x.rc.test` has the registrable domain `rc.test`, as Firefox reads it
// (Chromium is stricter and allows only host cookies there); `localhost` is such a suffix.
import { isIP } from 'node:net';
import { getDomain } from 'tldts';
import { ConfigError } from './errors.js';

/** One public origin of the platform, as configured. */
export interface PublicOrigin {
  /** The setting that names it (for the error), e.g. `RC_TUNNEL_PUBLIC_URL`. */
  setting: string;
  /** Its URL; for a tenant family the base whose host each tenant's id is prefixed to. */
  url: string;
  /** True when the URL is a default (the setting is empty). */
  defaulted?: boolean;
  /** `platform`: served by the platform only (console, API, gateway); `tenants`: `<id>.<host>` per tenant (apps, tunnels). */
  kind: 'platform' | 'tenants';
}

/** A label no tenant id has, standing for any tenant's first label when a family's cookie site is computed. */
const ANY_TENANT = 'tenant-label';

/** Lower case, no trailing dot, no IPv6 brackets. */
function hostOf(url: string): string {
  return new URL(url).hostname
    .toLowerCase()
    .replace(/\.$/, '')
    .replace(/^\[|\]$/g, '');
}

/**
 * The registrable domain cookies on `host` can be scoped to (`Domain=` it, and every name under it
 * receives them): eTLD+1 by the Public Suffix List, private section included. Undefined when the
 * host can only hold host-only cookies: an IP address, or a host that is itself a public suffix.
 */
export function registrableDomain(host: string): string | undefined {
  const h = host
    .toLowerCase()
    .replace(/\.$/, '')
    .replace(/^\[|\]$/g, '');
  if (isIP(h) !== 0) return undefined;
  return getDomain(h, { allowPrivateDomains: true }) ?? undefined;
}

/** Where one origin's cookies can reach: a site shared by all its hosts, or none (each host on its own). */
interface CookieScope {
  origin: PublicOrigin;
  host: string;
  /** The registrable domain every host of the origin shares, or undefined (host-only, or one site per tenant). */
  site: string | undefined;
}

function scopeOf(origin: PublicOrigin): CookieScope | undefined {
  let host: string;
  try {
    host = hostOf(origin.url);
  } catch {
    return undefined; // not a URL: its own setting's validation says so
  }
  if (origin.kind === 'platform') return { origin, host, site: registrableDomain(host) ?? host };
  const tenantSite = registrableDomain(`${ANY_TENANT}.${host}`);
  // The family's host is a public suffix: `<id>.<host>` is each tenant's own registrable domain.
  return { origin, host, site: tenantSite === `${ANY_TENANT}.${host}` ? undefined : tenantSite };
}

const describe = (o: PublicOrigin) => `${o.setting} (${o.defaulted ? `empty: ${o.url}` : o.url})`;

const FIX =
  'Serve instance apps and tunnels on registrable domains of their own, apart from the console and from each other ' +
  '(for example RC_API_PUBLIC_URL=https://console.example.com, RC_PROXY_PUBLIC_URL=https://apps.example-apps.net, ' +
  'RC_TUNNEL_PUBLIC_URL=https://tunnels.example-tunnels.net), or on a domain listed in the Public Suffix List; see README.md "Configuration", cookie sites';

/**
 * Throws a ConfigError naming both settings and the fix when a tenant family shares a registrable
 * domain with another public origin (see the top of this file).
 */
export function assertCookieSitesApart(origins: readonly PublicOrigin[]): void {
  const scopes = origins.map(scopeOf).filter((s) => s !== undefined);
  for (let i = 0; i < scopes.length; i++) {
    for (let j = i + 1; j < scopes.length; j++) {
      const a = scopes[i]!;
      const b = scopes[j]!;
      if (a.origin.kind === 'platform' && b.origin.kind === 'platform') continue;
      if (a.site !== undefined && a.site === b.site) {
        const tenants = a.origin.kind === 'tenants' ? a : b;
        throw new ConfigError(
          `${describe(a.origin)} and ${describe(b.origin)} share the registrable domain ${a.site}: a page served under ${tenants.host} ` +
            `could set a cookie with Domain=${a.site} that the other receives. ${FIX}`,
        );
      }
    }
  }
}

/** The settings that name the public origins (a subset of lib/config.ts Config). */
export interface OriginSettings {
  host: string;
  apiPort: number;
  apiPublicUrl: string;
  gatewayPort: number;
  instancePublicUrl: string;
  proxyPort: number;
  proxyPublicUrl: string;
  tunnelPort: number;
  tunnelPublicUrl: string;
}

/** The four public origins as configured, each empty setting replaced by what the platform then serves. */
export function publicOriginsOf(c: OriginSettings): PublicOrigin[] {
  const listen = isIP(c.host) === 6 ? `[${c.host}]` : c.host || '127.0.0.1';
  const origin = (setting: string, url: string, fallback: string, kind: PublicOrigin['kind']): PublicOrigin =>
    url ? { setting, url, kind } : { setting, url: fallback, kind, defaulted: true };
  return [
    origin('RC_API_PUBLIC_URL', c.apiPublicUrl, `http://${listen}:${c.apiPort}`, 'platform'),
    origin('RC_INSTANCE_PUBLIC_URL', c.instancePublicUrl, `http://${listen}:${c.gatewayPort}`, 'platform'),
    origin('RC_PROXY_PUBLIC_URL', c.proxyPublicUrl, `http://localhost:${c.proxyPort}`, 'tenants'),
    origin('RC_TUNNEL_PUBLIC_URL', c.tunnelPublicUrl, `http://localhost:${c.tunnelPort}`, 'tenants'),
  ];
}
