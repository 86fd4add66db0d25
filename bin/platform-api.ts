// The control plane's core in the assembly: the instance service (scheduling, billing, the agents
// it dials) and the platform API it serves on, with the instance hand-over and the internal API
// for gateways in other processes.
import type { Bus } from '../lib/bus.js';
import type { Config, ModelEntry } from '../lib/config.js';
import { namingSetting } from '../lib/errors.js';
import type { Logger } from '../lib/log.js';
import { createControlPlane, type ControlPlane } from '../control-plane/server.js';
import { internalRoutes } from '../control-plane/internal-routes.js';
import { internalToken } from '../control-plane/secrets.js';
import { LiveFleet } from '../control-plane/instances/fleet.js';
import type { Store } from '../control-plane/store.js';
import { createInstances, type Instances } from '../control-plane/instances/index.js';
import { publicUrls, resolveInstanceSettings } from '../control-plane/instances/settings.js';
import { openInstanceRoutes, type ProxyTickets } from '../control-plane/proxy/handover.js';
import type { InstanceRoutes } from '../lib/instance-routes.js';
import type { InstanceRouteSource } from '../gateway/dedicated/from-instances.js';
import { tunnelProvisioning } from '../lib/tunnel/identity.js';
import type { LimitGate } from '../gateway/gates/index.js';
import type { Server } from '../lib/http.js';
import { listenMetrics } from '../lib/prometheus.js';
import { gpuMetrics } from '../control-plane/instances/gpu-metrics.js';
import type { Closers } from './closers.js';
import type { LocalAgent } from './local-agent.js';

/** The local agent keeps this id across restarts: instances remember their host by it. */
const LOCAL_AGENT_ID = 'local';

/**
 * The instance service for the parts started before it (dedicated endpoints, the tunnel broker,
 * the instance proxy), whose URLs go into its settings: they read routes and report activity
 * through this, and see no instance until it is set.
 */
export class InstancesSlot implements InstanceRouteSource {
  instances: Instances | undefined;

  route(instanceId: string): ReturnType<Instances['route']> {
    return this.instances?.route(instanceId);
  }

  recordActivity(instanceId: string): void {
    this.instances?.recordActivity(instanceId);
  }
}

export interface PlatformApiDeps {
  config: Config;
  dataDir: string;
  store: Store;
  bus: Bus;
  logger: Logger;
  /** The configured catalog, embedded sims as upstreams. */
  models: ModelEntry[];
  /** The catalog as the store has it now. */
  catalog: () => Promise<ModelEntry[]>;
  gate: LimitGate;
  /** The embedded agent, when one runs in this process. */
  agent: LocalAgent | undefined;
  /** The embedded gateway's URL, when one runs in this process. */
  gatewayUrl: string | undefined;
  routes: InstanceRoutes;
  tickets: ProxyTickets;
  /** The tunnel identities' secret. */
  secret: string;
  proxyUrl: string;
}

export interface PlatformApi {
  instances: Instances;
  controlPlane: ControlPlane;
  /** The control plane's Prometheus listener (GPU gauges; RC_METRICS_HOST:RC_CONTROL_METRICS_PORT). */
  metrics: Server;
  /** The token gateways present to the internal API (x-rc-internal-token). */
  internalToken: string;
}

/** Creates the instance service (into `slot`) and starts the platform API; closing is added to `closers`. */
export async function startPlatformApi(deps: PlatformApiDeps, slot: InstancesSlot, closers: Closers): Promise<PlatformApi> {
  const { config, store, bus, logger, routes, proxyUrl } = deps;
  // Instance URLs name the servers as they listen (ephemeral ports included) unless public
  // URLs are configured. Every instance gets an rc-tunnel identity for the broker.
  const settings = { ...config, instancePublicUrl: config.instancePublicUrl || deps.gatewayUrl || '', proxyPublicUrl: proxyUrl };
  const gatewayUrl = publicUrls(resolveInstanceSettings(settings)).gateway;
  const brokerUrl = config.tunnelBrokers || gatewayUrl;
  let controlPlaneUrl = ''; // known once the platform API listens (below)
  const instances = await createInstances({
    store,
    bus,
    logger,
    settings,
    agents: deps.agent ? [{ id: LOCAL_AGENT_ID, address: deps.agent.handle.address, token: deps.agent.token }] : [],
    provision: (instanceId) => tunnelProvisioning(deps.secret, instanceId, brokerUrl),
    apiUrl: () => config.apiPublicUrl || controlPlaneUrl,
  });
  slot.instances = instances;
  const token = internalToken(deps.dataDir, config.internalToken);
  const controlPlane = await createControlPlane({
    host: config.host,
    port: config.apiPort,
    dataDir: deps.dataDir,
    store,
    bus,
    logger,
    configuredModels: deps.models,
    modelUsage: (accountId, day) => deps.gate.readUsage(accountId, day),
    settings: config,
    gatewayUrl,
    routes: (apiDeps) => [
      ...instances.routes(apiDeps),
      ...openInstanceRoutes({ tickets: deps.tickets, proxyBase: () => proxyUrl, instance: (id) => routes.get(id) }),
      ...internalRoutes({
        store,
        catalog: deps.catalog,
        instanceRoutes: () => instances.service.allRoutes(),
        tunnel: { secret: deps.secret, proxyUrl },
        access: config,
      }),
    ],
    internalToken: token,
    fleet: new LiveFleet(instances.service),
    instances: instances.service,
  }).catch(namingSetting('RC_API_PORT'));
  controlPlaneUrl = controlPlane.url;
  closers.add(() => controlPlane.close());
  // Closed before the control plane: no tick or agent call runs against a closing API.
  closers.add(() => instances.close());
  // Its own port like the gateway's: the gauges name every host, GPU and instance (lib/prometheus.ts).
  const metrics = await listenMetrics(() => gpuMetrics(instances.service.agents), config.metricsHost, config.controlMetricsPort).catch(
    namingSetting('RC_CONTROL_METRICS_PORT'),
  );
  closers.add(() => metrics.close());
  return { instances, controlPlane, metrics, internalToken: token };
}
