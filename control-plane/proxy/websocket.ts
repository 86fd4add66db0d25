// The instance proxy's WebSockets (proxy.ts): an admitted upgrade dials the app first and
// completes the browser's handshake only once the app accepted, then relays messages both ways
// with backpressure (a slow browser pauses the read from the app). Messages count as activity.
import type { us_socket_context_t, WebSocketBehavior } from 'uWebSockets.js';
import WebSocket, { type RawData } from 'ws';
import { sendJson, track, type Res } from '../../lib/http.js';
import type { Logger } from '../../lib/log.js';
import type { HttpRequest, HttpResponse, WebSocket as UwsWebSocket } from '../../lib/uws.js';
import { forwardedHeaders } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { API_ERRORS } from '../errors.js';
import type { ProxyAdmission, Target } from './admission.js';

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
  upstream: WebSocket;
  instanceId: string;
  closed: boolean;
}

export interface ProxyWebSocketOptions {
  admission: ProxyAdmission;
  routes: InstanceRoutes;
  logger: Logger;
  /** Largest WebSocket message, both ways. */
  maxMessageBytes: number;
  /** The open sockets to apps (the proxy terminates them on close). */
  upstreams: Set<WebSocket>;
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
      d.upstream.on('message', (msg: RawData, isBinary: boolean) => {
        if (d.closed) return;
        ws.send(msg as Buffer, isBinary);
        // A slow browser: stop reading the instance until uWS drains.
        if (ws.getBufferedAmount() > MAX_BACKPRESSURE) d.upstream.pause();
      });
      d.upstream.on('close', (code: number, reason: Buffer) => {
        if (d.closed) return;
        d.closed = true;
        ws.end(sendable(code), reason);
      });
    },
    message(ws, message, isBinary) {
      const d = ws.getUserData();
      o.routes.recordActivity(d.instanceId);
      if (d.upstream.readyState === WebSocket.OPEN) d.upstream.send(Buffer.from(message.slice(0)), { binary: isBinary });
    },
    drain(ws) {
      const d = ws.getUserData();
      if (d.upstream.isPaused && ws.getBufferedAmount() < MAX_BACKPRESSURE / 2) d.upstream.resume();
    },
    close(ws, code) {
      const d = ws.getUserData();
      if (d.closed) return;
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
  admitted.then(
    (target) => {
      if (!('address' in target)) {
        sendJson(res, target.status, { detail: target.detail }, target.headers);
        return;
      }
      const headers: Record<string, string> = {};
      for (let i = 0; i + 1 < flat.length; i += 2) headers[flat[i]!] = flat[i + 1]!;
      // The app's own cookies only (app-cookies.ts); the browser's Cookie header is not forwarded.
      if (target.cookie !== '') headers.cookie = target.cookie;
      dial(o, res, target, key, protocols, headers, context);
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
): void {
  const upstream = new WebSocket(`ws://${target.address}${target.path}`, protocols, {
    headers,
    perMessageDeflate: false,
    handshakeTimeout: 10_000,
    maxPayload: o.maxMessageBytes,
  });
  o.upstreams.add(upstream);
  upstream.once('close', () => o.upstreams.delete(upstream));
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
    const data: WsData = { upstream, instanceId: target.instanceId, closed: false };
    res.cork(() => res.upgrade(data, key, upstream.protocol, '', context));
  });
}
