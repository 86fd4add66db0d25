// The instance proxy's WebSockets (proxy.ts): an admitted upgrade dials the app first and
// completes the browser's handshake only once the app accepted, then relays messages both ways
// with backpressure (a slow browser pauses the read from the app). Messages count as activity.
// An open socket holds a place among its instance's, account's and address's requests in flight
// (limits.ts) from admission to its close; past a bound the browser's socket is upgraded and
// closed at once with 1013 (try again later) and the reason, which the page's script can read
// (a refused handshake's status and body are not shown to it).
import type { us_socket_context_t, WebSocketBehavior } from 'uWebSockets.js';
import WebSocket, { type RawData } from 'ws';
import { sendJson, track, type Res } from '../../lib/http.js';
import type { Logger } from '../../lib/log.js';
import type { HttpRequest, HttpResponse, WebSocket as UwsWebSocket } from '../../lib/uws.js';
import { forwardedHeaders } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { API_ERRORS } from '../errors.js';
import { clientAddress } from '../../lib/client-address.js';
import type { ProxyAdmission, Target } from './admission.js';
import type { HeldLimits } from '../../lib/held-limits.js';

const WS_DROP_HEADERS: ReadonlySet<string> = new Set([
  'cookie',
  'sec-websocket-key',
  'sec-websocket-version',
  'sec-websocket-extensions',
  'sec-websocket-protocol',
]);
/** Buffered bytes towards a browser beyond which the app's socket is paused. */
const MAX_BACKPRESSURE = 1024 * 1024;

export interface WsData {
  /** Undefined on a refused socket (`refused` says why; it is closed as it opens). */
  upstream: WebSocket | undefined;
  instanceId: string;
  closed: boolean;
  /** Gives back the place the socket holds (idempotent). */
  release: () => void;
  refused?: string;
}

/** WebSocket close code 1013: try again later (a bound of limits.ts). */
export const CLOSE_TRY_AGAIN_LATER = 1013;
/** A close frame's reason is at most 123 bytes. */
const MAX_REASON_BYTES = 123;

export interface ProxyWebSocketOptions {
  admission: ProxyAdmission;
  routes: InstanceRoutes;
  logger: Logger;
  /** Largest WebSocket message, both ways. */
  maxMessageBytes: number;
  /** The open sockets to apps (the proxy terminates them on close). */
  upstreams: Set<WebSocket>;
  /** Requests in flight per instance, account and address; a WebSocket counts as one until it closes. */
  inflight: HeldLimits;
  /** The client's address from X-Forwarded-For (RC_TRUST_PROXY). */
  trustProxy: boolean;
}

/** A close code that may be sent on (the reserved and out-of-range ones become 1000). */
const sendable = (code: number) => (code >= 1000 && code < 5000 && code !== 1005 && code !== 1006 && code !== 1015 ? code : 1000);

/** The uWS behaviour of every proxied WebSocket. */
export function proxyWebSocket(o: ProxyWebSocketOptions): WebSocketBehavior<WsData> {
  return {
    maxPayloadLength: o.maxMessageBytes,
    maxBackpressure: 64 * 1024 * 1024,
    idleTimeout: 120,
    sendPingsAutomatically: true,
    upgrade: (res, req, context) => upgrade(o, res, req, context),
    open(ws: UwsWebSocket<WsData>) {
      const d = ws.getUserData();
      if (d.upstream === undefined) {
        d.closed = true;
        ws.end(CLOSE_TRY_AGAIN_LATER, Buffer.from(d.refused ?? '').subarray(0, MAX_REASON_BYTES));
        return;
      }
      const upstream = d.upstream;
      upstream.on('message', (msg: RawData, isBinary: boolean) => {
        if (d.closed) return;
        ws.send(msg as Buffer, isBinary);
        // A slow browser: stop reading the instance until uWS drains.
        if (ws.getBufferedAmount() > MAX_BACKPRESSURE) upstream.pause();
      });
      upstream.on('close', (code: number, reason: Buffer) => {
        if (d.closed) return;
        d.closed = true;
        ws.end(sendable(code), reason);
      });
    },
    message(ws, message, isBinary) {
      const d = ws.getUserData();
      if (!d.upstream) return;
      o.routes.recordActivity(d.instanceId);
      if (d.upstream.readyState === WebSocket.OPEN) d.upstream.send(Buffer.from(message.slice(0)), { binary: isBinary });
    },
    drain(ws) {
      const d = ws.getUserData();
      if (d.upstream?.isPaused && ws.getBufferedAmount() < MAX_BACKPRESSURE / 2) d.upstream.resume();
    },
    close(ws, code) {
      const d = ws.getUserData();
      d.release();
      if (d.closed || !d.upstream) return;
      d.closed = true;
      try {
        d.upstream.close(sendable(code));
      } catch {
        d.upstream.terminate();
      }
    },
  };
}

/** Admits the upgrade, dials the app, and upgrades the browser's socket once the app accepted. */
function upgrade(o: ProxyWebSocketOptions, uwsRes: HttpResponse, req: HttpRequest, context: us_socket_context_t): void {
  const res = track(uwsRes);
  // Everything from req is read now (admit reads its part before its first await).
  const admitted = o.admission.admit(req, 'GET');
  const key = req.getHeader('sec-websocket-key');
  const protocols = req
    .getHeader('sec-websocket-protocol')
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean);
  const flat = forwardedHeaders(req, WS_DROP_HEADERS);
  const client = clientAddress(res, req, o.trustProxy);
  admitted.then(
    (target) => {
      if (!('address' in target)) {
        sendJson(res, target.status, { detail: target.detail }, target.headers);
        return;
      }
      if (res.aborted) return; // the browser went while its session was looked up: nothing to hold
      const release = holdPlace(o.inflight, target, client);
      if (typeof release === 'string') {
        // Upgraded to say why: closed with 1013 and the reason as it opens.
        const data: WsData = { upstream: undefined, instanceId: target.instanceId, closed: false, release: () => {}, refused: release };
        res.aborted = true;
        // A browser that asked for subprotocols fails a handshake that names none: it gets its first.
        res.cork(() => res.upgrade(data, key, protocols[0] ?? '', '', context));
        return;
      }
      const headers: Record<string, string> = {};
      for (let i = 0; i + 1 < flat.length; i += 2) headers[flat[i]!] = flat[i + 1]!;
      // The app's own cookies only (app-cookies.ts); the browser's Cookie header is not forwarded.
      if (target.cookie !== '') headers.cookie = target.cookie;
      dial(o, res, target, key, protocols, headers, context, release);
    },
    (err: unknown) => {
      o.logger.error('instance websocket admission failed', { err });
      const e = API_ERRORS.internal();
      sendJson(res, e.status, { detail: e.detail });
    },
  );
}

/** Dials the app with the admitted upgrade, and upgrades the browser's socket once the app accepted. */
function dial(
  o: ProxyWebSocketOptions,
  res: Res,
  target: Target,
  key: string,
  protocols: string[],
  headers: Record<string, string>,
  context: us_socket_context_t,
  release: () => void,
): void {
  const upstream = new WebSocket(`ws://${target.address}${target.path}`, protocols, {
    headers,
    perMessageDeflate: false,
    handshakeTimeout: 10_000,
    maxPayload: o.maxMessageBytes,
  });
  o.upstreams.add(upstream);
  // Until the browser's socket opens, the place is given back when the dial ends (after, also on its close).
  upstream.once('close', () => {
    o.upstreams.delete(upstream);
    if (!opened) release();
  });
  let opened = false;
  res.onAbort = () => upstream.terminate();
  upstream.on('error', (err) => {
    o.logger.debug('instance websocket error', { instanceId: target.instanceId, err });
    const e = API_ERRORS.instanceUnreachable();
    sendJson(res, e.status, { detail: e.detail });
  });
  upstream.on('unexpected-response', (_r, response) => {
    response.resume();
    const e = API_ERRORS.instanceRefusedWebSocket(response.statusCode);
    sendJson(res, e.status, { detail: e.detail });
    upstream.terminate();
  });
  upstream.on('open', () => {
    if (res.aborted) {
      upstream.terminate();
      return;
    }
    res.aborted = true;
    res.onAbort = undefined;
    o.routes.recordActivity(target.instanceId);
    opened = true;
    const data: WsData = { upstream, instanceId: target.instanceId, closed: false, release };
    res.cork(() => res.upgrade(data, key, upstream.protocol, '', context));
  });
}

/** Takes a place for the socket; its idempotent release, or the refusal's message. */
function holdPlace(inflight: HeldLimits, target: Target, client: string): (() => void) | string {
  const refusal = inflight.take(target.accountId, client, target.instanceId);
  if (refusal) return refusal.message;
  let held = true;
  return () => {
    if (!held) return;
    held = false;
    inflight.give(target.accountId, client, target.instanceId);
  };
}
