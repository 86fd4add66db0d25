// The client address that per-address limits count by (the platform API, the instance proxy and
// the gateway): the connection's peer, or, behind a reverse proxy (RC_TRUST_PROXY), the last
// X-Forwarded-For entry, the one that proxy appended (earlier entries are the client's to write).
// Without it, every client behind a balancer would share the balancer's address and its limits.
import type { HttpRequest, HttpResponse } from './uws.js';

/** The last entry of an X-Forwarded-For value ('' when there is none). */
export function lastForwardedFor(xff: string): string {
  return xff.slice(xff.lastIndexOf(',') + 1).trim();
}

/** The connection's peer address as text. */
export function peerAddress(res: HttpResponse): string {
  return Buffer.from(res.getRemoteAddressAsText()).toString();
}

/** The client address of a request (read synchronously in the handler: the uWS request is valid only there). */
export function clientAddress(res: HttpResponse, req: HttpRequest, trustProxy: boolean): string {
  if (trustProxy) {
    const last = lastForwardedFor(req.getHeader('x-forwarded-for'));
    if (last !== '') return last;
  }
  return peerAddress(res);
}
