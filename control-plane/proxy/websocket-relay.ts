// The proxy's WebSocket side: an upgrade that ProxyAccess admits opens a WebSocket to the
// instance's app first (same path, subprotocols and forwarded headers) and completes the
// browser's upgrade only once that one is open; then messages flow both ways, with backpressure
// towards a slow browser, and each side's close is passed on.
import type { us_socket_context_t, WebSocketBehavior } from 'uWebSockets.js';
import WebSocket, { type RawData } from 'ws';
import { sendJson, track } from '../../lib/http.js';
import type { Logger } from '../../lib/log.js';
import type { HttpRequest, HttpResponse, WebSocket as UwsWebSocket } from '../../lib/uws.js';
import { forwardedHeaders } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import type { ProxyAccess } from './access.js';

const WS_DROP_HEADERS: ReadonlySet<string> = new Set(['sec-websocket-key', 'sec-websocket-version', 'sec-websocket-extensions', 'sec-websocket-protocol']);
/** Buffered towards the browser beyond which the instance is not read until uWS drains. */
const MAX_BACKPRESSURE = 1024 * 1024;

/** Each browser WebSocket's side of the pair. */
export interface WsData {
  upstream: WebSocket;
  instanceId: string;
  closed: boolean;
}

export interface WebSocketRelayOptions {
  access: ProxyAccess;
  /** Traffic counts as activity (throttled by the routes). */
  routes: InstanceRoutes;
  /** Largest WebSocket message, either way. */
  maxMessageBytes: number;
  logger: Logger;
}

/** A close code that may be sent on (1005, 1006 and 1015 are reserved for reporting): else 1000. */
function relayableCloseCode(code: number): number {
  return code >= 1000 && code < 5000 && code !== 1005 && code !== 1006 && code !== 1015 ? code : 1000;
}

export class WebSocketRelay {
  /** Open WebSockets to instances: terminated when the proxy closes. */
  private readonly upstreams = new Set<WebSocket>();

  constructor(private readonly o: WebSocketRelayOptions) {}

  /** uWS's WebSocket behaviour for every path. */
  behavior(): WebSocketBehavior<WsData> {
    return {
      maxPayloadLength: this.o.maxMessageBytes,
      maxBackpressure: 64 * 1024 * 1024,
      idleTimeout: 120,
      sendPingsAutomatically: true,
      upgrade: (res, req, context) => this.upgrade(res, req, context),
      open: (ws) => this.open(ws),
      message: (ws, message, isBinary) => {
        const d = ws.getUserData();
        this.o.routes.recordActivity(d.instanceId);
        if (d.upstream.readyState === WebSocket.OPEN) d.upstream.send(Buffer.from(message.slice(0)), { binary: isBinary });
      },
      drain: (ws) => {
        const d = ws.getUserData();
        if (d.upstream.isPaused && ws.getBufferedAmount() < MAX_BACKPRESSURE / 2) d.upstream.resume();
      },
      close: (ws, code) => {
        const d = ws.getUserData();
        if (d.closed) return;
        d.closed = true;
        try {
          d.upstream.close(relayableCloseCode(code));
        } catch {
          d.upstream.terminate();
        }
      },
    };
  }

  close(): void {
    for (const u of this.upstreams) u.terminate();
  }

  private upgrade(uwsRes: HttpResponse, req: HttpRequest, context: us_socket_context_t): void {
    const res = track(uwsRes);
    const target = this.o.access.admit(req, 'GET');
    if (!('address' in target)) {
      sendJson(res, target.status, { detail: target.detail }, target.headers);
      return;
    }
    const key = req.getHeader('sec-websocket-key');
    const protocols = req
      .getHeader('sec-websocket-protocol')
      .split(',')
      .map((p) => p.trim())
      .filter(Boolean);
    const flat = forwardedHeaders(req, WS_DROP_HEADERS);
    const headers: Record<string, string> = {};
    for (let i = 0; i + 1 < flat.length; i += 2) headers[flat[i]!] = flat[i + 1]!;
    const upstream = new WebSocket(`ws://${target.address}${target.path}`, protocols, {
      headers,
      perMessageDeflate: false,
      handshakeTimeout: 10_000,
      maxPayload: this.o.maxMessageBytes,
    });
    this.upstreams.add(upstream);
    upstream.once('close', () => this.upstreams.delete(upstream));
    res.onAbort = () => upstream.terminate();
    upstream.on('error', (err) => {
      this.o.logger.debug('instance websocket error', { instanceId: target.instanceId, err });
      sendJson(res, 502, { detail: 'The instance is unreachable' });
    });
    upstream.on('unexpected-response', (_r, response) => {
      response.resume();
      sendJson(res, response.statusCode ?? 502, { detail: `The instance refused the WebSocket (HTTP ${response.statusCode})` });
      upstream.terminate();
    });
    upstream.on('open', () => {
      if (res.aborted) {
        upstream.terminate();
        return;
      }
      res.aborted = true;
      res.onAbort = undefined;
      this.o.routes.recordActivity(target.instanceId);
      const data: WsData = { upstream, instanceId: target.instanceId, closed: false };
      res.cork(() => res.upgrade(data, key, upstream.protocol, '', context));
    });
  }

  /** The browser's side is open: the instance's messages and close go to it. */
  private open(ws: UwsWebSocket<WsData>): void {
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
      ws.end(relayableCloseCode(code), reason);
    });
  }
}
