// The platform assembly: every part of the embedded default in one process, wired together.
// `rc start` (npm start) runs it in the foreground; tests start it on ephemeral ports.
// `rc control-plane` runs the same without the embedded gateway and agent (startControlPlane):
// gateways (`rc gateway --control-plane URL`) and hosts (`rc agent` + `rc host add`) run apart.
//
// Order: bus, simulated backends for models without upstreams, control plane (SQLite), gates,
// gateway (keys and catalog from the control plane's store, kept current by bus events), local
// agent. Closing runs in reverse order.
import { chmodSync, mkdirSync } from 'node:fs';
import { resolve } from 'node:path';
import { MemoryBus, RedisBus, type Bus } from '../lib/bus.js';
import type { Config, ModelEntry } from '../lib/config.js';
import type { Logger } from '../lib/log.js';
import { startCatalogSims } from '../sim/catalog.js';
import type { SimServer } from '../sim/server.js';
import { createControlPlane, type ControlPlane } from '../control-plane/server.js';
import { internalRoutes } from '../control-plane/internal-routes.js';
import { internalToken } from '../control-plane/secrets.js';
import { LiveFleet } from '../control-plane/instances/fleet.js';
import { Store } from '../control-plane/store.js';
import { createInstances, type Instances } from '../control-plane/instances/index.js';
import { publicUrls, resolveInstanceSettings } from '../control-plane/instances/settings.js';
import { startInstanceProxyServer, type InstanceProxy } from '../control-plane/proxy/proxy.js';
import { openInstanceRoutes, ProxyTickets } from '../control-plane/proxy/handover.js';
import { proxyBaseUrl } from '../lib/instance-origin.js';
import { createDedicatedEndpoints } from '../gateway/dedicated/routes.js';
import { routesFromInstances } from '../gateway/dedicated/from-instances.js';
import { createTunnelBroker } from '../gateway/tunnel/broker.js';
import { tunnelProvisioning, tunnelSecret } from '../gateway/tunnel/identity.js';
import { assertTunnelsApart } from '../gateway/tunnel/origins.js';
import type { Server } from '../lib/http.js';
import { namingSetting } from '../lib/errors.js';
import { storeCatalogSource, storeKeySource, storeLimitOverrides, storeLimitsLookup } from '../control-plane/sources.js';
import { AccountLimits, createGate } from '../gateway/gates/index.js';
import { createGateway, type Gateway } from '../gateway/server.js';
import { gatewayOptionsFromConfig } from '../gateway/cli.js';
import { startAgent, type AgentHandle } from '../agent/server.js';
import { agentOptionsFromConfig, chooseRuntime } from '../agent/cli.js';
import { buildKnownImage, untagStaleLocalImages } from '../agent/images/local-images.js';

const LOCAL_AGENT_ID = 'local';

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
function withSimUpstreams(models: readonly ModelEntry[], sims: Map<string, SimServer>): ModelEntry[] {
  return models.map((m) => {
    const sim = sims.get(m.name);
    return sim ? { ...m, upstreams: [sim.url] } : m;
  });
}

export async function startPlatform(config: Config, logger: Logger): Promise<Platform> {
  return (await assemble(config, logger, { gateway: true, agent: true })) as Platform;
}

/** The control plane alone (`rc control-plane`): no gateway, no agent in this process. */
export function startControlPlane(config: Config, logger: Logger): Promise<ControlPlaneParts> {
  return assemble(config, logger, { gateway: false, agent: false });
}

async function assemble(config: Config, logger: Logger, parts: Parts): Promise<ControlPlaneParts & Partial<Platform>> {
  const dataDir = resolve(config.dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // SQLite, the seal key, the admin and agent tokens: the platform's user only.
  chmodSync(dataDir, 0o700);
  const closers: (() => Promise<unknown>)[] = [];
  const close = async () => {
    for (const c of closers.reverse()) await c().catch((err: unknown) => logger.error('close failed', { err }));
  };
  try {
    const bus: Bus = config.redisUrl ? new RedisBus(config.redisUrl) : new MemoryBus();
    if (bus instanceof RedisBus) await bus.whenReady();
    closers.push(() => bus.close());

    const simsByModel = await startCatalogSims(config.models, {
      host: config.host,
      portBase: config.simPortBase,
      ttftMs: config.simTtftMs,
      tokensPerSecond: config.simTokensPerSecond,
      fast: config.simFast,
      logger,
    }).catch(namingSetting('RC_SIM_PORT_BASE'));
    const sims = [...simsByModel.values()];
    for (const s of sims) closers.push(() => s.close());
    const models = withSimUpstreams(config.models, simsByModel);

    const store = new Store({ dataDir });
    closers.push(async () => store.close());
    const limits = new AccountLimits({ rpm: config.modelRpm, tpm: config.modelTpm, dailyTokens: config.modelDailyTokens });
    limits.load(storeLimitOverrides(store, config));
    const gate = createGate(config, { bus, logger, limits, lookup: storeLimitsLookup(store, config) });
    closers.push(() => gate.close());

    let agent: AgentHandle | undefined;
    let agentToken = '';
    if (parts.agent) {
      const agentOptions = agentOptionsFromConfig({ ...config, dataDir }, logger);
      // Containers when an engine answers (the seeded templates' images are built locally on first
      // use), else host processes, with a warning: that mode is for one trusted user.
      agentOptions.runtime = await chooseRuntime(config.agentRuntime, config.agentDockerSocket);
      if (agentOptions.runtime === 'docker') {
        // The seeded images built from an older definition are built again on first use.
        const stale = await untagStaleLocalImages(config.agentDockerSocket).catch((err: unknown) => {
          logger.warn('checking the local images failed', { err });
          return [];
        });
        if (stale.length) logger.info('local images built from an older definition: rebuilt on first use', { images: stale });
        agentOptions.docker = {
          ...agentOptions.docker,
          buildLocalImage: (image, onProgress) =>
            buildKnownImage(config.agentDockerSocket, image, (line) => {
              const step = /^Step \d+\/\d+/.exec(line);
              if (step) onProgress(`building image: ${step[0].toLowerCase()}`);
            }),
        };
      }
      mkdirSync(agentOptions.dataDir, { recursive: true });
      agent = await startAgent(agentOptions).catch(namingSetting('RC_AGENT_PORT'));
      agentToken = agentOptions.token;
      closers.push(() => agent!.close());
    }

    // Dedicated endpoints, the tunnel broker and the instance proxy read instance routes from the
    // instance service's memory (created below, once the front doors' URLs are known); their
    // traffic resets the instance's idle timer.
    let instances: Instances | undefined;
    const routes = routesFromInstances({
      route: (id) => instances?.route(id),
      recordActivity: (id) => instances?.recordActivity(id),
    });
    const secret = tunnelSecret(config.tunnelSecret, dataDir);
    // Each instance's app on an origin of its own (`<id>.localhost:<port>` by default); the platform
    // API hands the browser session over with single-use tickets (control-plane/proxy/handover.ts).
    const tickets = new ProxyTickets(store.clock);
    const proxy = await startInstanceProxyServer({
      store,
      routes,
      tickets,
      logger,
      publicUrl: config.proxyPublicUrl || undefined,
      host: config.host,
      port: config.proxyPort,
    }).catch(namingSetting('RC_PROXY_PORT'));
    closers.push(() => proxy.close(1000));
    const catalog = storeCatalogSource(models, store);
    const proxyUrl = proxyBaseUrl(config.proxyPublicUrl, proxy.port);
    let gateway: Gateway | undefined;
    let tunnels: Server | undefined;
    if (parts.gateway) {
      if (config.tunnelPublicUrl) {
        assertTunnelsApart(config.tunnelPublicUrl, {
          RC_API_PUBLIC_URL: config.apiPublicUrl,
          RC_PROXY_PUBLIC_URL: config.proxyPublicUrl,
          RC_INSTANCE_PUBLIC_URL: config.instancePublicUrl,
        });
      }
      const broker = createTunnelBroker({ routes, secret, publicUrl: config.tunnelPublicUrl || undefined, maxBodyBytes: config.gatewayMaxBodyBytes });
      const dedicated = createDedicatedEndpoints({ routes, proxyUrl, maxBodyBytes: config.gatewayMaxBodyBytes });
      closers.push(() => dedicated.close());
      const gatewayOptions = gatewayOptionsFromConfig(config);
      const gw = (gateway = await createGateway({
        ...gatewayOptions,
        routes: [...(gatewayOptions.routes ?? []), dedicated.plugin, broker.plugin],
        models: catalog(),
        keySource: storeKeySource(store, config),
        bus,
        gate,
        logger,
      }).catch(namingSetting('RC_GATEWAY_PORT')));
      closers.push(() => gw.close(2000));
      closers.push(() => broker.close());
      // Tunnelled apps get an origin of their own (gateway/dedicated/README.md, "Own origins").
      const t = (tunnels = await broker.listenPublic(config.host, config.tunnelPort).catch(namingSetting('RC_TUNNEL_PORT')));
      closers.push(() => t.close(1000));
      const unsubscribe = bus.subscribe((ev) => {
        if (ev.type === 'catalog.changed') gw.setModels(catalog());
      });
      closers.push(async () => unsubscribe());
    }
    // Instance traffic seen by gateway replicas in other processes resets the idle timer too.
    const unfollowActivity = bus.subscribe((ev) => {
      if (ev.type === 'instance.activity' && typeof ev.instanceId === 'string') instances?.recordActivity(ev.instanceId);
    });
    closers.push(async () => unfollowActivity());

    // Instance URLs name the servers as they listen (ephemeral ports included) unless public
    // URLs are configured. Every instance gets an rc-tunnel identity for the broker. The local
    // agent keeps the id `local` across restarts: instances remember their host by it.
    const settings = { ...config, instancePublicUrl: config.instancePublicUrl || gateway?.url || '', proxyPublicUrl: proxyUrl };
    const gatewayUrl = publicUrls(resolveInstanceSettings(settings)).gateway;
    const brokerUrl = config.tunnelBrokers || gatewayUrl;
    let controlPlaneUrl = ''; // known once the platform API listens (below)
    instances = createInstances({
      store,
      bus,
      logger,
      settings,
      agents: agent ? [{ id: LOCAL_AGENT_ID, address: agent.address, token: agentToken }] : [],
      provision: (instanceId) => tunnelProvisioning(secret, instanceId, brokerUrl),
      apiUrl: () => config.apiPublicUrl || controlPlaneUrl,
    });
    const token = internalToken(dataDir, config.internalToken);
    const controlPlane = await createControlPlane({
      host: config.host,
      port: config.apiPort,
      dataDir,
      store,
      bus,
      logger,
      configuredModels: models,
      modelUsage: (accountId) => gate.readUsage(accountId),
      settings: config,
      gatewayUrl,
      routes: (deps) => [
        ...instances!.routes(deps),
        ...openInstanceRoutes({ tickets, proxyBase: () => proxyUrl, instance: (id) => routes.get(id) }),
        ...internalRoutes({
          store,
          catalog,
          instanceRoutes: () => instances!.service.allRoutes(),
          tunnel: { secret, proxyUrl },
          access: config,
        }),
      ],
      internalToken: token,
      fleet: new LiveFleet(instances.service),
    }).catch(namingSetting('RC_API_PORT'));
    controlPlaneUrl = controlPlane.url;
    closers.push(() => controlPlane.close());
    // Closed before the control plane: no tick or agent call runs against a closing API.
    closers.push(() => instances!.close());

    instances.start();
    return { config, bus, sims, controlPlane, gateway, proxy, tunnels, agent, instances, internalToken: token, close };
  } catch (err) {
    await close();
    throw err;
  }
}
