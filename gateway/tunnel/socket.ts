// The WebSocket side of the broker: `GET /tunnel/connect?port=<P>` (upgrade, `Authorization:
// Bearer <tunnel token>`), where rc-tunnel inside an instance connects. The token names the
// instance (lib/tunnel/identity.ts); the instance must be known to the routes and pending or
// ready. The tunnel id is derived from (instance, port), so a reconnect keeps its public URL. A
// live tunnel is never displaced: a second connection for the same id is refused (409) while the
// first answers a ping, and replaces it only when it does not (a reconnect after a network cut).
// Then the frames rc-tunnel sends for each stream are relayed to its public client.
import type { us_socket_context_t, WebSocketBehavior } from 'uWebSockets.js';
import { track, type Res } from '../../lib/http.js';
import type { Logger } from '../../lib/log.js';
import { tunnelId, verifyTunnelToken } from '../../lib/tunnel/identity.js';
import { CLOSE_REPLACED, decodeFrame, FrameType, isHeaderList, parseJson, type Hello, type ResponseHead } from '../../lib/tunnel/protocol.js';
import type { HttpRequest, HttpResponse, WebSocket } from '../../lib/uws.js';
import type { GatewayMetrics } from '../metrics.js';
import { answer } from './answer.js';
import { type ConnData, type Stream, Tunnel } from './connection.js';
import { STREAM_WINDOW_BYTES } from './credit.js';
import { isRefusal, type TunnelLimits, type TunnelRefusal, type TunnelSlot } from './limits.js';
import type { TunnelRegistry } from './registry.js';

export const CONNECT_PATH = '/tunnel/connect';
/** Largest WebSocket message from rc-tunnel (it sends one socket read per frame, at most 64 KiB). */
export const MAX_FRAME_BYTES = 1024 * 1024 + 16;
/** Bytes queued toward rc-tunnel beyond which the socket is closed (a client that stopped reading). */
export const MAX_BACKPRESSURE_BYTES = 16 * 1024 * 1024;
/** How long a connected tunnel has to answer the ping that decides whether a newcomer may replace it. */
export const PROBE_TIMEOUT_MS = 5_000;

export interface TunnelSocketOptions {
  registry: TunnelRegistry;
  /** The tunnel secret (identity.ts tunnelSecret). */
  secret: string;
  logger: Logger;
  metrics: GatewayMetrics;
  streamLimit: number;
  tunnelLimit: number;
  probeTimeoutMs: number;
  /** Tunnels, connections and attempts per instance, account and client address (limits.ts). */
  limits: TunnelLimits;
}

/** The connection of one rc-tunnel: its upgrade, its frames, its close. */
export class TunnelSocket {
  /** When a refusal was last logged, per instance or address and limit. */
  private readonly logged = new Map<string, number>();

  constructor(private readonly o: TunnelSocketOptions) {}

  /** The uWS behaviour of CONNECT_PATH. */
  behavior(): WebSocketBehavior<ConnData> {
    return {
      maxPayloadLength: MAX_FRAME_BYTES,
      // Public request bodies pause at UPLOAD_PAUSE_BYTES; a client that still lets this much
      // queue up is not reading its socket, and is closed rather than buffered without end.
      maxBackpressure: MAX_BACKPRESSURE_BYTES,
      closeOnBackpressureLimit: 1,
      idleTimeout: 60,
      sendPingsAutomatically: true,
      upgrade: (res, req, context) => this.upgrade(res, req, context),
      open: (ws) => this.open(ws),
      pong: (ws, message) => this.o.registry.of(ws)?.onPong(message),
      drain: (ws) => this.o.registry.of(ws)?.credit.resumeUploads(),
      message: (ws, message, isBinary) => this.message(ws, message, isBinary),
      close: (ws) => this.close(ws),
    };
  }

  private upgrade(uwsRes: HttpResponse, req: HttpRequest, context: us_socket_context_t): void {
    const res = track(uwsRes);
    const data = this.admit(res, req, Buffer.from(res.getRemoteAddressAsText()).toString());
    if (!data) return;
    // The slot is the connection's from here: freed by its close, or now if it never opens.
    const slot = data.slot;
    res.onAbort = () => this.o.limits.release(slot);
    const key = req.getHeader('sec-websocket-key');
    const protocol = req.getHeader('sec-websocket-protocol');
    const extensions = req.getHeader('sec-websocket-extensions');
    const upgrade = () => {
      res.aborted = true;
      res.onAbort = undefined;
      res.upgrade(data, key, protocol, extensions, context);
    };
    const current = this.o.registry.get(data.tunnelId);
    if (!current || current.closed) upgrade();
    else this.takeOver(res, current, slot, upgrade);
  }

  /** The connection's identity from its token and port, or undefined after answering a refusal. */
  private admit(res: Res, req: HttpRequest, address: string): ConnData | undefined {
    const { registry, secret, metrics, limits } = this.o;
    const busy = limits.attemptFromAddress(address);
    if (busy) {
      this.refuse(res, busy, { address });
      return undefined;
    }
    const auth = req.getHeader('authorization');
    const token = /^Bearer[ \t]+/i.test(auth) ? auth.replace(/^Bearer[ \t]+/i, '').trim() : '';
    const instanceId = token ? verifyTunnelToken(secret, token) : undefined;
    if (!instanceId) {
      answer(metrics, res, 401, token ? 'Invalid tunnel token' : 'Unauthorized: no tunnel token provided');
      return undefined;
    }
    const portText = req.getQuery('port') ?? '';
    const port = /^[1-9][0-9]{0,4}$/.test(portText) ? Number(portText) : 0;
    if (port < 1 || port > 65535) {
      answer(metrics, res, 400, 'Query parameter port must be a TCP port (1-65535)');
      return undefined;
    }
    if (!registry.running(instanceId)) {
      answer(metrics, res, 403, 'This instance is not running; destroy the notebook and create a new one');
      return undefined;
    }
    const origins = registry.origins;
    if (!origins) {
      answer(metrics, res, 503, 'Tunnels are not served yet: the tunnels listener is not started', { 'retry-after': '5' });
      return undefined;
    }
    const id = tunnelId(secret, instanceId, port);
    const accountId = registry.routes.get(instanceId)!.accountId;
    const slot = limits.admit(instanceId, accountId, address, id);
    if (isRefusal(slot)) {
      this.refuse(res, slot, { instanceId, accountId, port });
      return undefined;
    }
    return { instanceId, port, tunnelId: id, publicUrl: origins.url(id), slot };
  }

  /**
   * 429 with the limit's reason (rc-tunnel shows it) and Retry-After; logged for the operator once
   * a minute per instance or address and limit (a refused loop must not flood the platform's log).
   */
  private refuse(res: Res, refusal: TunnelRefusal, about: { instanceId?: string; address?: string } & Record<string, unknown>): void {
    const key = `${about.instanceId ?? about.address}\0${refusal.detail}`;
    const now = Date.now();
    if ((this.logged.get(key) ?? 0) <= now - 60_000) {
      if (this.logged.size >= 10_000) this.logged.clear();
      this.logged.set(key, now);
      this.o.logger.warn('tunnel refused: limit reached (logged once a minute per instance or address)', { ...about, detail: refusal.detail });
    }
    answer(this.o.metrics, res, 429, refusal.detail, { 'retry-after': String(refusal.retryAfterSec) });
  }

  /**
   * Someone else holds this tunnel. It stays unless it is dead: a reconnect after a network cut
   * finds the old connection silent and takes over; a second rc-tunnel (or anyone else holding
   * the token) while the owner answers is refused.
   */
  private takeOver(res: Res, current: Tunnel, slot: TunnelSlot, upgrade: () => void): void {
    const { registry, logger, metrics } = this.o;
    const id = current.data.tunnelId;
    void current.isAlive(this.o.probeTimeoutMs).then((alive) => {
      if (res.aborted) return;
      const now = registry.get(id);
      if (now && !now.closed && (alive || now !== current)) {
        this.o.limits.release(slot);
        res.cork(() =>
          answer(metrics, res, 409, 'This tunnel is already connected: another rc-tunnel serves this instance and port, and it answers. Stop it first.'),
        );
        return;
      }
      if (now === current) {
        logger.info('tunnel replaced: the connection did not answer', { tunnelId: id, instanceId: current.data.instanceId });
        current.end(CLOSE_REPLACED, 'Replaced: this connection did not answer a ping');
      }
      res.cork(upgrade);
    });
  }

  private open(ws: WebSocket<ConnData>): void {
    const { registry, logger } = this.o;
    const data = ws.getUserData();
    const previous = registry.add(new Tunnel(ws, data, this.o.streamLimit, this.o.tunnelLimit));
    previous?.end(CLOSE_REPLACED, 'Replaced by a newer connection');
    registry.routes.recordActivity(data.instanceId);
    const hello: Hello = {
      type: 'hello',
      tunnel_id: data.tunnelId,
      public_url: data.publicUrl,
      instance_id: data.instanceId,
      port: data.port,
      stream_window: STREAM_WINDOW_BYTES,
    };
    ws.send(JSON.stringify(hello), false);
    logger.info('tunnel connected', { tunnelId: data.tunnelId, instanceId: data.instanceId, port: data.port });
  }

  private message(ws: WebSocket<ConnData>, message: ArrayBuffer, isBinary: boolean): void {
    if (!isBinary) return; // no control messages from rc-tunnel yet
    const tunnel = this.o.registry.of(ws);
    if (!tunnel) return;
    const frame = decodeFrame(new Uint8Array(message));
    if (!frame) return;
    const s = tunnel.streams.get(frame.stream);
    if (!s) return; // a stream that ended (client went away, or reset): late frames are dropped
    const relay = s.relay;
    switch (frame.type) {
      case FrameType.ResponseHead:
        this.head(tunnel, s, frame.payload);
        return;
      case FrameType.ResponseBody:
        if (relay.status === 0) {
          // A body before its head: there is no status line to write.
          tunnel.reset(s, 'The tunnel sent a response body before its head');
          return;
        }
        tunnel.credit.body(s, frame.payload);
        return;
      case FrameType.ResponseEnd:
        tunnel.forget(s);
        if (relay.status === 0) relay.fail(502, 'The tunnel ended a response without a head');
        else relay.end();
        return;
      case FrameType.Reset:
        tunnel.forget(s);
        relay.fail(502, 'The service behind the tunnel failed the request');
        return;
    }
  }

  /** A response head for `s`: relayed when well formed and the first, else the stream is reset. */
  private head(tunnel: Tunnel, s: Stream, payload: Buffer): void {
    const relay = s.relay;
    const head = parseJson<ResponseHead>(payload);
    if (relay.status !== 0 || !head || !Number.isInteger(head.status) || head.status < 200 || head.status > 999 || !isHeaderList(head.headers)) {
      tunnel.reset(s, 'The tunnel sent a malformed response');
      return;
    }
    relay.head(head.status, head.headers);
  }

  private close(ws: WebSocket<ConnData>): void {
    this.o.limits.release(ws.getUserData().slot);
    const tunnel = this.o.registry.remove(ws);
    if (!tunnel) return;
    tunnel.onClosed();
    this.o.logger.info('tunnel disconnected', { tunnelId: tunnel.data.tunnelId, instanceId: tunnel.data.instanceId });
  }
}
