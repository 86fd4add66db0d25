// Every tunnel is an origin of its own: `<scheme>://<tunnel id>.<tunnels host>[:port]/`.
//
// A browser keeps service workers, storage and the same-origin policy per origin. When tunnels
// shared one origin (`<tunnels>/t/<id>/`), one tunnel's page could register a service worker
// that then served every other tunnel's URLs in that visitor's browser, and its scripts could
// read other tunnels' answers. A host name per tunnel ends that: the tunnels' listener routes
// by the Host header, and tenant content is never served on a shared origin.
//
// The tunnels host is the host of RC_TUNNEL_PUBLIC_URL (a wildcard DNS name and certificate in
// production: `*.tunnels.example-tunnels.net`, on a registrable domain apart from the console's
// and the apps', lib/cookie-sites.ts), else `localhost`: browsers resolve `*.localhost` to the
// loopback address without DNS.
import { isIP } from 'node:net';
import { ConfigError } from '../../lib/errors.js';
import { firstLabelOf } from '../../lib/instance-origin.js';

/** A tunnel id (identity.ts tunnelId): `t` + 24 hex digits, which is also a valid DNS label. */
export const TUNNEL_ID = /^t[0-9a-f]{24}$/;

/** The host of tunnel origins when no public URL is configured. */
export const LOCAL_TUNNELS_HOST = 'localhost';

export class TunnelOrigins {
  /** `http:` or `https:`. */
  readonly scheme: string;
  /** Lower-case host name under which every tunnel gets its own name. */
  readonly host: string;
  /** `:port`, or '' for the scheme's default port. */
  private readonly portSuffix: string;

  /** `base`: an origin such as `https://tunnels.example-tunnels.net` or `http://localhost:8082` (no path). */
  constructor(base: string) {
    let u: URL;
    try {
      u = new URL(base);
    } catch {
      throw new ConfigError(`RC_TUNNEL_PUBLIC_URL is not a URL: ${base}`);
    }
    if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new ConfigError(`RC_TUNNEL_PUBLIC_URL must be http(s): ${base}`);
    if (isIP(u.hostname.replace(/^\[|\]$/g, '')) !== 0) {
      throw new ConfigError(`RC_TUNNEL_PUBLIC_URL must name a host, not an IP address (each tunnel is <tunnel id>.<host>): ${base}`);
    }
    if (u.pathname !== '/' || u.search !== '' || u.hash !== '' || u.username !== '' || u.password !== '') {
      throw new ConfigError(`RC_TUNNEL_PUBLIC_URL must be an origin without a path (each tunnel is served at the root of its own host): ${base}`);
    }
    this.scheme = u.protocol;
    this.host = u.hostname.toLowerCase().replace(/\.$/, '');
    this.portSuffix = u.port ? `:${u.port}` : '';
  }

  /** The tunnel's origin, `<scheme>//<id>.<host>[:port]` (no trailing slash). */
  origin(tunnelId: string): string {
    return `${this.scheme}//${tunnelId}.${this.host}${this.portSuffix}`;
  }

  /** The tunnel's public URL (its origin's root). */
  url(tunnelId: string): string {
    return `${this.origin(tunnelId)}/`;
  }

  /**
   * The tunnel id a request's Host header names (`<id>.<host>`, any port), or undefined: the
   * tunnels host itself, another name, an address.
   */
  idOf(hostHeader: string): string | undefined {
    return firstLabelOf(hostHeader, this.host, TUNNEL_ID);
  }
}

/**
 * Refuses a tunnels host that is, contains or sits under the host of another front door (the
 * console and API, the proxy, the gateway): a tunnel at `<id>.app.example.com` could set a
 * `Domain=app.example.com` cookie that the console then receives, and the console must never
 * serve on a tunnel's name. Empty URLs are skipped. The wider rule, by registrable domain (a tunnel
 * at `<id>.tunnels.example.net` can set `Domain=example.net` too), is checked when the
 * configuration loads: lib/cookie-sites.ts.
 */
export function assertTunnelsApart(tunnelsUrl: string, others: Record<string, string>): void {
  const tunnels = new TunnelOrigins(tunnelsUrl).host;
  for (const [setting, url] of Object.entries(others)) {
    if (!url) continue;
    const other = new URL(url).hostname.toLowerCase().replace(/\.$/, '');
    if (other === tunnels || other.endsWith(`.${tunnels}`) || tunnels.endsWith(`.${other}`)) {
      throw new ConfigError(`RC_TUNNEL_PUBLIC_URL (${tunnelsUrl}) must be a host apart from ${setting} (${url}): put tunnels on a domain of their own`);
    }
  }
}
