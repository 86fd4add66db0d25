// The platform assembly: every part of the embedded default in one process, wired together.
// `rc start` (npm start) runs it in the foreground; tests start it on ephemeral ports.
// `rc control-plane` runs the same without the embedded gateway and agent (startControlPlane):
// gateways (`rc gateway --control-plane URL`) and hosts (`rc agent` + `rc host add`) run apart.
//
// Order: bus, simulated backends for models without upstreams, the control plane's store
// (SQLite), gates, local agent, instance proxy, gateway (keys and catalog from the control plane's
// store, kept current by bus events), instance service and platform API. Closing runs in reverse
// order.
//
// Each part's wiring: local-agent.ts (the embedded agent), embedded-gateway.ts (gateway, dedicated
// endpoints, tunnel broker and the tunnels' listener), platform-api.ts (the instance service and
// the platform API), closers.ts (the reverse order). The instance proxy and the sims start here.
import { chmodSync, mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { busChannel, MemoryBus, RedisBus, type Bus } from '../lib/bus.js';
import type { Config, ModelEntry } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import { startCatalogSims } from '../sim/model-sims.js';
import type { SimServer } from '../sim/server.js';
import type { ControlPlane } from '../control-plane/server.js';
import { Store } from '../control-plane/store.js';
import type { InstanceRoutes } from '../lib/instance-routes.js';
import type { Instances } from '../control-plane/instances/index.js';
import { startInstanceProxyServer, type InstanceProxy } from '../control-plane/proxy/proxy.js';
import { ProxyTickets } from '../control-plane/proxy/handover.js';
import { proxyLimitsFromConfig } from '../control-plane/proxy/limits.js';
import { proxyBaseUrl } from '../lib/instance-origin.js';
import { followGone, routesFromInstances } from '../gateway/dedicated/from-instances.js';
import { tunnelSecret } from '../lib/tunnel/identity.js';
import type { Server } from '../lib/http.js';
import { namingSetting } from '../lib/errors.js';
import { storeCatalogSource, storeLimitOverrides, storeLimitsLookup } from '../control-plane/sources.js';
import { AccountLimits, createGate } from '../gateway/gates/index.js';
import type { Gateway } from '../gateway/server.js';
import type { AgentHandle } from '../agent/server.js';
import { Closers } from './closers.js';
import { startEmbeddedGateway } from './embedded-gateway.js';
import { startLocalAgent } from './local-agent.js';
import { InstancesSlot, startPlatformApi } from './platform-api.js';

/** The control plane's side: platform API, scheduling, billing, instance proxy, embedded sims. */
export interface ControlPlaneParts {
  config: Config;
  bus: Bus;
  sims: SimServer[];
  controlPlane: ControlPlane;
  /** The instance proxy: browser access to instance apps, each on its own origin `<id>.<proxy host>`. */
  proxy: Server & { proxy: InstanceProxy };
  /** The tunnels' listener: `<tunnel id>.<tunnels host>`, an origin per tunnel (only where a gateway runs in this process). */
  tunnels?: Server;
  instances: Instances;
  /** The control plane's Prometheus listener (`<url>/metrics`: the GPU gauges). */
  controlMetrics: Server;
  /** The token gateways present to the internal API (x-rc-internal-token). */
  internalToken: string;
  close(): Promise<void>;
}

/** Everything on one machine (`rc start`): the control plane plus a gateway and a local agent. */
export interface Platform extends ControlPlaneParts {
  gateway: Gateway;
  tunnels: Server;
  agent: AgentHandle;
}

/** Which parts run in this process besides the control plane. */
interface Parts {
  gateway: boolean;
  agent: boolean;
}

/** The catalog with each upstream-less model pointed at its embedded sim. */
function withSimUpstreams(models: readonly ModelEntry[], sims: Map<string, SimServer[]>): ModelEntry[] {
  return models.map((m) => {
    const replicas = sims.get(m.name);
    return replicas ? { ...m, upstreams: replicas.map((s) => s.url) } : m;
  });
}

export async function startPlatform(config: Config, logger: Logger): Promise<Platform> {
  return (await assemble(config, logger, { gateway: true, agent: true })) as Platform;
}

/** The control plane alone (`rc control-plane`): no gateway, no agent in this process. */
export function startControlPlane(config: Config, logger: Logger): Promise<ControlPlaneParts> {
  return assemble(config, logger, { gateway: false, agent: false });
}

/** The embedded sims (RC_SIM_REPLICAS per catalog model without upstreams) and the catalog pointed at them. */
async function startSims(config: Config, logger: Logger, closers: Closers): Promise<{ sims: SimServer[]; models: ModelEntry[] }> {
  const simsByModel = await startCatalogSims(config.models, {
    host: config.host,
    portBase: config.simPortBase,
    ttftMs: config.simTtftMs,
    tokensPerSecond: config.simTokensPerSecond,
    fast: config.simFast,
    replicas: config.simReplicas,
    flavour: config.simFlavour,
    // As README "Model backends" says to start a server: cached tokens reported.
    promptTokensDetails: true,
    logger,
  }).catch(namingSetting('RC_SIM_PORT_BASE'));
  const sims = [...simsByModel.values()].flat();
  for (const s of sims) closers.add(() => s.close());
  return { sims, models: withSimUpstreams(config.models, simsByModel) };
}

/**
 * Each instance's app on an origin of its own (`<id>.localhost:<port>` by default); the platform
 * API hands the browser session over with single-use tickets (control-plane/proxy/handover.ts).
 */
async function startProxy(config: Config, store: Store, routes: InstanceRoutes, logger: Logger) {
  const tickets = new ProxyTickets(store);
  const proxy = await startInstanceProxyServer({
    store,
    routes,
    tickets,
    logger,
    publicUrl: config.proxyPublicUrl || undefined,
    limits: proxyLimitsFromConfig(config),
    trustProxy: config.trustProxy,
    host: config.host,
    port: config.proxyPort,
  }).catch(namingSetting('RC_PROXY_PORT'));
  return { proxy, tickets };
}

async function assemble(config: Config, logger: Logger, parts: Parts): Promise<ControlPlaneParts & Partial<Platform>> {
  const dataDir = resolve(config.dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // SQLite, the seal key, the admin and agent tokens: the platform's user only.
  chmodSync(dataDir, 0o700);
  const closers = new Closers(logger);
  const close = () => closers.closeAll();
  try {
    const bus: Bus = config.redisUrl ? new RedisBus(config.redisUrl, busChannel(config.gateKeyPrefix)) : new MemoryBus();
    if (bus instanceof RedisBus) await bus.whenReady();
    closers.add(() => bus.close());
    const { sims, models } = await startSims(config, logger, closers);

    const store = await Store.open({ dataDir, databaseUrl: config.databaseUrl || undefined, namedStatements: config.databaseNamedStatements });
    closers.add(() => store.close());
    const limits = new AccountLimits({ rpm: config.modelRpm, tpm: config.modelTpm, dailyTokens: config.modelDailyTokens });
    limits.load(await storeLimitOverrides(store, config));
    const gate = createGate(config, { bus, logger, limits, lookup: storeLimitsLookup(store, config) });
    closers.add(() => gate.close());

    const agent = parts.agent ? await startLocalAgent(config, dataDir, logger) : undefined;
    if (agent) closers.add(() => agent.handle.close());

    // Dedicated endpoints, the tunnel broker and the instance proxy read instance routes from the
    // instance service's memory (created below, once the front doors' URLs are known); their
    // traffic resets the instance's idle timer.
    const slot = new InstancesSlot();
    const routes = routesFromInstances(slot);
    // What the readers keep per instance (throttle entries, connection pools) goes with it.
    const unfollowGone = followGone(bus, routes);
    closers.add(async () => unfollowGone());
    const secret = tunnelSecret(config.tunnelSecret, dataDir);
    const { proxy, tickets } = await startProxy(config, store, routes, logger);
    closers.add(() => proxy.close(1000));
    const catalog = storeCatalogSource(models, store);
    const proxyUrl = proxyBaseUrl(config.proxyPublicUrl, proxy.port);
    const front = parts.gateway ? await startEmbeddedGateway({ config, routes, secret, proxyUrl, catalog, store, bus, gate, logger }, closers) : undefined;
    // Instance traffic seen by gateway replicas in other processes resets the idle timer too.
    const unfollowActivity = bus.subscribe((ev) => {
      if (ev.type === 'instance.activity' && typeof ev.instanceId === 'string') slot.recordActivity(ev.instanceId);
    });
    closers.add(async () => unfollowActivity());

    const api = await startPlatformApi(
      { config, dataDir, store, bus, logger, models, catalog, gate, agent, gatewayUrl: front?.gateway.url, routes, tickets, secret, proxyUrl },
      slot,
      closers,
    );
    api.instances.start();
    const { instances, controlPlane, internalToken } = api;
    return {
      config,
      bus,
      sims,
      controlPlane,
      gateway: front?.gateway,
      proxy,
      tunnels: front?.tunnels,
      agent: agent?.handle,
      instances,
      controlMetrics: api.metrics,
      internalToken,
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
