// Every instance's app gets an origin of its own on the instance proxy (issue 27): the instance id
// is the first label of the host name, `http://<instance id>.localhost:<RC_PROXY_PORT>/` by default,
// `https://<instance id>.apps.example-apps.net/` with `RC_PROXY_PUBLIC_URL=https://apps.example-apps.net`
// (a wildcard DNS name and certificate). Apps of different instances then share no origin with
// each other or with the console, and the console's host name never serves tenant content, so an
// app's `document.cookie` cannot reach the console's cookie jar (nor, with the apps on a registrable
// domain of their own, which start-up checks: lib/cookie-sites.ts, any `Domain=` cookie). Shared by the control plane (base
// URLs, the proxy) and the gateway (its browser redirect to the proxy).

/** A DNS label as instance ids are made (lowercase letters, digits, inner hyphens; at most 63). */
const DNS_LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** True when `id` can be the first label of a host name (instances launched before issue 27 cannot). */
export function isInstanceLabel(id: string): boolean {
  return DNS_LABEL.test(id);
}

/** The proxy's base URL without a trailing slash: the public one, else `http://localhost:<port>` (`*.localhost` is loopback in browsers). */
export function proxyBaseUrl(publicUrl: string, port: number): string {
  return publicUrl ? publicUrl.replace(/\/+$/, '') : `http://localhost:${port}`;
}

/** The origin of an instance's app, `<scheme>://<id>.<proxy host>[:port]` (no trailing slash). */
export function instanceOrigin(proxyBase: string, instanceId: string): string {
  const u = new URL(proxyBase);
  return `${u.protocol}//${instanceId}.${u.host}`;
}

/**
 * The instance id named by a request's Host header on the proxy whose base host name is
 * `baseHostname` (`localhost`, `apps.example-apps.net`): the first label when the rest is that name
 * (any port), else undefined. Case-insensitive, as host names are.
 */
export function instanceIdOfHost(hostHeader: string, baseHostname: string): string | undefined {
  return firstLabelOf(hostHeader, baseHostname, DNS_LABEL);
}

/**
 * The first label of a Host header (port and a trailing dot dropped, lower-cased) when the rest is
 * exactly `baseHostname` and the label matches `label`, else undefined (an IPv6 literal names
 * nothing). Both per-tenant origins use it: instance apps on the proxy, tunnels on theirs.
 */
export function firstLabelOf(hostHeader: string, baseHostname: string, label: RegExp): string | undefined {
  let host = hostHeader.trim().toLowerCase();
  if (host.startsWith('[')) return undefined;
  const colon = host.lastIndexOf(':');
  if (colon >= 0) host = host.slice(0, colon);
  if (host.endsWith('.')) host = host.slice(0, -1);
  const dot = host.indexOf('.');
  if (dot <= 0 || host.slice(dot + 1) !== baseHostname.toLowerCase()) return undefined;
  const first = host.slice(0, dot);
  return label.test(first) ? first : undefined;
}
