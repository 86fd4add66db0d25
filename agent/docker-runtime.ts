// The docker runtime: the Docker Engine API over its unix socket with undici. The API version is
// negotiated on /_ping. Images follow the pull policy (a local image is used as it is; a pull
// reports layers and bytes as the pending message). Containers are created with labels naming
// the agent and the instance, the engine's init as PID 1, limits, no-new-privileges, ports on
// the publish address only, the account volume, the toolbox (rc, rc-tunnel) and the SSH key.
// Readiness probes the container's own address; output is copied into the instance log file, so
// logs work the same way as in the process runtime. Stop means stopped and removed.
// Isolation (issue #27): every container gets a network of its own (a bridge `<prefix>-…` with a
// /29 from the pool), the agent's firewall rules (firewall.ts) keep it off the host and off other
// bridges and private addresses, and it runs with a short list of capabilities.
import { createWriteStream, existsSync, statSync } from 'node:fs';
import { isIPv4 } from 'node:net';
import { randomInt } from 'node:crypto';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { within } from '../lib/within.js';
import { Client, Pool, type Dispatcher } from 'undici';
import { BROKER_ENV, TOKEN_ENV, VIA_RELAY_ENV } from '../lib/tunnel/identity.js';
import type { Logger } from '../lib/log.js';
import { parseBrokers, TunnelRelay } from './broker-relay.js';
import * as api from './docker-api.js';
import { FailureReason, RuntimeError } from './errors.js';
import { buildStepMessage } from './images/build.js';
import { engineGpuSupport, type EngineGpuSupport } from './gpu-support.js';
import { IsolationFirewall, privateNameservers } from './firewall.js';
import { freeSubnet, hostRoutes, INSTANCE_PREFIX_LENGTH, parseCidr, subnetAddresses, type Cidr } from './subnets.js';
import { StartFailure, type ExitInfo, type Runtime, type StartContext } from './runtime.js';
import type { RuntimeRef } from './state.js';
import type { LaunchSpec } from './types.js';

export interface DockerRuntimeOptions {
  agentId: string;
  socketPath: string;
  /** Host address published ports bind to (the advertise address or 127.0.0.1; 0.0.0.0 only when configured). */
  publishHost: string;
  pullPolicy: api.PullPolicy;
  /** Limits per GPU (a CPU-only instance counts as one GPU); CPUs are capped at the host's. */
  limitsPerGpu: { memoryMb: number; cpus: number; pids: number };
  /** `auto`: a writable-layer quota of disk_gb where the storage driver supports one; `off`: never. */
  diskQuota: 'auto' | 'off';
  /** The toolbox to mount at /opt/rc; undefined: none. */
  toolbox?: api.ToolboxMounts;
  /**
   * Builds an image the project knows how to build locally (npm start's seeded images), giving
   * `onOutput` each line of docker build's output (its `Step k/n` lines become the pending
   * message); false when it does not know the image.
   */
  buildLocalImage?: (image: string, onOutput: (line: string) => void) => Promise<boolean>;
  /** Per-instance networks and the firewall around them. */
  isolation: IsolationSettings;
  /** The agent listens on loopback only (one machine, reachable by its own users alone): `auto` may then run without the rules. */
  loopbackOnly?: boolean;
  /** Connections one container may hold open through the tunnel relay (broker-relay.ts). */
  relayPerInstance?: number;
  logger: Logger;
}

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

interface DockerResponse {
  status: number;
  json: unknown;
  headers: Record<string, string | string[] | undefined>;
}

/** Storage drivers that can cap a container's writable layer (overlay2 only on xfs with pquota). */
const QUOTA_DRIVERS = new Set(['btrfs', 'zfs', 'devicemapper', 'windowsfilter']);
/** How often the firewall rules are installed again (idempotent; a reload may have flushed them). */
const FIREWALL_REFRESH_MS = 30_000;
/** How long an exit waits for the last output to reach the log file before it is reported. */
const LOG_DRAIN_MS = 2000;

interface ContainerState {
  running: boolean;
  exitCode: number | null;
  ip: string;
}

export class DockerRuntime implements Runtime {
  readonly kind = 'docker' as const;
  readonly checkHost: string;
  /** Short calls; long-lived ones (wait, logs, pull) get a connection of their own (longLived). */
  private readonly client: Pool;
  private version = api.MIN_API_VERSION;
  private diskQuota = false;
  private bridgeGateway: string | undefined;
  /** Whether the engine can give containers NVIDIA GPUs (from GET /info at init; gpu-support.ts). */
  gpuSupport: EngineGpuSupport | undefined;
  /** The tunnel relay (created once the bridge's address is known): containers' only way to the broker. */
  private relay: TunnelRelay | undefined;
  /** Container id -> instance id, to forget an instance's tunnel token when its container is removed. */
  private readonly relayed = new Map<string, string>();
  /** The isolation rules; undefined with RC_AGENT_FIREWALL=off. */
  private firewall: IsolationFirewall | undefined;
  private firewallTimer: NodeJS.Timeout | undefined;
  private readonly pool: Cidr;
  /** Container id -> settles when its log copy ended (the container's output is all in the file). */
  private readonly logCopies = new Map<string, Promise<void>>();

  constructor(private readonly opts: DockerRuntimeOptions) {
    this.client = new Pool('http://localhost', { socketPath: opts.socketPath, connections: 8 });
    this.checkHost = opts.publishHost;
    const pool = parseCidr(opts.isolation.pool);
    if (!pool) throw new RuntimeError(`RC_AGENT_NETWORK_POOL must be an IPv4 CIDR, got ${JSON.stringify(opts.isolation.pool)}`);
    this.pool = pool;
  }

  private path(req: api.DockerRequest): string {
    return req.path === '/_ping' ? req.path : `/v${this.version}${req.path}`;
  }

  /** Sends a request; returns status and parsed JSON body (undefined when empty). */
  private async call(req: api.DockerRequest, options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<DockerResponse> {
    try {
      const res = await this.client.request({
        method: req.method,
        path: this.path(req),
        signal: options.signal,
        headers: req.body === undefined ? {} : { 'content-type': 'application/json' },
        body: req.body === undefined ? undefined : JSON.stringify(req.body),
        headersTimeout: options.timeoutMs ?? 300_000,
        bodyTimeout: options.timeoutMs ?? 300_000,
      });
      const text = await res.body.text();
      let json: unknown;
      try {
        json = text ? JSON.parse(text) : undefined;
      } catch {
        json = { message: text };
      }
      return { status: res.statusCode, json, headers: res.headers };
    } catch (err) {
      throw new RuntimeError(`Docker Engine API ${req.method} ${req.path} failed: ${(err as Error).message}`, { cause: err });
    }
  }

  /**
   * A request on its own connection, closed when the response ends: a long poll or a stream must
   * not hold up the short calls queued behind it.
   */
  private async longLived(
    req: api.DockerRequest,
    options: { signal?: AbortSignal; headersTimeoutMs?: number },
  ): Promise<Dispatcher.ResponseData & { close(): void }> {
    const client = new Client('http://localhost', { socketPath: this.opts.socketPath });
    const close = () => void client.close().catch(() => undefined);
    try {
      const res = await client.request({
        method: req.method,
        path: this.path(req),
        signal: options.signal,
        headersTimeout: options.headersTimeoutMs ?? 300_000,
        bodyTimeout: 0,
      });
      res.body.once('close', close);
      return Object.assign(res, { close });
    } catch (err) {
      close();
      throw err;
    }
  }

  private static message(r: DockerResponse): string {
    return (r.json as { message?: string } | undefined)?.message ?? `status ${r.status}`;
  }

  /** Negotiates the API version, learns the storage driver and the bridge's gateway address. */
  async init(): Promise<void> {
    const ping = await this.call(api.pingRequest(), { timeoutMs: 5000 });
    if (ping.status !== 200) throw new RuntimeError(`The Docker engine at ${this.opts.socketPath} answered /_ping with status ${ping.status}`);
    const server = ping.headers['api-version'];
    const version = api.negotiateApiVersion(Array.isArray(server) ? server[0] : server);
    if (!version) throw new RuntimeError(`The Docker engine speaks API ${String(server)}; the oldest supported is ${api.MIN_API_VERSION}`);
    this.version = version;
    const info = await this.call(api.infoRequest());
    this.gpuSupport = engineGpuSupport(info.json);
    const driver = (info.json as { Driver?: string }).Driver ?? '';
    const status = (info.json as { DriverStatus?: [string, string][] }).DriverStatus ?? [];
    const backing = status.find(([k]) => k === 'Backing Filesystem')?.[1] ?? '';
    this.diskQuota = this.opts.diskQuota === 'auto' && (QUOTA_DRIVERS.has(driver) || (driver === 'overlay2' && backing === 'xfs'));
    this.bridgeGateway = await this.findBridgeGateway();
    this.opts.logger.info('docker engine', {
      apiVersion: version,
      storageDriver: driver,
      backingFilesystem: backing,
      diskQuota: this.diskQuota,
      bridgeGateway: this.bridgeGateway ?? null,
    });
    if (this.bridgeGateway) {
      this.relay = new TunnelRelay({
        listenIp: this.bridgeGateway,
        identify: (address) => this.instanceAt(address),
        logger: this.opts.logger,
        perInstance: this.opts.relayPerInstance,
      });
    } else {
      this.opts.logger.warn('no address of the default bridge found: rc-tunnel cannot reach the tunnel broker from containers');
    }
    await this.installFirewall();
  }

  /**
   * The instance whose running container (of this agent) has `address` on any of its networks:
   * the tunnel relay's identification of a connection. Asked for each tunnel connection only.
   */
  private async instanceAt(address: string): Promise<string | undefined> {
    if (!address) return undefined;
    const r = await this.call(api.runningListRequest(this.opts.agentId));
    if (r.status !== 200) throw new RuntimeError(`Listing this agent's containers failed: ${DockerRuntime.message(r)}`);
    for (const c of r.json as api.ListedContainer[]) {
      if (c.Labels?.[api.LABEL_AGENT] !== this.opts.agentId || c.State !== 'running') continue;
      const nets = Object.values(c.NetworkSettings?.Networks ?? {});
      if (nets.some((n) => n.IPAddress === address || n.GlobalIPv6Address === address)) return c.Labels?.[api.LABEL_INSTANCE];
    }
    return undefined;
  }

  /**
   * Installs the isolation rules, or refuses to run without them: unless RC_AGENT_FIREWALL=off, or
   * `auto` on an agent that listens on loopback only (a non-root `npm start` on one's own machine,
   * whose accounts are its users: the platform is not reachable from other machines).
   */
  private async installFirewall(): Promise<void> {
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

  /** The host's address on the default bridge (what host-gateway resolves to in containers). */
  private async findBridgeGateway(): Promise<string | undefined> {
    const net = await this.call(api.networkInspectRequest('bridge'));
    const j = net.json as { IPAM?: { Config?: { Gateway?: string; Subnet?: string }[] } } | undefined;
    const configured = j?.IPAM?.Config?.find((c) => c.Gateway)?.Gateway;
    if (configured) return configured;
    // Engines that leave the gateway implicit use the subnet's first address (172.17.0.1).
    const subnet = j?.IPAM?.Config?.find((c) => c.Subnet && isIPv4(c.Subnet.split('/')[0]!))?.Subnet;
    return subnet ? api.firstHostAddress(subnet) : undefined;
  }

  // ---- images ---------------------------------------------------------------------------------

  private async imageEnv(image: string): Promise<string[] | undefined> {
    const r = await this.call(api.imageInspectRequest(image));
    if (r.status === 404) return undefined;
    if (r.status !== 200) throw new StartFailure(FailureReason.pullFailed, `Inspecting ${image} failed: ${DockerRuntime.message(r)}`);
    return (r.json as { Config?: { Env?: string[] | null } }).Config?.Env ?? [];
  }

  /** Makes the image present per the pull policy; returns its environment (for PATH). */
  private async ensureImage(image: string, ctx: StartContext): Promise<string[]> {
    const env = await this.imageEnv(image);
    if (!api.shouldPull(this.opts.pullPolicy, env !== undefined)) {
      if (env) return env;
      throw new StartFailure(FailureReason.pullFailed, `Image ${image} is not present on this host and the pull policy is "never"`);
    }
    if (env === undefined && this.opts.buildLocalImage) {
      ctx.onProgress('building image');
      // Each Dockerfile step the build starts becomes the pending message (step k/n).
      const onOutput = (line: string) => {
        const step = buildStepMessage(line);
        if (step) ctx.onProgress(step);
      };
      if (
        await this.opts.buildLocalImage(image, onOutput).catch((err: unknown) => {
          throw new StartFailure(FailureReason.pullFailed, `Building ${image} failed: ${(err as Error).message}`);
        })
      ) {
        return (await this.imageEnv(image)) ?? [];
      }
    }
    await this.pull(image, ctx);
    const after = await this.imageEnv(image);
    if (!after) throw new StartFailure(FailureReason.pullFailed, `Image ${image} is still missing after the pull`);
    return after;
  }

  /** Pulls the image, reporting layers and bytes; throws StartFailure(pull_failed) with the engine's message. */
  private async pull(image: string, ctx: StartContext): Promise<void> {
    ctx.onProgress('pulling image');
    const req = api.pullRequest(image);
    let res;
    try {
      res = await this.longLived(req, { signal: ctx.signal });
    } catch (err) {
      throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${(err as Error).message}`);
    }
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      let message = text;
      try {
        message = (JSON.parse(text) as { message?: string }).message ?? text;
      } catch {
        // Not JSON: the text as it is.
      }
      throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${message.trim().slice(0, 2000)}`);
    }
    const progress = new api.PullProgress();
    let last = 0;
    for await (const line of api.streamLines(res.body)) {
      let parsed: api.PullLine;
      try {
        parsed = JSON.parse(line) as api.PullLine;
      } catch {
        continue;
      }
      const p = progress.push(parsed);
      if (typeof p !== 'string') throw new StartFailure(FailureReason.pullFailed, `Pulling ${image} failed: ${p.error}`);
      // At most a few status changes per second: each one is an event and a state-file write.
      if (Date.now() - last >= 500) {
        last = Date.now();
        ctx.onProgress(p);
      }
    }
  }

  // ---- start ----------------------------------------------------------------------------------

  /**
   * The tunnel settings a container gets: RC_TUNNEL_BROKER naming the agent's relay (one URL per
   * broker) and RC_TUNNEL_VIA_RELAY=1, never the token: the relay presents it (broker-relay.ts).
   * The token stays in the agent (in memory, and in the state file's copy of the spec: the agent's
   * data dir is 0700, like the agent's own credentials).
   */
  private async tunnelEnv(spec: LaunchSpec): Promise<Record<string, string>> {
    const brokers = parseBrokers(spec.env[BROKER_ENV] ?? '');
    if (!brokers || !this.relay) return {};
    this.relay.register(spec.instanceId, spec.env[TOKEN_ENV] ?? '', spec.env[BROKER_ENV]!);
    // A stable port when free (the first broker's): containers keep their URL across agent restarts.
    const first = brokers[0]!;
    const port = await this.relay.ensure([Number(first.port || (first.protocol === 'https:' || first.protocol === 'wss:' ? 443 : 80))]);
    await this.allowRelayPort(port);
    return { [BROKER_ENV]: this.relay.containerBrokers(api.HOST_GATEWAY_NAME, port, brokers.length), [VIA_RELAY_ENV]: '1' };
  }

  /** The tunnel relay's ports (on the default bridge's gateway address): a host firewall must let containers reach them. */
  tunnelRelayPorts(): number[] {
    return this.relay?.ports() ?? [];
  }

  /** The spec's env as a container gets it: without the tunnel token. */
  private static containerSpec(spec: LaunchSpec): LaunchSpec {
    if (!(TOKEN_ENV in spec.env)) return spec;
    const { [TOKEN_ENV]: _token, ...env } = spec.env;
    return { ...spec, env };
  }

  /** After an agent restart: the relay again knows the instance's token and listens where its container was told. */
  async resume(spec: LaunchSpec, ref: RuntimeRef): Promise<void> {
    if (!this.relay || !parseBrokers(spec.env[BROKER_ENV] ?? '')) return;
    this.relay.register(spec.instanceId, spec.env[TOKEN_ENV] ?? '', spec.env[BROKER_ENV]!);
    this.relayed.set(String(ref.containerId), spec.instanceId);
    const r = await this.call(api.inspectRequest(String(ref.containerId)));
    const env = (r.json as { Config?: { Env?: string[] } } | undefined)?.Config?.Env ?? [];
    const given = env.find((e) => e.startsWith(`${BROKER_ENV}=`))?.slice(BROKER_ENV.length + 1) ?? '';
    for (const url of parseBrokers(given) ?? []) {
      if (url.hostname === api.HOST_GATEWAY_NAME && url.port) {
        await this.relay.adopt(Number(url.port));
        await this.allowRelayPort(Number(url.port));
      }
    }
  }

  /** The one way from the instance bridges into the host: the tunnel relay's port on the default bridge's address. */
  private async allowRelayPort(port: number): Promise<void> {
    if (this.bridgeGateway) await this.firewall?.allowRelay(this.bridgeGateway, port);
  }

  private async volume(ctx: StartContext): Promise<api.CreateOptions['volume']> {
    const { volume } = ctx.spec;
    if (!volume) return undefined;
    if (volume.startsWith('/')) return { type: 'bind', source: ctx.volumePath ?? volume };
    const name = api.volumeName(this.opts.agentId, volume);
    const r = await this.call(api.volumeCreateRequest(name, this.opts.agentId));
    if (r.status !== 201 && r.status !== 200) throw new StartFailure(FailureReason.startFailed, `Creating volume ${name} failed: ${DockerRuntime.message(r)}`);
    return { type: 'volume', source: name };
  }

  async start(ctx: StartContext): Promise<RuntimeRef> {
    const { spec } = ctx;
    if (!spec.image) throw new StartFailure(FailureReason.startFailed, 'The docker runtime needs an image');
    const imageEnv = await this.ensureImage(spec.image, ctx);
    if (ctx.signal.aborted) throw new StartFailure(FailureReason.startFailed, 'Stopped while starting');
    ctx.onProgress('starting');
    const network = await this.ensureNetwork(spec.instanceId);
    try {
      return await this.createAndStart(ctx, imageEnv, network);
    } catch (err) {
      await this.removeNetwork(network).catch(() => undefined);
      throw err;
    }
  }

  private async createAndStart(ctx: StartContext, imageEnv: string[], network: string): Promise<RuntimeRef> {
    const { spec } = ctx;
    const authorizedKeys = join(ctx.homeDir, '.ssh', 'authorized_keys');
    const options: api.CreateOptions = {
      spec: DockerRuntime.containerSpec(spec),
      agentId: this.opts.agentId,
      gpus: ctx.gpus,
      gpuDeviceIds: ctx.gpuDeviceIds,
      hostPorts: ctx.hostPorts,
      bindIp: this.opts.publishHost,
      homeDir: ctx.homeDir,
      volume: await this.volume(ctx),
      authorizedKeysFile: spec.sshPublicKey && existsSync(authorizedKeys) ? authorizedKeys : undefined,
      toolbox: this.opts.toolbox,
      imagePath: imageEnv.find((e) => e.startsWith('PATH='))?.slice(5),
      agentEnv: { ...ctx.agentEnv, ...(await this.tunnelEnv(spec)) },
      limits: api.scaleLimits(this.opts.limitsPerGpu, spec.gpuCount, availableParallelism()),
      diskQuotaGb: this.diskQuota && spec.diskGb > 0 ? spec.diskGb : undefined,
      network,
    };
    let res = await this.create(options);
    if (res.status === 409) {
      // A container of an earlier, interrupted attempt: replace it.
      await this.call(api.removeRequest(api.containerName(spec.instanceId)));
      res = await this.create(options);
    }
    if (res.status !== 201) throw new StartFailure(FailureReason.startFailed, `Creating the container failed: ${DockerRuntime.message(res)}`);
    const containerId = (res.json as { Id: string }).Id;
    this.relayed.set(containerId, spec.instanceId);
    try {
      const started = await this.call(api.startRequest(containerId));
      if (started.status !== 204 && started.status !== 304) {
        throw new StartFailure(FailureReason.startFailed, `Starting the container failed: ${DockerRuntime.message(started)}`);
      }
    } catch (err) {
      await this.call(api.removeRequest(containerId)).catch(() => undefined);
      throw err;
    }
    return { containerId };
  }

  // ---- the instance's network ------------------------------------------------------------------

  /** IPv4 subnets of every network of the engine (ours, other agents', the operator's). */
  private async engineSubnets(): Promise<Cidr[]> {
    const r = await this.call(api.networkListRequest());
    if (r.status !== 200) throw new StartFailure(FailureReason.startFailed, `Listing networks failed: ${DockerRuntime.message(r)}`);
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
  private async ensureNetwork(instanceId: string): Promise<string> {
    // The engine may have created DOCKER-USER since the agent started: jump from it too.
    await this.firewall?.ensureJumps().catch((err: unknown) => {
      throw new StartFailure(FailureReason.startFailed, `Checking the firewall rules failed: ${(err as Error).message}`);
    });
    const name = api.networkName(instanceId);
    const existing = await this.call(api.networkInspectRequest(name));
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
      const r = await this.call(api.networkCreateRequest({ name, bridge, ...subnetAddresses(subnet), agentId: this.opts.agentId, instanceId }));
      if (r.status === 201) return name;
      const message = DockerRuntime.message(r);
      if (!/overlap/i.test(message)) throw new StartFailure(FailureReason.startFailed, `Creating the instance network failed: ${message}`);
      taken.push(subnet);
    }
    throw new StartFailure(FailureReason.startFailed, 'Creating the instance network failed: every subnet tried overlapped another network');
  }

  /** Removes an instance network of this agent (never another's); gone already is fine. */
  private async removeNetwork(name: string): Promise<void> {
    const r = await this.call(api.networkInspectRequest(name));
    if (r.status === 404) return;
    if ((r.json as { Labels?: Record<string, string> } | undefined)?.Labels?.[api.LABEL_AGENT] !== this.opts.agentId) return;
    const d = await this.call(api.networkRemoveRequest(name));
    if (d.status !== 204 && d.status !== 404)
      this.opts.logger.warn('removing an instance network failed', { network: name, message: DockerRuntime.message(d) });
  }

  /** Creates the container; a storage driver that refuses the disk quota after all turns it off (with a warning). */
  private async create(options: api.CreateOptions): Promise<DockerResponse> {
    const res = await this.call(api.createContainerRequest(options));
    if (res.status >= 400 && options.diskQuotaGb && /storage.?opt|quota/i.test(DockerRuntime.message(res))) {
      this.opts.logger.warn('the storage driver refuses a disk quota: disk_gb is not enforced on this host', { message: DockerRuntime.message(res) });
      this.diskQuota = false;
      options.diskQuotaGb = undefined;
      return this.call(api.createContainerRequest(options));
    }
    return res;
  }

  describe(ref: RuntimeRef): string {
    return String(ref.containerId).slice(0, 12);
  }

  private async state(ref: RuntimeRef): Promise<ContainerState | undefined> {
    const r = await this.call(api.inspectRequest(String(ref.containerId)));
    if (r.status === 404) return undefined;
    const j = r.json as {
      State?: { Running?: boolean; ExitCode?: number };
      NetworkSettings?: { IPAddress?: string; Networks?: Record<string, { IPAddress?: string }> };
    };
    // The instance's own network (containers of older versions sit on the default bridge).
    const ip = Object.values(j.NetworkSettings?.Networks ?? {}).find((n) => n.IPAddress)?.IPAddress || j.NetworkSettings?.IPAddress || '';
    return { running: Boolean(j.State?.Running), exitCode: j.State?.ExitCode ?? null, ip };
  }

  async isRunning(ref: RuntimeRef): Promise<boolean> {
    return (await this.state(ref))?.running ?? false;
  }

  async probeAddress(ref: RuntimeRef, port: number, hostPort: number): Promise<{ host: string; port: number }> {
    const s = await this.state(ref);
    return s?.ip ? { host: s.ip, port } : { host: this.checkHost, port: hostPort };
  }

  watchExit(ref: RuntimeRef, onExit: (exit: ExitInfo) => void): () => void {
    const controller = new AbortController();
    const id = String(ref.containerId);
    void (async () => {
      for (;;) {
        // The long poll ends when the container stops; an engine hiccup is retried.
        const status = await this.longLived(api.waitRequest(id), { signal: controller.signal, headersTimeoutMs: 0 }).then(
          async (r) => {
            await r.body.dump({ limit: 1 << 20 }).catch(() => undefined);
            return r.statusCode;
          },
          (err: unknown) => {
            if (!controller.signal.aborted) this.opts.logger.warn('docker wait failed', { err });
            return undefined;
          },
        );
        if (controller.signal.aborted) return;
        if (status === 200 || status === 404) break;
        await sleep(1000, undefined, { signal: controller.signal });
      }
      const s = await this.state(ref).catch(() => undefined);
      if (s?.running) return; // cannot happen with RestartPolicy no
      const copy = this.logCopies.get(id);
      if (copy) await within(copy, LOG_DRAIN_MS); // the copy's last lines, not waited for past the drain time
      if (!controller.signal.aborted) onExit({ code: s?.exitCode ?? null, signal: null });
    })().catch(() => undefined);
    return () => controller.abort();
  }

  attachLogs(ref: RuntimeRef, logFile: string): () => void {
    const controller = new AbortController();
    const id = String(ref.containerId);
    let since = 0;
    try {
      // Adopted after a restart: what the file already holds is not copied again.
      since = Math.floor(statSync(logFile).mtimeMs / 1000) + 1;
    } catch {
      // New log file: everything.
    }
    const out = createWriteStream(logFile, { flags: 'a' });
    const req = api.logsRequest(id, since);
    const copy = (async () => {
      const res = await this.longLived(req, { signal: controller.signal, headersTimeoutMs: 60_000 });
      const demux = new api.LogDemuxer();
      for await (const chunk of res.body) for (const payload of demux.push(chunk as Buffer)) out.write(payload);
    })()
      .catch(() => undefined)
      .then(() => new Promise<void>((resolve) => out.end(resolve)));
    this.logCopies.set(id, copy);
    void copy.finally(() => {
      if (this.logCopies.get(id) === copy) this.logCopies.delete(id);
    });
    return () => controller.abort();
  }

  /** Stops (SIGTERM through the init, SIGKILL after the grace) and removes the container: afterwards nothing of it is left. */
  async stop(ref: RuntimeRef, graceMs: number): Promise<void> {
    const id = String(ref.containerId);
    const r = await this.call(api.stopRequest(id, graceMs), { timeoutMs: graceMs + 60_000 });
    if (r.status !== 204 && r.status !== 304 && r.status !== 404) {
      this.opts.logger.warn('docker stop failed; killing', { containerId: id, message: DockerRuntime.message(r) });
      await this.call(api.killRequest(id));
    }
    await this.remove(ref);
  }

  async remove(ref: RuntimeRef): Promise<void> {
    const id = String(ref.containerId);
    const inspected = await this.call(api.inspectRequest(id));
    const instanceId =
      inspected.status === 200 ? (inspected.json as { Config?: { Labels?: Record<string, string> } }).Config?.Labels?.[api.LABEL_INSTANCE] : undefined;
    const r = await this.call(api.removeRequest(id));
    if (r.status !== 204 && r.status !== 404) throw new RuntimeError(`Removing the container failed: ${DockerRuntime.message(r)}`);
    const relayedInstance = this.relayed.get(String(ref.containerId));
    this.relayed.delete(String(ref.containerId));
    if (relayedInstance && ![...this.relayed.values()].includes(relayedInstance)) this.relay?.unregister(relayedInstance);
    // The network goes with the container (a leftover is swept by the next discover).
    if (instanceId) await this.removeNetwork(api.networkName(instanceId));
  }

  /** Removes this agent's instance networks that no container of it uses (killed between network and container). */
  private async sweepNetworks(instancesWithContainers: Set<string>): Promise<void> {
    const r = await this.call(api.agentNetworksRequest(this.opts.agentId));
    if (r.status !== 200) return;
    for (const n of r.json as { Name: string; Labels?: Record<string, string> }[]) {
      if (n.Labels?.[api.LABEL_AGENT] !== this.opts.agentId) continue;
      const instanceId = n.Labels?.[api.LABEL_INSTANCE];
      if (instanceId && instancesWithContainers.has(instanceId)) continue;
      this.opts.logger.warn('removing an orphan instance network', { network: n.Name });
      await this.removeNetwork(n.Name);
    }
  }

  async discover(): Promise<Map<string, RuntimeRef[]>> {
    const r = await this.call(api.listRequest(this.opts.agentId));
    if (r.status !== 200) throw new RuntimeError(`Listing this agent's containers failed: ${DockerRuntime.message(r)}`);
    const out = new Map<string, RuntimeRef[]>();
    for (const c of r.json as { Id: string; Labels?: Record<string, string> }[]) {
      // The filter already selects this agent's containers; the check guards against a filter ignored.
      if (c.Labels?.[api.LABEL_AGENT] !== this.opts.agentId) continue;
      const id = c.Labels?.[api.LABEL_INSTANCE];
      if (!id) continue;
      out.set(id, [...(out.get(id) ?? []), { containerId: c.Id }]);
    }
    await this.sweepNetworks(new Set(out.keys()));
    return out;
  }

  close(): void {
    this.relay?.close();
    clearInterval(this.firewallTimer);
    void this.firewall?.close();
    void this.client.close().catch(() => undefined);
  }
}
