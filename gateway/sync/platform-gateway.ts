// The parts a standalone gateway adds when it learns from a control plane (`rc gateway` with
// RC_CONTROL_PLANE_URL): the first snapshot, and the dedicated endpoints and tunnel broker over
// the feed's instance routes, so every replica serves every instance. gateway/cli.ts wires these
// into createGateway and then calls `follow`.
import type { Bus } from '../../lib/bus.js';
import type { Server } from '../../lib/http.js';
import type { Config } from '../../lib/config.js';
import type { GatewaySnapshot } from '../../lib/gateway-snapshot.js';
import type { Logger } from '../../lib/log.js';
import type { RoutePlugin } from '../context.js';
import { createDedicatedEndpoints, dedicatedInflightFromConfig } from '../dedicated/routes.js';
import type { AccountLimits } from '../gates/limits.js';
import type { KeySource } from '../auth/keys.js';
import type { Gateway } from '../server.js';
import { createTunnelBroker, tunnelLimitsFromConfig } from '../tunnel/broker.js';
import { assertTunnelsApart } from '../tunnel/origins.js';
import { PlatformFeed } from './platform-feed.js';

export interface PlatformGatewayParts {
  snapshot: GatewaySnapshot;
  keySource: KeySource;
  /** Route plugins to add to createGateway: dedicated endpoints and the tunnel broker. */
  plugins: RoutePlugin[];
  /** Starts following the control plane (events and periodic resync). */
  follow(gateway: Gateway, limits: AccountLimits): void;
  /** Starts the tunnels' own listener on RC_TUNNEL_PORT (an origin per tunnel; call after createGateway). */
  listenTunnels(host: string): Promise<Server>;
  close(): Promise<void>;
}

export async function platformGatewayParts(config: Config, o: { url: string; token: string; bus?: Bus; logger: Logger }): Promise<PlatformGatewayParts> {
  const feed = new PlatformFeed({
    url: o.url,
    token: o.token,
    bus: o.bus,
    logger: o.logger,
    resyncMs: config.gatewayResyncMs,
    activityThrottleMs: config.gatewayActivityReportMs,
  });
  let snapshot: GatewaySnapshot;
  try {
    snapshot = await feed.first();
  } catch (err) {
    feed.close();
    throw err;
  }
  const routes = feed.instanceRoutes;
  // The tunnel secret must be the control plane's (it signs the instances' identities).
  const secret = config.tunnelSecret || snapshot.tunnel.secret;
  const dedicated = createDedicatedEndpoints({
    routes,
    proxyUrl: config.proxyPublicUrl || snapshot.tunnel.proxyUrl || undefined,
    maxBodyBytes: config.gatewayMaxBodyBytes,
    inflight: dedicatedInflightFromConfig(config),
  });
  // Tunnels are served on their own listener, a host name per tunnel (gateway/tunnel/origins.ts),
  // never on the gateway's origin.
  if (config.tunnelPublicUrl) {
    assertTunnelsApart(config.tunnelPublicUrl, { RC_INSTANCE_PUBLIC_URL: config.instancePublicUrl, RC_PROXY_PUBLIC_URL: config.proxyPublicUrl });
  }
  const broker = createTunnelBroker({
    routes,
    secret,
    publicUrl: config.tunnelPublicUrl || undefined,
    maxBodyBytes: config.gatewayMaxBodyBytes,
    limits: tunnelLimitsFromConfig(config),
    // The control plane lists each instance's tunnels from what the brokers announce.
    bus: o.bus,
  });
  let tunnels: Server | undefined;
  return {
    snapshot,
    keySource: feed.keySource(snapshot),
    plugins: [dedicated.plugin, broker.plugin],
    follow: (gateway, limits) => feed.follow(gateway, limits, snapshot),
    async listenTunnels(host) {
      tunnels = await broker.listenPublic(host, config.tunnelPort);
      return tunnels;
    },
    async close() {
      feed.close();
      await broker.close();
      await tunnels?.close(1000);
      await dedicated.close();
    },
  };
}
