// The tunnel broker on the gateway.
//
// - `GET /tunnel/connect?port=<P>` (WebSocket upgrade, `Authorization: Bearer <tunnel token>`):
//   rc-tunnel inside an instance connects here. The token names the instance (identity.ts); the
//   instance must be known to the routes and pending or ready. The tunnel id is derived from
//   (instance, port), so a reconnect keeps its public URL; a newer connection for the same id
//   replaces the older one.
// - `<any method> /t/<tunnel id>/<path>`: public requests, relayed over the tunnel's WebSocket as
//   multiplexed streams (protocol.ts). No authentication here: that is the customer's. Served on
//   the tunnels' own listener (`listenPublic`, its own origin: a tunnelled app's scripts cannot
//   read the gateway's or the platform's answers), or on the gateway itself when none is started.
//   Platform credentials are removed either way (forwardedHeaders, lib/instance-credentials.ts).
// - Tunnels count as activity: on connect, on every public request and on every ping tick while
//   connected (the routes throttle it).
import { CONFLICTING_LENGTH, declaredLength, listen, sendJson, track, type Res, type Server } from '../../lib/http.js';
import type { us_socket_context_t } from 'uWebSockets.js';
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp, type WebSocket } from '../../lib/uws.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { NO_MODEL } from '../metrics.js';
import { forwardedHeaders, ResponseRelay } from '../dedicated/forward.js';
import type { InstanceRoutes } from '../dedicated/instance-routes.js';
import { tunnelId, verifyTunnelToken } from './identity.js';
import { decodeFrame, encodeFrame, FrameType, isHeaderList, parseJson, type Hello, type RequestHead, type ResponseHead } from './protocol.js';

export const TUNNEL_ROUTE = 'tunnel';
export const CONNECT_PATH = '/tunnel/connect';
export const PUBLIC_PREFIX = '/t/';

/** WebSocket close codes the broker uses (rc-tunnel stops reconnecting on 4003). */
export const CLOSE_REPLACED = 4000;
export const CLOSE_INSTANCE_GONE = 4003;
export const CLOSE_SHUTDOWN = 1001;

export interface TunnelBrokerOptions {
  routes: InstanceRoutes;
  /** The tunnel secret (identity.ts tunnelSecret). */
  secret: string;
  /**
   * Public base URL of tunnels. Default: the URL of the listener started by `listenPublic`, else
   * (tunnels on the gateway) from the connect request's Host.
   */
  publicUrl?: string;
  /** Largest public request body (413 beyond); default: the gateway's limit. */
  maxBodyBytes?: number;
  /** Wait for the response head of a public request. */
  headersTimeoutMs?: number;
  /** How often connected tunnels report activity and are checked against their instance. */
  pingIntervalMs?: number;
}

export interface TunnelInfo {
  tunnelId: string;
  instanceId: string;
  port: number;
  publicUrl: string;
  streams: number;
}

export interface TunnelBroker {
  plugin: RoutePlugin;
  /** Connected tunnels. */
  tunnels(): TunnelInfo[];
  /**
   * Serves public tunnel requests on their own listener (call after the gateway started with
   * `plugin`); the gateway then redirects `/t/...` there (308).
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

class Tunnel {
  closed = false;
  private nextStream = 0;
  readonly streams = new Map<number, ResponseRelay>();

  constructor(
    readonly ws: WebSocket<ConnData>,
    readonly data: ConnData,
  ) {}

  send(type: FrameType, stream: number, payload?: Uint8Array | string): void {
    if (this.closed) return;
    this.ws.send(encodeFrame(type, stream, payload), true);
  }

  /** Closes the socket; the close handler then fails the streams still open. */
  end(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.ws.end(code, reason);
    } catch {
      // closed already
    }
  }

  open(relay: ResponseRelay): number {
    this.nextStream = (this.nextStream + 1) >>> 0 || 1;
    this.streams.set(this.nextStream, relay);
    return this.nextStream;
  }
}

export function createTunnelBroker(options: TunnelBrokerOptions): TunnelBroker {
  const { routes, secret } = options;
  /** The current connection of each tunnel id. */
  const tunnels = new Map<string, Tunnel>();
  /** Every open connection (a replaced one stays here until its socket closes). */
  const live = new Map<WebSocket<ConnData>, Tunnel>();
  let ticker: NodeJS.Timeout | undefined;
  /** Registers the public `/t/*` handler on an app (set once the plugin has the gateway context). */
  let servePublic: ((app: TemplatedApp) => void) | undefined;
  /** Base URL of the tunnels' own listener, once started. */
  let publicBase: string | undefined = options.publicUrl?.replace(/\/+$/, '');
  let separate = false;

  const plugin: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
    const maxBody = options.maxBodyBytes ?? ctx.limits.maxBodyBytes;
    const headersTimeoutMs = options.headersTimeoutMs ?? ctx.upstreams.opts.headersTimeoutMs;
    const answer = (res: Res, status: number, detail: string, headers?: Record<string, string>) => {
      ctx.metrics.request(TUNNEL_ROUTE, NO_MODEL, status);
      sendJson(res, status, { detail }, headers);
    };

    app.ws<ConnData>(CONNECT_PATH, {
      maxPayloadLength: 4 * 1024 * 1024,
      // Bodies are bounded by maxBodyBytes per stream; never drop a frame for backpressure.
      maxBackpressure: 512 * 1024 * 1024,
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
        const host = req.getHeader('host');
        const proto = req.getHeader('x-forwarded-proto') === 'https' ? 'https' : 'http';
        const id = tunnelId(secret, instanceId, port);
        const base = (publicBase ?? `${proto}://${host}`).replace(/\/+$/, '');
        const data: ConnData = { instanceId, port, tunnelId: id, publicUrl: `${base}${PUBLIC_PREFIX}${id}/` };
        res.aborted = true;
        res.upgrade(data, req.getHeader('sec-websocket-key'), req.getHeader('sec-websocket-protocol'), req.getHeader('sec-websocket-extensions'), context);
      },
      open(ws) {
        const data = ws.getUserData();
        const previous = tunnels.get(data.tunnelId);
        const tunnel = new Tunnel(ws, data);
        tunnels.set(data.tunnelId, tunnel);
        live.set(ws, tunnel);
        previous?.end(CLOSE_REPLACED, 'Replaced by a newer connection');
        routes.recordActivity(data.instanceId);
        const hello: Hello = { type: 'hello', tunnel_id: data.tunnelId, public_url: data.publicUrl, instance_id: data.instanceId, port: data.port };
        ws.send(JSON.stringify(hello), false);
        ctx.logger.info('tunnel connected', { tunnelId: data.tunnelId, instanceId: data.instanceId, port: data.port });
      },
      message(ws, message, isBinary) {
        if (!isBinary) return; // no control messages from rc-tunnel yet
        const tunnel = live.get(ws);
        if (!tunnel) return;
        const frame = decodeFrame(new Uint8Array(message));
        if (!frame) return;
        const relay = tunnel.streams.get(frame.stream);
        if (!relay) return; // a stream that ended (client went away): late frames are dropped
        switch (frame.type) {
          case FrameType.ResponseHead: {
            const head = parseJson<ResponseHead>(frame.payload);
            if (!head || !Number.isInteger(head.status) || head.status < 200 || head.status > 999 || !isHeaderList(head.headers)) {
              tunnel.send(FrameType.Reset, frame.stream);
              tunnel.streams.delete(frame.stream);
              relay.fail(502, 'The tunnel sent a malformed response');
              return;
            }
            relay.head(head.status, head.headers);
            return;
          }
          case FrameType.ResponseBody:
            if (relay.status === 0) {
              // A body before its head: there is no status line to write.
              tunnel.send(FrameType.Reset, frame.stream);
              tunnel.streams.delete(frame.stream);
              relay.fail(502, 'The tunnel sent a response body before its head');
              return;
            }
            // The message buffer is only valid during this callback: copy the chunk.
            if (!relay.data(Buffer.from(frame.payload))) tunnel.send(FrameType.Pause, frame.stream);
            return;
          case FrameType.ResponseEnd:
            tunnel.streams.delete(frame.stream);
            if (relay.status === 0) relay.fail(502, 'The tunnel ended a response without a head');
            else relay.end();
            return;
          case FrameType.Reset:
            tunnel.streams.delete(frame.stream);
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
        tunnel.closed = true;
        for (const relay of tunnel.streams.values()) relay.fail(502, 'The tunnel disconnected');
        tunnel.streams.clear();
        ctx.logger.info('tunnel disconnected', { tunnelId: data.tunnelId, instanceId: data.instanceId });
      },
    });

    const publicHandler = (uwsRes: HttpResponse, req: HttpRequest): void => {
      const res = track(uwsRes);
      const url = req.getUrl();
      const slash = url.indexOf('/', PUBLIC_PREFIX.length);
      const id = url.slice(PUBLIC_PREFIX.length, slash < 0 ? undefined : slash);
      const tunnel = tunnels.get(id);
      if (!tunnel || tunnel.closed) {
        answer(res, 404, 'No tunnel is connected at this address');
        return;
      }
      const query = req.getQuery();
      if (slash < 0) {
        // `/t/<id>` -> `/t/<id>/`, so relative links of the service resolve below the prefix.
        answer(res, 308, 'Moved', { location: `${url}/${query ? `?${query}` : ''}` });
        return;
      }
      const instanceId = tunnel.data.instanceId;
      routes.recordActivity(instanceId);
      const method = req.getCaseSensitiveMethod().toUpperCase();
      const headers = forwardedHeaders(req, NO_DROP);
      headers.push('x-forwarded-prefix', `${PUBLIC_PREFIX}${id}`);
      const head: RequestHead = { method, path: query ? `${url.slice(slash)}?${query}` : url.slice(slash), headers };
      let stream = 0;
      let timer: NodeJS.Timeout | undefined;
      const relay = new ResponseRelay(res, method, (status) => {
        if (timer) clearTimeout(timer);
        tunnel.streams.delete(stream);
        ctx.metrics.request(TUNNEL_ROUTE, NO_MODEL, status);
      });
      stream = tunnel.open(relay);
      relay.resume = () => tunnel.send(FrameType.Resume, stream);
      relay.abortSource = () => tunnel.send(FrameType.Reset, stream);
      timer = setTimeout(() => {
        if (relay.status !== 0 || relay.finished) return;
        tunnel.send(FrameType.Reset, stream);
        relay.fail(504, 'The service behind the tunnel did not answer in time');
      }, headersTimeoutMs);
      timer.unref();
      tunnel.send(FrameType.RequestHead, stream, JSON.stringify(head));
      const length = declaredLength(req);
      if (length === CONFLICTING_LENGTH) {
        tunnel.send(FrameType.Reset, stream);
        relay.fail(400, 'Conflicting Content-Length headers');
        return;
      }
      if ((length === '' || length === '0') && req.getHeader('transfer-encoding') === '') {
        tunnel.send(FrameType.RequestEnd, stream);
        return;
      }
      if (length !== '' && Number(length) > maxBody) {
        tunnel.send(FrameType.Reset, stream);
        relay.fail(413, `Request body exceeds ${maxBody} bytes`);
        return;
      }
      let size = 0;
      res.onData((chunk, isLast) => {
        if (relay.finished) return;
        size += chunk.byteLength;
        if (size > maxBody) {
          tunnel.send(FrameType.Reset, stream);
          relay.fail(413, `Request body exceeds ${maxBody} bytes`);
          return;
        }
        if (chunk.byteLength) tunnel.send(FrameType.RequestBody, stream, new Uint8Array(chunk));
        if (isLast) tunnel.send(FrameType.RequestEnd, stream);
      });
    };
    servePublic = (target) => target.any('/t/*', publicHandler);
    // Until (unless) the tunnels get their own listener, the gateway serves them; after, it
    // sends browsers there.
    app.any('/t/*', (uwsRes: HttpResponse, req: HttpRequest) => {
      if (!separate) return publicHandler(uwsRes, req);
      const query = req.getQuery();
      answer(track(uwsRes), 308, 'Tunnels are served on their own origin', { location: `${publicBase}${req.getUrl()}${query ? `?${query}` : ''}` });
    });

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
      }));
    },
    async listenPublic(host, port) {
      if (!servePublic) throw new Error('listenPublic: start the gateway with the broker plugin first');
      const app = uws().App();
      servePublic(app);
      app.any('/*', (res: HttpResponse) => sendJson(track(res), 404, { detail: 'Not Found' }));
      const server = await listen(app, host, port);
      publicBase ??= server.url;
      separate = true;
      return server;
    },
    async close() {
      if (ticker) clearInterval(ticker);
      for (const t of [...live.values()]) t.end(CLOSE_SHUTDOWN, 'Gateway shutting down');
    },
  };
}

const NO_DROP: ReadonlySet<string> = new Set();
