// The model gateway `npm start` embeds, with what rides on it: dedicated endpoints, the tunnel
// broker, and the tunnels' own listener (`<tunnel id>.<tunnels host>`, an origin per tunnel). Keys
// and the catalog come from the control plane's store, the catalog kept current by bus events.
import type { Bus } from '../lib/bus.js';
import type { Config, ModelEntry } from '../lib/config.js';
import { namingSetting } from '../lib/errors.js';
import type { Server } from '../lib/http.js';
import type { Logger } from '../lib/log.js';
import type { Store } from '../control-plane/store.js';
import { storeKeySource } from '../control-plane/sources.js';
import { createDedicatedEndpoints, dedicatedInflightFromConfig } from '../gateway/dedicated/routes.js';
import type { InstanceRoutes } from '../lib/instance-routes.js';
import { createTunnelBroker, tunnelLimitsFromConfig } from '../gateway/tunnel/broker.js';
import { assertTunnelsApart } from '../gateway/tunnel/origins.js';
import type { LimitGate } from '../gateway/gates/index.js';
import { createGateway, type Gateway } from '../gateway/server.js';
import { gatewayOptionsFromConfig } from '../gateway/cli.js';
import type { Closers } from './closers.js';

export interface EmbeddedGatewayDeps {
  config: Config;
  /** The instances' routes (dedicated endpoints and tunnels reach instances through them). */
  routes: InstanceRoutes;
  /** The tunnel identities' secret. */
  secret: string;
  /** The instance proxy's base URL (dedicated endpoints of apps link there). */
  proxyUrl: string;
  /** The catalog as the store has it now. */
  catalog: () => Promise<ModelEntry[]>;
  store: Store;
  bus: Bus;
  gate: LimitGate;
  logger: Logger;
}

export interface EmbeddedGateway {
  gateway: Gateway;
  /** The tunnels' listener. */
  tunnels: Server;
}

/** Starts the gateway and the tunnels' listener; what it starts is added to `closers`. */
export async function startEmbeddedGateway(deps: EmbeddedGatewayDeps, closers: Closers): Promise<EmbeddedGateway> {
  const { config, routes, catalog, bus } = deps;
  if (config.tunnelPublicUrl) {
    assertTunnelsApart(config.tunnelPublicUrl, {
      RC_API_PUBLIC_URL: config.apiPublicUrl,
      RC_PROXY_PUBLIC_URL: config.proxyPublicUrl,
      RC_INSTANCE_PUBLIC_URL: config.instancePublicUrl,
    });
  }
  const broker = createTunnelBroker({
    routes,
    secret: deps.secret,
    publicUrl: config.tunnelPublicUrl || undefined,
    maxBodyBytes: config.gatewayMaxBodyBytes,
    limits: tunnelLimitsFromConfig(config),
    // The control plane lists each instance's tunnels from what the brokers announce.
    bus: bus,
  });
  const dedicated = createDedicatedEndpoints({
    routes,
    proxyUrl: deps.proxyUrl,
    maxBodyBytes: config.gatewayMaxBodyBytes,
    inflight: dedicatedInflightFromConfig(config),
  });
  closers.add(() => dedicated.close());
  const gatewayOptions = gatewayOptionsFromConfig(config);
  const gateway = await createGateway({
    ...gatewayOptions,
    routes: [...(gatewayOptions.routes ?? []), dedicated.plugin, broker.plugin],
    models: await catalog(),
    keySource: storeKeySource(deps.store, config),
    bus,
    gate: deps.gate,
    logger: deps.logger,
  }).catch(namingSetting('RC_GATEWAY_PORT'));
  closers.add(() => gateway.close(2000));
  closers.add(() => broker.close());
  // Tunnelled apps get an origin of their own (gateway/dedicated/README.md, "Own origins").
  const tunnels = await broker.listenPublic(config.host, config.tunnelPort).catch(namingSetting('RC_TUNNEL_PORT'));
  closers.add(() => tunnels.close(1000));
  // Reads may finish out of order (a pool of connections): only the newest one is applied.
  let reads = 0;
  const reloadCatalog = async () => {
    const n = ++reads;
    try {
      const models = await catalog();
      if (n === reads) gateway.setModels(models);
    } catch (err) {
      deps.logger.error('catalog reload failed', { err });
    }
  };
  const unsubscribe = bus.subscribe((ev) => {
    if (ev.type === 'catalog.changed') void reloadCatalog();
  });
  closers.add(async () => unsubscribe());
  return { gateway, tunnels };
}
