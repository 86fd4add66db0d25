// The docker runtime's isolation (issue #27): every container gets a network of its own (a bridge
// `<prefix>-…` with a /29 from the pool), and the agent's firewall rules (firewall.ts) keep it off
// the host, off other bridges and off private addresses. The one way from an instance bridge into
// the host is the tunnel relay's port on the default bridge's address.
import { isIPv4 } from 'node:net';
import { randomInt } from 'node:crypto';
import type { Logger } from '../lib/log.js';
import * as api from './docker-api.js';
import { DockerEngine } from './docker-engine.js';
import { FailureReason, RuntimeError } from './errors.js';
import { IsolationFirewall, privateNameservers } from './firewall.js';
import { StartFailure } from './runtime.js';
import { freeSubnet, hostRoutes, INSTANCE_PREFIX_LENGTH, parseCidr, subnetAddresses, type Cidr } from './subnets.js';

export interface IsolationSettings {
  /**
   * `on`: refuse to run without the firewall rules; `auto`: the same, except that an agent on
   * loopback only (one machine, like the process runtime's rule) runs without them, with a
   * warning; `off`: the operator isolates (a warning).
   */
  firewall: 'auto' | 'on' | 'off';
  /** IPv4 pool the per-instance /29 subnets come from. */
  pool: string;
  /** Prefix of the bridges (`<prefix>-…`) and the firewall chains (`<prefix>-isolate-…`). */
  prefix: string;
  /** More destinations containers may not reach (CIDRs), beyond the private ranges. */
  blocked: string[];
}

export const ISOLATION_DEFAULTS: IsolationSettings = { firewall: 'auto', pool: '10.231.0.0/16', prefix: 'rc', blocked: [] };

/** How often the firewall rules are installed again (idempotent; a reload may have flushed them). */
const FIREWALL_REFRESH_MS = 30_000;

export interface InstanceNetworksOptions {
  agentId: string;
  isolation: IsolationSettings;
  /** The agent listens on loopback only (one machine, reachable by its own users alone): `auto` may then run without the rules. */
  loopbackOnly?: boolean;
  logger: Logger;
}

/** The host's address on the default bridge (what host-gateway resolves to in containers). */
export async function findBridgeGateway(engine: DockerEngine): Promise<string | undefined> {
  const net = await engine.call(api.networkInspectRequest('bridge'));
  const j = net.json as { IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] } } | undefined;
  const configured = j?.IPAM?.Config?.find((c) => c.Gateway)?.Gateway;
  if (configured) return configured;
  // Engines that leave the gateway implicit use the subnet's first address (172.17.0.1).
  const subnet = j?.IPAM?.Config?.find((c) => c.Subnet && isIPv4(c.Subnet.split('/')[0]!))?.Subnet;
  return subnet ? api.firstHostAddress(subnet) : undefined;
}

/** The per-instance networks of one agent and the firewall rules around them. */
export class InstanceNetworks {
  /** The isolation rules; undefined with RC_AGENT_FIREWALL=off (or `auto` on loopback when installing failed). */
  private firewall: IsolationFirewall | undefined;
  private firewallTimer: NodeJS.Timeout | undefined;
  private readonly pool: Cidr;

  constructor(
    private readonly engine: DockerEngine,
    private readonly opts: InstanceNetworksOptions,
  ) {
    const pool = parseCidr(opts.isolation.pool);
    if (!pool) throw new RuntimeError(`RC_AGENT_NETWORK_POOL must be an IPv4 CIDR, got ${JSON.stringify(opts.isolation.pool)}`);
    this.pool = pool;
  }

  /**
   * Installs the isolation rules, or refuses to run without them: unless RC_AGENT_FIREWALL=off, or
   * `auto` on an agent that listens on loopback only (a non-root `npm start` on one's own machine,
   * whose accounts are its users: the platform is not reachable from other machines).
   */
  async installFirewall(): Promise<void> {
    const { isolation } = this.opts;
    if (isolation.firewall === 'off') {
      this.opts.logger.warn(
        'RC_AGENT_FIREWALL=off: the agent installs no firewall rules; containers can reach the host and, where the host forwards, other hosts: the operator must isolate them (agent/README.md)',
      );
      return;
    }
    const firewall = new IsolationFirewall(
      { prefix: isolation.prefix, pool: isolation.pool, blocked: isolation.blocked, nameservers: privateNameservers() },
      this.opts.agentId,
    );
    try {
      await firewall.install();
    } catch (err) {
      if (isolation.firewall === 'auto' && this.opts.loopbackOnly) {
        this.opts.logger.warn(
          `RC_AGENT_FIREWALL=auto: installing the isolation rules failed (${(err as Error).message}); this agent listens on loopback only, so containers run without them: they can reach each other and the host's non-loopback addresses. Run as root with iptables for isolation; an agent reachable from other machines refuses to start without it (agent/README.md)`,
        );
        return;
      }
      throw new RuntimeError(
        `The docker runtime needs its firewall rules (containers would reach the host and other instances) and installing them failed: ${(err as Error).message}. Run the agent as root with iptables installed, or set RC_AGENT_FIREWALL=off if you isolate containers yourself${isolation.firewall === 'auto' ? ' (auto runs without them only while the agent listens on loopback)' : ''}.`,
        { cause: err },
      );
    }
    this.firewall = firewall;
    // Put back what a firewall reload or an engine restart removed while instances run.
    this.firewallTimer = setInterval(() => {
      firewall.refresh().catch((err: unknown) => this.opts.logger.warn('re-installing the firewall rules failed', { err }));
    }, FIREWALL_REFRESH_MS);
    this.firewallTimer.unref();
  }

  /** The one way from the instance bridges into the host: the tunnel relay's `port` on the default bridge's address. */
  async allowRelay(bridgeGateway: string, port: number): Promise<void> {
    await this.firewall?.allowRelay(bridgeGateway, port);
  }

  /** IPv4 subnets of every network of the engine (ours, other agents', the operator's). */
  private async engineSubnets(): Promise<Cidr[]> {
    const r = await this.engine.call(api.networkListRequest());
    if (r.status !== 200) throw new StartFailure(FailureReason.startFailed, `Listing networks failed: ${DockerEngine.message(r)}`);
    const out: Cidr[] = [];
    for (const n of r.json as { IPAM?: { Config?: { Subnet?: string }[] | null } }[]) {
      for (const c of n.IPAM?.Config ?? []) {
        const cidr = c.Subnet ? parseCidr(c.Subnet) : undefined;
        if (cidr) out.push(cidr);
      }
    }
    return out;
  }

  /**
   * The instance's own network: a bridge named `<prefix>-<hash>` with a free /29 of the pool (none
   * of the engine's networks nor the host's routes overlap it; a subnet another agent took
   * meanwhile is skipped). One left by an interrupted attempt of this agent is reused.
   */
  async ensure(instanceId: string): Promise<string> {
    // The engine may have created DOCKER-USER since the agent started: jump from it too.
    await this.firewall?.ensureJumps().catch((err: unknown) => {
      throw new StartFailure(FailureReason.startFailed, `Checking the firewall rules failed: ${(err as Error).message}`);
    });
    const name = api.networkName(instanceId);
    const existing = await this.engine.call(api.networkInspectRequest(name));
    if (existing.status === 200) {
      if ((existing.json as { Labels?: Record<string, string> }).Labels?.[api.LABEL_AGENT] === this.opts.agentId) return name;
      throw new StartFailure(FailureReason.startFailed, `A network named ${name} exists and is not this agent's`);
    }
    const taken = [...hostRoutes(), ...(await this.engineSubnets())];
    const bridge = api.bridgeName(this.opts.isolation.prefix, this.opts.agentId, instanceId);
    // A random first block: agents on one machine rarely pick the same subnet at once.
    const start = randomInt(2 ** Math.max(0, INSTANCE_PREFIX_LENGTH - this.pool.bits));
    for (let attempt = 0; attempt < 50; attempt++) {
      const subnet = freeSubnet(this.pool, taken, start);
      if (!subnet)
        throw new StartFailure(FailureReason.startFailed, `No free subnet left in the network pool ${this.opts.isolation.pool} (RC_AGENT_NETWORK_POOL)`);
      const r = await this.engine.call(api.networkCreateRequest({ name, bridge, ...subnetAddresses(subnet), agentId: this.opts.agentId, instanceId }));
      if (r.status === 201) return name;
      const message = DockerEngine.message(r);
      if (!/overlap/i.test(message)) throw new StartFailure(FailureReason.startFailed, `Creating the instance network failed: ${message}`);
      taken.push(subnet);
    }
    throw new StartFailure(FailureReason.startFailed, 'Creating the instance network failed: every subnet tried overlapped another network');
  }

  /** Removes an instance network of this agent (never another's); gone already is fine. */
  async remove(name: string): Promise<void> {
    const r = await this.engine.call(api.networkInspectRequest(name));
    if (r.status === 404) return;
    if ((r.json as { Labels?: Record<string, string> } | undefined)?.Labels?.[api.LABEL_AGENT] !== this.opts.agentId) return;
    const d = await this.engine.call(api.networkRemoveRequest(name));
    if (d.status !== 204 && d.status !== 404) this.opts.logger.warn('removing an instance network failed', { network: name, message: DockerEngine.message(d) });
  }

  /** Removes this agent's instance networks that no container of it uses (killed between network and container). */
  async sweep(instancesWithContainers: Set<string>): Promise<void> {
    const r = await this.engine.call(api.agentNetworksRequest(this.opts.agentId));
    if (r.status !== 200) return;
    for (const n of r.json as { Name: string; Labels?: Record<string, string> }[]) {
      if (n.Labels?.[api.LABEL_AGENT] !== this.opts.agentId) continue;
      const instanceId = n.Labels?.[api.LABEL_INSTANCE];
      if (instanceId && instancesWithContainers.has(instanceId)) continue;
      this.opts.logger.warn('removing an orphan instance network', { network: n.Name });
      await this.remove(n.Name);
    }
  }

  close(): void {
    clearInterval(this.firewallTimer);
    void this.firewall?.close();
  }
}
