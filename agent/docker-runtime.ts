// The docker runtime: instances as containers of the Docker Engine API (the engine's connection:
// docker-engine.ts). Images follow the pull policy (docker-images.ts). Containers are created with
// labels naming the agent and the instance, the engine's init as PID 1, limits, no-new-privileges,
// ports on the publish address only, the account volume, the toolbox (rc, rc-tunnel) and the SSH
// key (the create body: docker-api.ts). Readiness probes the container's own address; output is
// copied into the instance log file, so logs work the same way as in the process runtime. Stop
// means stopped and removed.
// Isolation (issue #27): every container gets a network of its own and the agent's firewall rules
// around it (docker-isolation.ts), and runs with a short list of capabilities; rc-tunnel reaches
// the broker only through the agent's relay, which holds the tokens (docker-tunnels.ts).
import { createWriteStream, existsSync, statSync } from 'node:fs';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { within } from '../lib/within.js';
import type { Logger } from '../lib/log.js';
import * as api from './docker-api.js';
import { DockerEngine, type DockerResponse } from './docker-engine.js';
import { DockerImages, type ImageSettings } from './docker-images.js';
import { findBridgeGateway, InstanceNetworks, type IsolationSettings } from './docker-isolation.js';
import { ContainerTunnels } from './docker-tunnels.js';
import { FailureReason, RuntimeError } from './errors.js';
import { engineGpuSupport, type EngineGpuSupport } from './gpu-support.js';
import { StartFailure, type ExitInfo, type Runtime, type StartContext } from './runtime.js';
import type { RuntimeRef } from './state.js';
import type { LaunchSpec } from './types.js';

export { ISOLATION_DEFAULTS, type IsolationSettings } from './docker-isolation.js';

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
  /** Builds an image the project knows how to build locally (npm start's seeded images); false when it does not know it. */
  buildLocalImage?: ImageSettings['buildLocalImage'];
  /** Per-instance networks and the firewall around them. */
  isolation: IsolationSettings;
  /** The agent listens on loopback only (one machine, reachable by its own users alone): `auto` may then run without the rules. */
  loopbackOnly?: boolean;
  /** Connections one container may hold open through the tunnel relay (broker-relay.ts). */
  relayPerInstance?: number;
  logger: Logger;
}

/** Storage drivers that can cap a container's writable layer (overlay2 only on xfs with pquota). */
const QUOTA_DRIVERS = new Set(['btrfs', 'zfs', 'devicemapper', 'windowsfilter']);
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
  private readonly engine: DockerEngine;
  private readonly images: DockerImages;
  private readonly networks: InstanceNetworks;
  private readonly tunnels: ContainerTunnels;
  private diskQuota = false;
  /** Whether the engine can give containers NVIDIA GPUs (from GET /info at init; gpu-support.ts). */
  gpuSupport: EngineGpuSupport | undefined;
  /** Container id -> settles when its log copy ended (the container's output is all in the file). */
  private readonly logCopies = new Map<string, Promise<void>>();

  constructor(private readonly opts: DockerRuntimeOptions) {
    this.engine = new DockerEngine(opts.socketPath);
    this.checkHost = opts.publishHost;
    this.networks = new InstanceNetworks(this.engine, opts);
    this.images = new DockerImages(this.engine, opts);
    this.tunnels = new ContainerTunnels(this.engine, this.networks, opts);
  }

  private call(req: api.DockerRequest, options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<DockerResponse> {
    return this.engine.call(req, options);
  }

  /** Negotiates the API version, learns the storage driver and the bridge's gateway address, installs the firewall rules. */
  async init(): Promise<void> {
    const version = await this.engine.negotiate();
    const info = await this.call(api.infoRequest());
    this.gpuSupport = engineGpuSupport(info.json);
    const driver = (info.json as { Driver?: string }).Driver ?? '';
    const status = (info.json as { DriverStatus?: [string, string][] }).DriverStatus ?? [];
    const backing = status.find(([k]) => k === 'Backing Filesystem')?.[1] ?? '';
    this.diskQuota = this.opts.diskQuota === 'auto' && (QUOTA_DRIVERS.has(driver) || (driver === 'overlay2' && backing === 'xfs'));
    const bridgeGateway = await findBridgeGateway(this.engine);
    this.opts.logger.info('docker engine', {
      apiVersion: version,
      storageDriver: driver,
      backingFilesystem: backing,
      diskQuota: this.diskQuota,
      bridgeGateway: bridgeGateway ?? null,
    });
    this.tunnels.listen(bridgeGateway);
    await this.networks.installFirewall();
  }

  /** The tunnel relay's ports (on the default bridge's gateway address): a host firewall must let containers reach them. */
  tunnelRelayPorts(): number[] {
    return this.tunnels.ports();
  }

  /** After an agent restart: the relay again knows the instance's token and listens where its container was told. */
  resume(spec: LaunchSpec, ref: RuntimeRef): Promise<void> {
    return this.tunnels.resume(spec, ref);
  }

  private async volume(ctx: StartContext): Promise<api.CreateOptions['volume']> {
    const { volume } = ctx.spec;
    if (!volume) return undefined;
    if (volume.startsWith('/')) return { type: 'bind', source: ctx.volumePath ?? volume };
    const name = api.volumeName(this.opts.agentId, volume);
    const r = await this.call(api.volumeCreateRequest(name, this.opts.agentId));
    if (r.status !== 201 && r.status !== 200) throw new StartFailure(FailureReason.startFailed, `Creating volume ${name} failed: ${DockerEngine.message(r)}`);
    return { type: 'volume', source: name };
  }

  async start(ctx: StartContext): Promise<RuntimeRef> {
    const { spec } = ctx;
    if (!spec.image) throw new StartFailure(FailureReason.startFailed, 'The docker runtime needs an image');
    const imageEnv = await this.images.ensure(spec.image, ctx);
    if (ctx.signal.aborted) throw new StartFailure(FailureReason.startFailed, 'Stopped while starting');
    ctx.onProgress('starting');
    const network = await this.networks.ensure(spec.instanceId);
    try {
      return await this.createAndStart(ctx, imageEnv, network);
    } catch (err) {
      await this.networks.remove(network).catch(() => undefined);
      throw err;
    }
  }

  private async createAndStart(ctx: StartContext, imageEnv: string[], network: string): Promise<RuntimeRef> {
    const { spec } = ctx;
    const authorizedKeys = join(ctx.homeDir, '.ssh', 'authorized_keys');
    const options: api.CreateOptions = {
      spec: ContainerTunnels.containerSpec(spec),
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
      agentEnv: { ...ctx.agentEnv, ...(await this.tunnels.env(spec)) },
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
    if (res.status !== 201) throw new StartFailure(FailureReason.startFailed, `Creating the container failed: ${DockerEngine.message(res)}`);
    const containerId = (res.json as { Id: string }).Id;
    this.tunnels.created(containerId, spec.instanceId);
    try {
      const started = await this.call(api.startRequest(containerId));
      if (started.status !== 204 && started.status !== 304) {
        throw new StartFailure(FailureReason.startFailed, `Starting the container failed: ${DockerEngine.message(started)}`);
      }
    } catch (err) {
      await this.call(api.removeRequest(containerId)).catch(() => undefined);
      throw err;
    }
    return { containerId };
  }

  /** Creates the container; a storage driver that refuses the disk quota after all turns it off (with a warning). */
  private async create(options: api.CreateOptions): Promise<DockerResponse> {
    const res = await this.call(api.createContainerRequest(options));
    if (res.status >= 400 && options.diskQuotaGb && /storage.?opt|quota/i.test(DockerEngine.message(res))) {
      this.opts.logger.warn('the storage driver refuses a disk quota: disk_gb is not enforced on this host', { message: DockerEngine.message(res) });
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
        const status = await this.engine.longLived(api.waitRequest(id), { signal: controller.signal, headersTimeoutMs: 0 }).then(
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
      const res = await this.engine.longLived(req, { signal: controller.signal, headersTimeoutMs: 60_000 });
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
      this.opts.logger.warn('docker stop failed; killing', { containerId: id, message: DockerEngine.message(r) });
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
    if (r.status !== 204 && r.status !== 404) throw new RuntimeError(`Removing the container failed: ${DockerEngine.message(r)}`);
    this.tunnels.removed(id);
    // The network goes with the container (a leftover is swept by the next discover).
    if (instanceId) await this.networks.remove(api.networkName(instanceId));
  }

  async discover(): Promise<Map<string, RuntimeRef[]>> {
    const r = await this.call(api.listRequest(this.opts.agentId));
    if (r.status !== 200) throw new RuntimeError(`Listing this agent's containers failed: ${DockerEngine.message(r)}`);
    const out = new Map<string, RuntimeRef[]>();
    for (const c of r.json as { Id: string; Labels?: Record<string, string> }[]) {
      // The filter already selects this agent's containers; the check guards against a filter ignored.
      if (c.Labels?.[api.LABEL_AGENT] !== this.opts.agentId) continue;
      const id = c.Labels?.[api.LABEL_INSTANCE];
      if (!id) continue;
      out.set(id, [...(out.get(id) ?? []), { containerId: c.Id }]);
    }
    await this.networks.sweep(new Set(out.keys()));
    return out;
  }

  close(): void {
    this.tunnels.close();
    this.networks.close();
    this.engine.close();
  }
}
