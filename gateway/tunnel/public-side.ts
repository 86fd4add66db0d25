// The public side of the broker: every tunnel is its own origin, `<scheme>://<tunnel id>.<tunnels
// host>/` (origins.ts), served on the tunnels' own listener, routed by the Host header and relayed
// over the tunnel's WebSocket as multiplexed streams (lib/tunnel/protocol.ts). No authentication
// here: that is the customer's. The old path form `/t/<id>/<path>` (on that listener's bare host
// and on the gateway) is redirected (308) to the tunnel's origin; tenant content is never served
// on a shared origin. Platform credentials are removed (forwardedHeaders,
// lib/instance-credentials.ts), and so is Service-Worker-Allowed on the way back.
//
// A public request body still arriving counts in the gateway's upload counts (issue 44;
// lib/upload-limits.ts, one budget per process with the model routes and dedicated endpoints):
// per client address, and per account and instance of the tunnel's owner, so a tunnel's public
// clients cannot hold more of the process than its instance may (RC_DEDICATED_UPLOAD*_PER_INSTANCE,
// half the account's by default). Past a bound: 429 `{detail}` naming it, Retry-After, the
// connection closed; the body is relayed as it comes, never buffered whole.
import { CONFLICTING_LENGTH, declaredLength, track, type Res } from '../../lib/http.js';
import type { Upload, UploadLimits } from '../../lib/upload-limits.js';
import { lastForwardedFor, peerAddress } from '../../lib/client-address.js';
import { forwardedHeaders, ResponseRelay } from '../../lib/relay/forward.js';
import { FrameType, type RequestHead } from '../../lib/tunnel/protocol.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { NO_MODEL, type GatewayMetrics } from '../metrics.js';
import { answer, TUNNEL_ROUTE } from './answer.js';
import type { Stream, Tunnel } from './connection.js';
import { TUNNEL_ID } from './origins.js';
import type { TunnelRegistry } from './registry.js';

/** The old, shared-origin path form of tunnel URLs: now only redirected to the tunnel's origin. */
export const LEGACY_PREFIX = '/t/';

/**
 * Request headers the broker does not pass on (besides platform credentials): the app is served
 * at the root of its own origin, so a client's X-Forwarded-Prefix would only mislead it.
 */
const DROP_REQUEST_HEADERS: ReadonlySet<string> = new Set(['x-forwarded-prefix']);

export interface PublicRequestsOptions {
  registry: TunnelRegistry;
  metrics: GatewayMetrics;
  /** Largest public request body (413 beyond). */
  maxBodyBytes: number;
  /** Wait for the response head of a public request. */
  headersTimeoutMs: number;
  /** The gateway's request bodies in flight (per address, account and instance). */
  uploads: UploadLimits;
  /** RC_TRUST_PROXY: the uploads' address is the last X-Forwarded-For entry (lib/client-address.ts). */
  trustProxy: boolean;
}

/** Public requests to tunnels, and the redirects of the old path form. */
export class PublicRequests {
  constructor(private readonly o: PublicRequestsOptions) {}

  /** Serves tunnels on `app` (the tunnels' listener), by Host. */
  serveOn(app: TemplatedApp): void {
    app.any('/*', (uwsRes: HttpResponse, req: HttpRequest) => {
      const res = track(uwsRes);
      const id = this.o.registry.origins?.idOf(req.getHeader('host'));
      if (id) this.serve(res, req, id);
      else if (req.getUrl().startsWith(LEGACY_PREFIX)) this.redirectLegacy(res, req);
      else answer(this.o.metrics, res, 404, 'No tunnel is connected at this address');
    });
  }

  /** Redirects the old path form on `app` (the gateway's listener). */
  redirectOn(app: TemplatedApp): void {
    app.any(`${LEGACY_PREFIX}*`, (uwsRes: HttpResponse, req: HttpRequest) => this.redirectLegacy(track(uwsRes), req));
  }

  /** One public request to the tunnel `id` (its Host named it); the service sees the path as it came. */
  private serve(res: Res, req: HttpRequest, id: string): void {
    const tunnel = this.o.registry.get(id);
    if (!tunnel || tunnel.closed) {
      answer(this.o.metrics, res, 404, 'No tunnel is connected at this address');
      return;
    }
    this.o.registry.routes.recordActivity(tunnel.data.instanceId);
    const method = req.getCaseSensitiveMethod().toUpperCase();
    const query = req.getQuery();
    const url = req.getUrl();
    const head: RequestHead = { method, path: query ? `${url}?${query}` : url, headers: forwardedHeaders(req, DROP_REQUEST_HEADERS) };
    const s = this.open(res, method, tunnel);
    tunnel.send(FrameType.RequestHead, s.id, JSON.stringify(head));
    this.forwardBody(res, req, tunnel, s);
  }

  /**
   * The upload a public body counts as while it arrives: the client's address (`forwarded`: the
   * last X-Forwarded-For entry, read in the handler; '' without RC_TRUST_PROXY), the tunnel owner's
   * account and instance.
   */
  private upload(res: Res, tunnel: Tunnel, forwarded: string): Upload {
    const instanceId = tunnel.data.instanceId;
    const accountId = this.o.registry.routes.get(instanceId)?.accountId;
    return this.o.uploads.start(forwarded || peerAddress(res), accountId, instanceId);
  }

  /** A stream for the request, its relay wired to the tunnel: credit, abort, the head's timeout. */
  private open(res: Res, method: string, tunnel: Tunnel): Stream {
    const metrics = this.o.metrics;
    let timer: NodeJS.Timeout | undefined;
    // Assigned once the relay that refers to it exists.
    let s: Stream;
    const relay = new ResponseRelay(res, method, (status) => {
      if (timer) clearTimeout(timer);
      s.upload?.release();
      tunnel.forget(s);
      metrics.request(TUNNEL_ROUTE, NO_MODEL, status);
    });
    s = tunnel.open(relay, res);
    relay.resume = () => tunnel.credit.drained(s);
    // The public client went away: RESET, unless the stream was forgotten first (the tunnel ended
    // or reset it, or the broker reset it and said so): cutting its public connection comes here too.
    relay.abortSource = () => {
      if (tunnel.streams.get(s.id) === s) tunnel.send(FrameType.Reset, s.id);
    };
    timer = setTimeout(() => {
      if (relay.status !== 0 || relay.finished) return;
      tunnel.reset(s, 'The service behind the tunnel did not answer in time', 504);
    }, this.o.headersTimeoutMs);
    timer.unref();
    return s;
  }

  /** The request body, within the size limit, as RequestBody frames, then RequestEnd. */
  private forwardBody(res: Res, req: HttpRequest, tunnel: Tunnel, s: Stream): void {
    const maxBody = this.o.maxBodyBytes;
    const length = declaredLength(req);
    if (length === CONFLICTING_LENGTH) {
      tunnel.reset(s, 'Conflicting Content-Length headers', 400);
      return;
    }
    if ((length === '' || length === '0') && req.getHeader('transfer-encoding') === '') {
      tunnel.send(FrameType.RequestEnd, s.id);
      return;
    }
    if (length !== '' && Number(length) > maxBody) {
      tunnel.reset(s, `Request body exceeds ${maxBody} bytes`, 413);
      return;
    }
    let size = 0;
    const forwarded = this.o.trustProxy ? lastForwardedFor(req.getHeader('x-forwarded-for')) : '';
    res.onData((chunk, isLast) => {
      if (s.relay.finished) return;
      size += chunk.byteLength;
      if (size > maxBody) {
        tunnel.reset(s, `Request body exceeds ${maxBody} bytes`, 413);
        return;
      }
      // Whole in its first read: never in flight, and the address is not even read.
      if (!(isLast && s.upload === undefined)) {
        s.upload ??= this.upload(res, tunnel, forwarded);
        const refused = s.upload.received(chunk.byteLength, isLast);
        if (refused) {
          res.closeAfter = true; // the rest of the body is never read
          tunnel.reset(s, refused.message, 429, { 'retry-after': String(refused.retryAfterSec) });
          return;
        }
      }
      if (chunk.byteLength) tunnel.send(FrameType.RequestBody, s.id, new Uint8Array(chunk));
      if (isLast) tunnel.send(FrameType.RequestEnd, s.id);
      else tunnel.credit.uploaded(s);
    });
  }

  /** `/t/<id>[/<path>]`, the old shared-origin form: 308 to the tunnel's own origin. */
  private redirectLegacy(res: Res, req: HttpRequest): void {
    const origins = this.o.registry.origins;
    const url = req.getUrl();
    const slash = url.indexOf('/', LEGACY_PREFIX.length);
    const id = url.slice(LEGACY_PREFIX.length, slash < 0 ? undefined : slash);
    if (!origins || !TUNNEL_ID.test(id)) {
      answer(this.o.metrics, res, 404, 'No tunnel is connected at this address');
      return;
    }
    const query = req.getQuery();
    const rest = slash < 0 ? '/' : url.slice(slash);
    answer(this.o.metrics, res, 308, 'Tunnels are served on their own origin', { location: `${origins.origin(id)}${rest}${query ? `?${query}` : ''}` });
  }
}
