// The tunnel broker on the gateway: its parts assembled.
//
// - `GET /tunnel/connect?port=<P>` (WebSocket upgrade): rc-tunnel inside an instance connects
//   here (socket.ts: the upgrade, who may hold a tunnel, the frames of its streams).
// - Public requests: every tunnel is its own origin, served on the tunnels' own listener
//   (`listenPublic`), routed by the Host header and relayed over the tunnel's WebSocket as
//   multiplexed streams (public-side.ts; origins.ts). The old path form `/t/<id>/<path>` is
//   redirected (308) to the tunnel's origin.
// - Bounded memory: per-stream credit, PAUSE, and bounds per stream and per tunnel (credit.ts).
// - Bounded per tenant (limits.ts): live tunnels per instance and per account, connections per
//   client address, connection attempts per instance and per address per minute; refusals are
//   429 with a reason and Retry-After.
// - Tunnels count as activity: on connect, on every public request and on every ping tick while
//   connected (the routes throttle it); the live tunnels and that tick are in registry.ts.
// - With a bus, the control plane is told which tunnels are connected here (announce.ts), so the
//   instance page lists their public URLs.
import type { Bus } from '../../lib/bus.js';
import type { Config } from '../../lib/config.js';
import { listen, type Server } from '../../lib/http.js';
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { CLOSE_SHUTDOWN } from '../../lib/tunnel/protocol.js';
import { uws, type TemplatedApp } from '../../lib/uws.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { ANNOUNCE_INTERVAL_MS, TunnelAnnouncer } from './announce.js';
import { STREAM_BUFFER_BYTES, TUNNEL_BUFFER_BYTES } from './credit.js';
import { DEFAULT_TUNNEL_LIMITS, TunnelLimits, type TunnelLimitSettings } from './limits.js';
import { LOCAL_TUNNELS_HOST, TunnelOrigins } from './origins.js';
import { PublicRequests } from './public-side.js';
import { TunnelRegistry, type TunnelInfo } from './registry.js';
import { CONNECT_PATH, PROBE_TIMEOUT_MS, TunnelSocket } from './socket.js';

export { TUNNEL_ROUTE } from './answer.js';
export { STREAM_BUFFER_BYTES, STREAM_WINDOW_BYTES, TUNNEL_BUFFER_BYTES, UPLOAD_PAUSE_BYTES } from './credit.js';
export { LEGACY_PREFIX } from './public-side.js';
export type { TunnelInfo } from './registry.js';
export { DEFAULT_TUNNEL_LIMITS, type TunnelLimitSettings } from './limits.js';
export { CONNECT_PATH, MAX_BACKPRESSURE_BYTES, MAX_FRAME_BYTES, PROBE_TIMEOUT_MS } from './socket.js';

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
  /** Per instance, account and client address (DEFAULT_TUNNEL_LIMITS for what is not set). */
  limits?: Partial<TunnelLimitSettings>;
  /** The platform's bus: tunnels opened and closed here are told to the control plane (announce.ts). */
  bus?: Bus;
  /** How often the whole list of tunnels is sent on the bus (ANNOUNCE_INTERVAL_MS unless set). */
  announceIntervalMs?: number;
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
  /** The per-tenant limits and what they hold now. */
  readonly limits: TunnelLimits;
}

export function createTunnelBroker(options: TunnelBrokerOptions): TunnelBroker {
  const registry = new TunnelRegistry(options.routes, options.publicUrl ? new TunnelOrigins(options.publicUrl.replace(/\/+$/, '')) : undefined);
  if (options.bus) registry.announcer = new TunnelAnnouncer(options.bus, () => registry.reports(), options.announceIntervalMs ?? ANNOUNCE_INTERVAL_MS);
  const limits = new TunnelLimits({ ...DEFAULT_TUNNEL_LIMITS, ...definedOnly(options.limits ?? {}) });
  /** The public side (set once the plugin has the gateway context). */
  let publicSide: PublicRequests | undefined;

  const plugin: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
    const socket = new TunnelSocket({
      registry,
      secret: options.secret,
      logger: ctx.logger,
      metrics: ctx.metrics,
      streamLimit: options.streamBufferBytes ?? STREAM_BUFFER_BYTES,
      tunnelLimit: options.tunnelBufferBytes ?? TUNNEL_BUFFER_BYTES,
      probeTimeoutMs: options.probeTimeoutMs ?? PROBE_TIMEOUT_MS,
      limits,
    });
    app.ws(CONNECT_PATH, socket.behavior());
    publicSide = new PublicRequests({
      registry,
      metrics: ctx.metrics,
      maxBodyBytes: options.maxBodyBytes ?? ctx.limits.maxBodyBytes,
      headersTimeoutMs: options.headersTimeoutMs ?? ctx.upstreams.opts.headersTimeoutMs,
      uploads: ctx.uploads,
      trustProxy: ctx.trustProxy,
    });
    publicSide.redirectOn(app);
    registry.watch(options.pingIntervalMs ?? 30_000);
    registry.announcer?.start();
  };

  return {
    plugin,
    limits,
    tunnels: () => registry.info(),
    async listenPublic(host, port) {
      if (!publicSide) throw new Error('listenPublic: start the gateway with the broker plugin first');
      const app = uws().App();
      publicSide.serveOn(app);
      const server = await listen(app, host, port);
      registry.origins ??= new TunnelOrigins(`http://${LOCAL_TUNNELS_HOST}:${server.port}`);
      return server;
    },
    async close() {
      registry.close(CLOSE_SHUTDOWN, 'Gateway shutting down');
    },
  };
}

/** The entries of `o` that are set (an undefined setting keeps its default). */
function definedOnly<T extends object>(o: Partial<T>): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}

/** The broker's limits from the platform's settings. */
export function tunnelLimitsFromConfig(config: Config): Partial<TunnelLimitSettings> {
  return {
    perInstance: config.tunnelMaxPerInstance,
    perAccount: config.tunnelMaxPerAccount,
    perAddress: config.tunnelMaxPerAddress,
    connectsPerInstance: config.tunnelConnectsPerMinute,
    connectsPerAddress: config.tunnelAddressConnectsPerMinute,
  };
}
