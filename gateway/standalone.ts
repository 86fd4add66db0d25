// A running `rc gateway` (gateway/cli.ts): the gateway with its bus, gates, keys and, with a
// control plane, what it learns from it (gateway/sync/); started once, stopped once.
import type { Server } from '../lib/http.js';
import { busChannel, RedisBus, type Bus } from '../lib/bus.js';
import type { Config } from '../lib/config.js';
import { namingSetting } from '../lib/errors.js';
import type { Logger } from '../lib/log.js';
import { memoryKeySource, readKeysFile } from './auth/keys.js';
import { CatalogReload } from './catalog-reload.js';
import { gatewayOptionsFromConfig } from './options-from-config.js';
import { AccountLimits, createGate, type LimitGate } from './gates/index.js';
import { createGateway, type Gateway } from './server.js';
import { PlatformFeed } from './sync/platform-feed.js';
import { platformGatewayParts, type PlatformGatewayParts } from './sync/platform-gateway.js';

export interface StandaloneOptions {
  host: string;
  port: number;
  /** The setting that chose the port, named when it is in use. */
  portSetting: string;
  keysFile: string | undefined;
  /** The control plane and the internal token to present to it. */
  controlPlane: { url: string; token: string } | undefined;
}

/** What `rc gateway` prints on stdout, one JSON line, when it listens. */
export interface ReadyLine {
  url: string;
  gateway: string;
  tunnels: string | undefined;
  metrics: string;
  pid: number;
}

export class StandaloneGateway {
  private constructor(
    private readonly gateway: Gateway,
    private readonly gate: LimitGate,
    private readonly bus: Bus | undefined,
    private readonly platform: PlatformGatewayParts | undefined,
    private readonly tunnels: Server | undefined,
    private readonly catalogReload: CatalogReload,
  ) {}

  static async start(config: Config, logger: Logger, o: StandaloneOptions): Promise<StandaloneGateway> {
    const bus: Bus | undefined = config.redisUrl ? new RedisBus(config.redisUrl, busChannel(config.gateKeyPrefix)) : undefined;
    if (bus instanceof RedisBus) await bus.whenReady();
    const platform = await StandaloneGateway.fromControlPlane(config, logger, o, bus);
    // From the control plane (snapshot, then events), or: keys and the accounts' limit overrides
    // from the keys file, later changes as events.
    const entries = o.keysFile ? await readKeysFile(o.keysFile) : [];
    const limits = new AccountLimits({ rpm: config.modelRpm, tpm: config.modelTpm, dailyTokens: config.modelDailyTokens });
    limits.load(platform ? PlatformFeed.limitEntries(platform.snapshot) : entries.flatMap((e) => (e.limits ? [[e.accountId, e.limits] as const] : [])));
    const gate = createGate(config, { bus, logger, limits });
    const options = gatewayOptionsFromConfig(config);
    const models = platform?.snapshot.models ?? config.models;
    const gateway = await createGateway({
      ...options,
      host: o.host,
      port: o.port,
      reusePort: config.gatewayReusePort,
      models,
      keySource: platform?.keySource ?? memoryKeySource(entries),
      routes: [...(options.routes ?? []), ...(platform?.plugins ?? [])],
      bus,
      gate,
      logger,
    }).catch(namingSetting(o.portSetting));
    platform?.follow(gateway, limits);
    const tunnels = await platform?.listenTunnels(o.host);
    for (const m of models) if (!m.upstreams.length) logger.warn('model has no upstreams: requests for it get 502', { model: m.name });
    if (!o.keysFile && !platform) logger.warn('no --keys-file: only keys issued over the bus are accepted');
    const catalogReload = new CatalogReload(gateway, logger, { reloads: !platform, configFile: config.configFile });
    return new StandaloneGateway(gateway, gate, bus, platform, tunnels, catalogReload);
  }

  /** The first snapshot and the parts over it, when a control plane is given. */
  private static async fromControlPlane(config: Config, logger: Logger, o: StandaloneOptions, bus: Bus | undefined): Promise<PlatformGatewayParts | undefined> {
    if (!o.controlPlane) return undefined;
    if (!bus) logger.warn('REDIS_URL is not set: changes reach this gateway only at each resync (RC_GATEWAY_RESYNC_MS)');
    // A bad internal token ends the command; the bus must not keep the process alive then.
    return platformGatewayParts(config, { ...o.controlPlane, bus, logger }).catch(async (err: unknown) => {
      await bus?.close();
      throw err;
    });
  }

  readyLine(): ReadyLine {
    const g = this.gateway;
    return { url: g.url, gateway: g.url, tunnels: this.tunnels?.url, metrics: `${g.metricsUrl}/metrics`, pid: process.pid };
  }

  /** Stops serving (10 s grace for requests in flight), then closes what the gateway used. */
  async stop(): Promise<void> {
    this.catalogReload.close();
    await this.gateway.close(10_000);
    await this.platform?.close();
    await this.gate.close();
    await this.bus?.close();
  }
}
