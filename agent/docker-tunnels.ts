// rc-tunnel from containers (issue 27): the agent's tunnel relay (broker-relay.ts) on the default
// bridge's address is a container's only way to the tunnel broker. A container is told the relay's
// URL and never its instance's token: the relay identifies a connection by its source address and
// presents that instance's token for it, so a token stolen from another instance is worthless.
import type { Logger } from '../lib/log.js';
import { BROKER_ENV, TOKEN_ENV, VIA_RELAY_ENV } from '../lib/tunnel/identity.js';
import { parseBrokers, TunnelRelay } from './broker-relay.js';
import * as api from './docker-api.js';
import { DockerEngine } from './docker-engine.js';
import type { InstanceNetworks } from './docker-isolation.js';
import { RuntimeError } from './errors.js';
import type { RuntimeRef } from './state.js';
import type { LaunchSpec } from './types.js';

export interface ContainerTunnelsOptions {
  agentId: string;
  /** Connections one container may hold open through the tunnel relay (broker-relay.ts). */
  relayPerInstance?: number;
  logger: Logger;
}

export class ContainerTunnels {
  /** The tunnel relay (created once the bridge's address is known): containers' only way to the broker. */
  private relay: TunnelRelay | undefined;
  /** The default bridge's address, where the relay listens. */
  private bridgeGateway: string | undefined;
  /** Container id -> instance id, to forget an instance's tunnel token when its container is removed. */
  private readonly relayed = new Map<string, string>();

  constructor(
    private readonly engine: DockerEngine,
    private readonly networks: InstanceNetworks,
    private readonly opts: ContainerTunnelsOptions,
  ) {}

  /** Starts the relay on the default bridge's address (none known: containers cannot reach the broker). */
  listen(bridgeGateway: string | undefined): void {
    this.bridgeGateway = bridgeGateway;
    if (!bridgeGateway) {
      this.opts.logger.warn('no address of the default bridge found: rc-tunnel cannot reach the tunnel broker from containers');
      return;
    }
    this.relay = new TunnelRelay({
      listenIp: bridgeGateway,
      identify: (address) => this.instanceAt(address),
      logger: this.opts.logger,
      perInstance: this.opts.relayPerInstance,
    });
  }

  /**
   * The instance whose running container (of this agent) has `address` on any of its networks:
   * the tunnel relay's identification of a connection. Asked for each tunnel connection only.
   */
  private async instanceAt(address: string): Promise<string | undefined> {
    if (!address) return undefined;
    const r = await this.engine.call(api.runningListRequest(this.opts.agentId));
    if (r.status !== 200) throw new RuntimeError(`Listing this agent's containers failed: ${DockerEngine.message(r)}`);
    for (const c of r.json as api.ListedContainer[]) {
      if (c.Labels?.[api.LABEL_AGENT] !== this.opts.agentId || c.State !== 'running') continue;
      const nets = Object.values(c.NetworkSettings?.Networks ?? {});
      if (nets.some((n) => n.IPAddress === address || n.GlobalIPv6Address === address)) return c.Labels?.[api.LABEL_INSTANCE];
    }
    return undefined;
  }

  /** The one way from the instance bridges into the host: the tunnel relay's port on the default bridge's address. */
  private async allowPort(port: number): Promise<void> {
    if (this.bridgeGateway) await this.networks.allowRelay(this.bridgeGateway, port);
  }

  /**
   * The tunnel settings a container gets: RC_TUNNEL_BROKER naming the agent's relay (one URL per
   * broker) and RC_TUNNEL_VIA_RELAY=1, never the token: the relay presents it (broker-relay.ts).
   * The token stays in the agent (in memory, and in the state file's copy of the spec: the agent's
   * data dir is 0700, like the agent's own credentials).
   */
  async env(spec: LaunchSpec): Promise<Record<string, string>> {
    const brokers = parseBrokers(spec.env[BROKER_ENV] ?? '');
    if (!brokers || !this.relay) return {};
    this.relay.register(spec.instanceId, spec.env[TOKEN_ENV] ?? '', spec.env[BROKER_ENV]!);
    // A stable port when free (the first broker's): containers keep their URL across agent restarts.
    const first = brokers[0]!;
    const port = await this.relay.ensure([Number(first.port || (first.protocol === 'https:' || first.protocol === 'wss:' ? 443 : 80))]);
    await this.allowPort(port);
    return { [BROKER_ENV]: this.relay.containerBrokers(api.HOST_GATEWAY_NAME, port, brokers.length), [VIA_RELAY_ENV]: '1' };
  }

  /** The spec's env as a container gets it: without the tunnel token. */
  static containerSpec(spec: LaunchSpec): LaunchSpec {
    if (!(TOKEN_ENV in spec.env)) return spec;
    const { [TOKEN_ENV]: _token, ...env } = spec.env;
    return { ...spec, env };
  }

  /** The tunnel relay's ports (on the default bridge's gateway address): a host firewall must let containers reach them. */
  ports(): number[] {
    return this.relay?.ports() ?? [];
  }

  /** A container of the instance was created: its token is forgotten once its last container is removed. */
  created(containerId: string, instanceId: string): void {
    this.relayed.set(containerId, instanceId);
  }

  /** A container was removed: the relay forgets its instance's token when no other container of it is left. */
  removed(containerId: string): void {
    const instanceId = this.relayed.get(containerId);
    this.relayed.delete(containerId);
    if (instanceId && ![...this.relayed.values()].includes(instanceId)) this.relay?.unregister(instanceId);
  }

  /** After an agent restart: the relay again knows the instance's token and listens where its container was told. */
  async resume(spec: LaunchSpec, ref: RuntimeRef): Promise<void> {
    if (!this.relay || !parseBrokers(spec.env[BROKER_ENV] ?? '')) return;
    this.relay.register(spec.instanceId, spec.env[TOKEN_ENV] ?? '', spec.env[BROKER_ENV]!);
    this.relayed.set(String(ref.containerId), spec.instanceId);
    const r = await this.engine.call(api.inspectRequest(String(ref.containerId)));
    const env = (r.json as { Config?: { Env?: string[] } } | undefined)?.Config?.Env ?? [];
    const given = env.find((e) => e.startsWith(`${BROKER_ENV}=`))?.slice(BROKER_ENV.length + 1) ?? '';
    for (const url of parseBrokers(given) ?? []) {
      if (url.hostname === api.HOST_GATEWAY_NAME && url.port) {
        await this.relay.adopt(Number(url.port));
        await this.allowPort(Number(url.port));
      }
    }
  }

  close(): void {
    this.relay?.close();
  }
}
