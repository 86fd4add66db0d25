// The tunnel broker on the gateway.
//
// - `GET /tunnel/connect?port=<P>` (WebSocket upgrade, `Authorization: Bearer <tunnel token>`):
//   rc-tunnel inside an instance connects here. The token names the instance (identity.ts); the
//   instance must be known to the routes and pending or ready. The tunnel id is derived from
//   (instance, port), so a reconnect keeps its public URL. A live tunnel is never displaced: a
//   second connection for the same id is refused (409) while the first answers a ping, and
//   replaces it only when it does not (a reconnect after a network cut).
// - Public requests: every tunnel is its own origin, `<scheme>://<tunnel id>.<tunnels host>/`
//   (origins.ts), served on the tunnels' own listener (`listenPublic`), routed by the Host
//   header and relayed over the tunnel's WebSocket as multiplexed streams (protocol.ts). No
//   authentication here: that is the customer's. The old path form `/t/<id>/<path>` (on that
//   listener's bare host and on the gateway) is redirected (308) to the tunnel's origin; tenant
//   content is never served on a shared origin. Platform credentials are removed
//   (forwardedHeaders, lib/instance-credentials.ts), and so is Service-Worker-Allowed on the way back.
// - Bounded memory: response bodies flow against per-stream credit (WINDOW, `stream_window` in
//   the hello) returned as the public client takes the bytes; a public client that does not read
//   also makes the broker send PAUSE (for clients without windows). Whatever the tunnel client
//   does, a full stream holding more than `streamBufferBytes` is reset, and while a tunnel's
//   streams hold more than `tunnelBufferBytes` the largest are reset. Public request bodies pause
//   while the tunnel's socket has more than UPLOAD_PAUSE_BYTES queued.
// - Tunnels count as activity: on connect, on every public request and on every ping tick while
//   connected (the routes throttle it).
import { CONFLICTING_LENGTH, declaredLength, listen, sendJson, track, type Res, type Server } from '../../lib/http.js';
import type { us_socket_context_t } from 'uWebSockets.js';
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp, type WebSocket } from '../../lib/uws.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { NO_MODEL } from '../metrics.js';
import { forwardedHeaders, ResponseRelay } from '../../lib/relay/forward.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { tunnelId, verifyTunnelToken } from '../../lib/tunnel/identity.js';
import { LOCAL_TUNNELS_HOST, TUNNEL_ID, TunnelOrigins } from './origins.js';
import {
  CLOSE_INSTANCE_GONE,
  CLOSE_REPLACED,
  CLOSE_SHUTDOWN,
  decodeFrame,
  encodeFrame,
  encodeWindow,
  FrameType,
  isHeaderList,
  parseJson,
  type Hello,
  type RequestHead,
  type ResponseHead,
} from '../../lib/tunnel/protocol.js';

export const TUNNEL_ROUTE = 'tunnel';
export const CONNECT_PATH = '/tunnel/connect';
/** The old, shared-origin path form of tunnel URLs: now only redirected to the tunnel's origin. */
export const LEGACY_PREFIX = '/t/';

/** Response body bytes a stream may send ahead of the broker's WINDOW grants (rc-tunnel with windows keeps to it). */
export const STREAM_WINDOW_BYTES = 1024 * 1024;
/**
 * Bytes one stream may hold once its public client stops reading (after PAUSE); past it the
 * stream is reset. A client that keeps to its window holds at most the window and the bytes
 * granted just before the public client filled up (one frame), well below it.
 */
export const STREAM_BUFFER_BYTES = 2 * 1024 * 1024;
/** Bytes all streams of one tunnel may hold; past it the largest streams are reset. */
export const TUNNEL_BUFFER_BYTES = 16 * 1024 * 1024;
/** Largest WebSocket message from rc-tunnel (it sends one socket read per frame, at most 64 KiB). */
export const MAX_FRAME_BYTES = 1024 * 1024 + 16;
/** Bytes queued toward rc-tunnel beyond which public request bodies pause until the socket drains. */
export const UPLOAD_PAUSE_BYTES = 1024 * 1024;
/** Bytes queued toward rc-tunnel beyond which the socket is closed (a client that stopped reading). */
export const MAX_BACKPRESSURE_BYTES = 16 * 1024 * 1024;
/** How long a connected tunnel has to answer the ping that decides whether a newcomer may replace it. */
export const PROBE_TIMEOUT_MS = 5_000;

export interface TunnelBrokerOptions {
  routes: InstanceRoutes;
  /** The tunnel secret (identity.ts tunnelSecret). */
  secret: string;
  /**
   * Public origin under which each tunnel gets a host name, `https://tunnels.example.net` ->
   * `https://<tunnel id>.tunnels.example.net/` (RC_TUNNEL_PUBLIC_URL). Default:
   * `http://localhost:<port of listenPublic>`. Tunnels are refused (503) until one is known.
   */
  publicUrl?: string;
  /** Largest public request body (413 beyond); default: the gateway's limit. */
  maxBodyBytes?: number;
  /** Wait for the response head of a public request. */
  headersTimeoutMs?: number;
  /** How often connected tunnels report activity and are checked against their instance. */
  pingIntervalMs?: number;
  /** STREAM_BUFFER_BYTES unless set. */
  streamBufferBytes?: number;
  /** TUNNEL_BUFFER_BYTES unless set. */
  tunnelBufferBytes?: number;
  /** PROBE_TIMEOUT_MS unless set. */
  probeTimeoutMs?: number;
}

export interface TunnelInfo {
  tunnelId: string;
  instanceId: string;
  port: number;
  publicUrl: string;
  streams: number;
  /** Response bytes its streams hold for public clients (an upper bound). */
  heldBytes: number;
  /** Streams reset because their public client did not read (per-stream or per-tunnel bound). */
  overflowResets: number;
}

export interface TunnelBroker {
  plugin: RoutePlugin;
  /** Connected tunnels. */
  tunnels(): TunnelInfo[];
  /**
   * Serves public tunnel requests on their own listener, by Host (call after the gateway started
   * with `plugin`); until then tunnel connections are refused unless `publicUrl` is set.
   */
  listenPublic(host: string, port: number): Promise<Server>;
  /** Closes every tunnel connection. */
  close(): Promise<void>;
}

interface ConnData {
  instanceId: string;
  port: number;
  tunnelId: string;
  publicUrl: string;
}

/** One public request relayed over a tunnel. */
class Stream {
  /** The broker sent PAUSE (the public client is full) and no RESUME since. */
  paused = false;
  /** The public request body is paused (the tunnel's socket is backed up). */
  uploadPaused = false;
  /** Response bytes held for the public client when last counted (part of the tunnel's total). */
  held = 0;
  /** Body bytes received while the public client was full: credit returned (WINDOW) when it drains. */
  owed = 0;

  constructor(
    readonly id: number,
    readonly relay: ResponseRelay,
    readonly res: Res,
  ) {}
}

class Tunnel {
  closed = false;
  private nextStream = 0;
  readonly streams = new Map<number, Stream>();
  /** Sum of the streams' `held`. */
  held = 0;
  overflowResets = 0;
  private probe: { token: string; done: (alive: boolean) => void; result: Promise<boolean> } | undefined;
  private probes = 0;

  constructor(
    readonly ws: WebSocket<ConnData>,
    readonly data: ConnData,
    private readonly streamLimit: number,
    private readonly tunnelLimit: number,
  ) {}

  send(type: FrameType, stream: number, payload?: Uint8Array | string): void {
    if (this.closed) return;
    try {
      this.ws.send(encodeFrame(type, stream, payload), true);
    } catch {
      // closed under us (backpressure limit): the close handler fails the streams
    }
  }

  /** Closes the socket; the close handler then fails the streams still open. */
  end(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.settleProbe(false);
    try {
      this.ws.end(code, reason);
    } catch {
      // closed already
    }
  }

  open(relay: ResponseRelay, res: Res): Stream {
    do this.nextStream = (this.nextStream + 1) >>> 0 || 1;
    while (this.streams.has(this.nextStream));
    const s = new Stream(this.nextStream, relay, res);
    this.streams.set(s.id, s);
    return s;
  }

  /** The stream has ended, failed or was abandoned: its bytes no longer count. */
  forget(s: Stream): void {
    if (this.streams.get(s.id) !== s) return;
    this.streams.delete(s.id);
    this.held -= s.held;
    s.held = 0;
  }

  /** Resets a stream both ways: RESET to the tunnel client; `status` with `{detail}`, or a cut connection once the response started, to the public client. */
  reset(s: Stream, detail: string, status = 502): void {
    this.forget(s);
    this.send(FrameType.Reset, s.id);
    s.relay.fail(status, detail);
  }

  /**
   * Recounts what a stream holds after it took a chunk or drained, and enforces the bounds:
   * a paused stream past `streamLimit` is reset; while the tunnel's total is past `tunnelLimit`
   * its largest stream is reset.
   */
  account(s: Stream): void {
    if (this.streams.get(s.id) !== s) return;
    const now = s.relay.heldBytes;
    this.held += now - s.held;
    s.held = now;
    if (s.paused && now > this.streamLimit) {
      this.overflowResets++;
      this.reset(s, `The public client is not reading and the tunnel sent more than ${this.streamLimit} bytes ahead of it`);
    }
    while (this.held > this.tunnelLimit) {
      let largest: Stream | undefined;
      for (const x of this.streams.values()) if (!largest || x.held > largest.held) largest = x;
      if (!largest) break;
      this.overflowResets++;
      this.reset(largest, `The tunnel holds more than ${this.tunnelLimit} bytes for clients that are not reading`);
    }
  }

  /** Public request bodies that paused because the socket to the tunnel client was backed up flow again. */
  resumeUploads(): void {
    for (const s of this.streams.values()) {
      if (!s.uploadPaused) continue;
      s.uploadPaused = false;
      if (!s.res.aborted && !s.relay.finished) s.res.resume();
    }
  }

  /** True when the connection answers a ping within `timeoutMs` (one probe at a time, shared). */
  isAlive(timeoutMs: number): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    if (this.probe) return this.probe.result;
    const token = `rc-probe-${++this.probes}`;
    let done!: (alive: boolean) => void;
    const result = new Promise<boolean>((r) => (done = r));
    const timer = setTimeout(() => this.settleProbe(false), timeoutMs);
    timer.unref();
    this.probe = {
      token,
      result,
      done: (alive) => {
        clearTimeout(timer);
        done(alive);
      },
    };
    try {
      this.ws.ping(token);
    } catch {
      this.settleProbe(false);
    }
    return result;
  }

  /** A pong arrived: settles the probe it answers. */
  onPong(message: ArrayBuffer): void {
    if (this.probe && Buffer.from(message).toString() === this.probe.token) this.settleProbe(true);
  }

  /** The socket closed (any reason): nothing more is sent, a pending probe fails. */
  onClosed(): void {
    this.closed = true;
    this.settleProbe(false);
  }

  private settleProbe(alive: boolean): void {
    const p = this.probe;
    if (!p) return;
    this.probe = undefined;
    p.done(alive);
  }
}

export function createTunnelBroker(options: TunnelBrokerOptions): TunnelBroker {
  const { routes, secret } = options;
  const streamLimit = options.streamBufferBytes ?? STREAM_BUFFER_BYTES;
  const tunnelLimit = options.tunnelBufferBytes ?? TUNNEL_BUFFER_BYTES;
  const probeTimeoutMs = options.probeTimeoutMs ?? PROBE_TIMEOUT_MS;
  /** The current connection of each tunnel id. */
  const tunnels = new Map<string, Tunnel>();
  /** Every open connection (a replaced one stays here until its socket closes). */
  const live = new Map<WebSocket<ConnData>, Tunnel>();
  let ticker: NodeJS.Timeout | undefined;
  /** Registers the public handler on an app (set once the plugin has the gateway context). */
  let servePublic: ((app: TemplatedApp) => void) | undefined;
  /** Tunnel origins: from `publicUrl` now, else once the tunnels' listener is started. */
  let origins: TunnelOrigins | undefined = options.publicUrl ? new TunnelOrigins(options.publicUrl.replace(/\/+$/, '')) : undefined;

  const plugin: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
    const maxBody = options.maxBodyBytes ?? ctx.limits.maxBodyBytes;
    const headersTimeoutMs = options.headersTimeoutMs ?? ctx.upstreams.opts.headersTimeoutMs;
    const answer = (res: Res, status: number, detail: string, headers?: Record<string, string>) => {
      ctx.metrics.request(TUNNEL_ROUTE, NO_MODEL, status);
      sendJson(res, status, { detail }, headers);
    };

    app.ws<ConnData>(CONNECT_PATH, {
      maxPayloadLength: MAX_FRAME_BYTES,
      // Public request bodies pause at UPLOAD_PAUSE_BYTES; a client that still lets this much
      // queue up is not reading its socket, and is closed rather than buffered without end.
      maxBackpressure: MAX_BACKPRESSURE_BYTES,
      closeOnBackpressureLimit: 1,
      idleTimeout: 60,
      sendPingsAutomatically: true,
      upgrade(uwsRes: HttpResponse, req: HttpRequest, context: us_socket_context_t) {
        const res = track(uwsRes);
        const auth = req.getHeader('authorization');
        const token = /^Bearer[ \t]+/i.test(auth) ? auth.replace(/^Bearer[ \t]+/i, '').trim() : '';
        const instanceId = token ? verifyTunnelToken(secret, token) : undefined;
        if (!instanceId) {
          answer(res, 401, token ? 'Invalid tunnel token' : 'Unauthorized: no tunnel token provided');
          return;
        }
        const portText = req.getQuery('port') ?? '';
        const port = /^[1-9][0-9]{0,4}$/.test(portText) ? Number(portText) : 0;
        if (port < 1 || port > 65535) {
          answer(res, 400, 'Query parameter port must be a TCP port (1-65535)');
          return;
        }
        const route = routes.get(instanceId);
        if (!route || (route.status !== 'pending' && route.status !== 'ready')) {
          answer(res, 403, 'This instance is not running; destroy the notebook and create a new one');
          return;
        }
        if (!origins) {
          answer(res, 503, 'Tunnels are not served yet: the tunnels listener is not started', { 'retry-after': '5' });
          return;
        }
        const id = tunnelId(secret, instanceId, port);
        const data: ConnData = { instanceId, port, tunnelId: id, publicUrl: origins.url(id) };
        const key = req.getHeader('sec-websocket-key');
        const protocol = req.getHeader('sec-websocket-protocol');
        const extensions = req.getHeader('sec-websocket-extensions');
        const upgrade = () => {
          res.aborted = true;
          res.upgrade(data, key, protocol, extensions, context);
        };
        const current = tunnels.get(id);
        if (!current || current.closed) {
          upgrade();
          return;
        }
        // Someone else holds this tunnel. It stays unless it is dead: a reconnect after a
        // network cut finds the old connection silent and takes over; a second rc-tunnel (or
        // anyone else holding the token) while the owner answers is refused.
        void current.isAlive(probeTimeoutMs).then((alive) => {
          if (res.aborted) return;
          const now = tunnels.get(id);
          if (now && !now.closed && (alive || now !== current)) {
            res.cork(() =>
              answer(res, 409, 'This tunnel is already connected: another rc-tunnel serves this instance and port, and it answers. Stop it first.'),
            );
            return;
          }
          if (now === current) {
            ctx.logger.info('tunnel replaced: the connection did not answer', { tunnelId: id, instanceId });
            current.end(CLOSE_REPLACED, 'Replaced: this connection did not answer a ping');
          }
          res.cork(upgrade);
        });
      },
      open(ws) {
        const data = ws.getUserData();
        const previous = tunnels.get(data.tunnelId);
        const tunnel = new Tunnel(ws, data, streamLimit, tunnelLimit);
        tunnels.set(data.tunnelId, tunnel);
        live.set(ws, tunnel);
        previous?.end(CLOSE_REPLACED, 'Replaced by a newer connection');
        routes.recordActivity(data.instanceId);
        const hello: Hello = {
          type: 'hello',
          tunnel_id: data.tunnelId,
          public_url: data.publicUrl,
          instance_id: data.instanceId,
          port: data.port,
          stream_window: STREAM_WINDOW_BYTES,
        };
        ws.send(JSON.stringify(hello), false);
        ctx.logger.info('tunnel connected', { tunnelId: data.tunnelId, instanceId: data.instanceId, port: data.port });
      },
      pong(ws, message) {
        live.get(ws)?.onPong(message);
      },
      drain(ws) {
        if (ws.getBufferedAmount() < UPLOAD_PAUSE_BYTES) live.get(ws)?.resumeUploads();
      },
      message(ws, message, isBinary) {
        if (!isBinary) return; // no control messages from rc-tunnel yet
        const tunnel = live.get(ws);
        if (!tunnel) return;
        const frame = decodeFrame(new Uint8Array(message));
        if (!frame) return;
        const s = tunnel.streams.get(frame.stream);
        if (!s) return; // a stream that ended (client went away, or reset): late frames are dropped
        const relay = s.relay;
        switch (frame.type) {
          case FrameType.ResponseHead: {
            const head = parseJson<ResponseHead>(frame.payload);
            if (relay.status !== 0 || !head || !Number.isInteger(head.status) || head.status < 200 || head.status > 999 || !isHeaderList(head.headers)) {
              tunnel.reset(s, 'The tunnel sent a malformed response');
              return;
            }
            relay.head(head.status, head.headers);
            return;
          }
          case FrameType.ResponseBody:
            if (relay.status === 0) {
              // A body before its head: there is no status line to write.
              tunnel.reset(s, 'The tunnel sent a response body before its head');
              return;
            }
            // The message buffer is only valid during this callback: copy the chunk. Taken
            // while the public client keeps up: its credit goes straight back; otherwise it is
            // owed until the client drains.
            if (relay.data(Buffer.from(frame.payload))) tunnel.send(FrameType.Window, s.id, encodeWindow(frame.payload.length));
            else {
              s.owed += frame.payload.length;
              if (!s.paused) {
                s.paused = true;
                tunnel.send(FrameType.Pause, s.id);
              }
            }
            tunnel.account(s);
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
      },
      close(ws) {
        const tunnel = live.get(ws);
        if (!tunnel) return;
        live.delete(ws);
        const data = tunnel.data;
        if (tunnels.get(data.tunnelId) === tunnel) tunnels.delete(data.tunnelId);
        tunnel.onClosed();
        const open = [...tunnel.streams.values()];
        tunnel.streams.clear();
        tunnel.held = 0;
        for (const s of open) s.relay.fail(502, 'The tunnel disconnected');
        ctx.logger.info('tunnel disconnected', { tunnelId: data.tunnelId, instanceId: data.instanceId });
      },
    });

    /** One public request to the tunnel `id` (its Host named it); the service sees the path as it came. */
    const serveTunnel = (res: Res, req: HttpRequest, id: string): void => {
      const tunnel = tunnels.get(id);
      if (!tunnel || tunnel.closed) {
        answer(res, 404, 'No tunnel is connected at this address');
        return;
      }
      routes.recordActivity(tunnel.data.instanceId);
      const method = req.getCaseSensitiveMethod().toUpperCase();
      const query = req.getQuery();
      const url = req.getUrl();
      const head: RequestHead = { method, path: query ? `${url}?${query}` : url, headers: forwardedHeaders(req, DROP_REQUEST_HEADERS) };
      let timer: NodeJS.Timeout | undefined;
      // Assigned once the relay that refers to it exists.
      let s: Stream;
      const relay = new ResponseRelay(res, method, (status) => {
        if (timer) clearTimeout(timer);
        tunnel.forget(s);
        ctx.metrics.request(TUNNEL_ROUTE, NO_MODEL, status);
      });
      s = tunnel.open(relay, res);
      relay.resume = () => {
        s.paused = false;
        if (s.owed > 0) tunnel.send(FrameType.Window, s.id, encodeWindow(s.owed));
        s.owed = 0;
        tunnel.send(FrameType.Resume, s.id);
        tunnel.account(s);
      };
      relay.abortSource = () => tunnel.send(FrameType.Reset, s.id);
      timer = setTimeout(() => {
        if (relay.status !== 0 || relay.finished) return;
        tunnel.reset(s, 'The service behind the tunnel did not answer in time', 504);
      }, headersTimeoutMs);
      timer.unref();
      tunnel.send(FrameType.RequestHead, s.id, JSON.stringify(head));
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
      res.onData((chunk, isLast) => {
        if (relay.finished) return;
        size += chunk.byteLength;
        if (size > maxBody) {
          tunnel.reset(s, `Request body exceeds ${maxBody} bytes`, 413);
          return;
        }
        if (chunk.byteLength) tunnel.send(FrameType.RequestBody, s.id, new Uint8Array(chunk));
        if (isLast) tunnel.send(FrameType.RequestEnd, s.id);
        else if (!tunnel.closed && !s.uploadPaused && tunnel.ws.getBufferedAmount() > UPLOAD_PAUSE_BYTES) {
          s.uploadPaused = true;
          res.pause();
        }
      });
    };

    /** `/t/<id>[/<path>]`, the old shared-origin form: 308 to the tunnel's own origin. */
    const redirectLegacy = (res: Res, req: HttpRequest): void => {
      const url = req.getUrl();
      const slash = url.indexOf('/', LEGACY_PREFIX.length);
      const id = url.slice(LEGACY_PREFIX.length, slash < 0 ? undefined : slash);
      if (!origins || !TUNNEL_ID.test(id)) {
        answer(res, 404, 'No tunnel is connected at this address');
        return;
      }
      const query = req.getQuery();
      const rest = slash < 0 ? '/' : url.slice(slash);
      answer(res, 308, 'Tunnels are served on their own origin', { location: `${origins.origin(id)}${rest}${query ? `?${query}` : ''}` });
    };

    servePublic = (target) =>
      target.any('/*', (uwsRes: HttpResponse, req: HttpRequest) => {
        const res = track(uwsRes);
        const id = origins?.idOf(req.getHeader('host'));
        if (id) serveTunnel(res, req, id);
        else if (req.getUrl().startsWith(LEGACY_PREFIX)) redirectLegacy(res, req);
        else answer(res, 404, 'No tunnel is connected at this address');
      });
    app.any(`${LEGACY_PREFIX}*`, (uwsRes: HttpResponse, req: HttpRequest) => redirectLegacy(track(uwsRes), req));

    ticker = setInterval(() => {
      for (const t of tunnels.values()) {
        const route = routes.get(t.data.instanceId);
        if (!route || (route.status !== 'pending' && route.status !== 'ready')) {
          t.end(CLOSE_INSTANCE_GONE, 'The instance is no longer running');
          continue;
        }
        routes.recordActivity(t.data.instanceId);
      }
    }, options.pingIntervalMs ?? 30_000);
    ticker.unref();
  };

  return {
    plugin,
    tunnels() {
      return [...tunnels.values()].map((t) => ({
        tunnelId: t.data.tunnelId,
        instanceId: t.data.instanceId,
        port: t.data.port,
        publicUrl: t.data.publicUrl,
        streams: t.streams.size,
        heldBytes: t.held,
        overflowResets: t.overflowResets,
      }));
    },
    async listenPublic(host, port) {
      if (!servePublic) throw new Error('listenPublic: start the gateway with the broker plugin first');
      const app = uws().App();
      servePublic(app);
      const server = await listen(app, host, port);
      origins ??= new TunnelOrigins(`http://${LOCAL_TUNNELS_HOST}:${server.port}`);
      return server;
    },
    async close() {
      if (ticker) clearInterval(ticker);
      for (const t of [...live.values()]) t.end(CLOSE_SHUTDOWN, 'Gateway shutting down');
    },
  };
}

/**
 * Request headers the broker does not pass on (besides platform credentials): the app is served
 * at the root of its own origin, so a client's X-Forwarded-Prefix would only mislead it.
 */
const DROP_REQUEST_HEADERS: ReadonlySet<string> = new Set(['x-forwarded-prefix']);
