// The host agent: a gRPC server (rc.agent.v1.AgentService) in front of the supervisor.
// Every call must carry the shared token; the agent stops its instances on its own when the
// control plane has been silent for longer than lostControlPlaneGraceMs.
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import { createHash, timingSafeEqual } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { systemClock, type Clock } from '../lib/clock.js';
import { randomId } from '../lib/ids.js';
import { createLogger, type Logger } from '../lib/log.js';
import * as pb from '../proto/gen/rc/agent/v1/agent_pb.js';
import { eventToPb, hostToPb, infoToPb, specFromPb } from './convert.js';
import type { PullPolicy } from './docker-api.js';
import { DockerRuntime, ISOLATION_DEFAULTS, type DockerRuntimeOptions, type IsolationSettings } from './docker-runtime.js';
import { prepareToolbox } from './toolbox.js';
import { isIP } from 'node:net';
import { ListenError } from '../lib/errors.js';
import { AgentDataDirLockedError, AgentError, AgentInvalidArgumentError, AgentUnauthenticatedError, StopReason } from './errors.js';
import { detectGpus, GpuAllocator, type GpuConfig } from './gpus.js';
import { isAlive, readProcStat } from './procfs.js';
import { lookupUser, ProcessRuntime } from './process-runtime.js';
import { isLoopbackHost } from './broker-relay.js';
import type { Runtime } from './runtime.js';
import { agentServiceDefinition, AUTH_METADATA_KEY, ERROR_CODE_METADATA_KEY } from './service.js';
import { StateStore } from './state.js';
import { Supervisor } from './supervisor.js';
import type { RuntimeKind } from './types.js';

export interface AgentOptions {
  /** Address to bind; default 127.0.0.1. */
  host?: string;
  /** 0 picks a free port. */
  port?: number;
  /** The shared secret the control plane sends as `authorization: Bearer <token>`. */
  token: string;
  /** The agent's own directory: state file, instance directories and logs. */
  dataDir: string;
  runtime?: RuntimeKind;
  /** GPU inventory: nvidia-smi when present (detect 'auto'), else `count` simulated GPUs. */
  gpus?: Partial<GpuConfig>;
  /** Where instance host ports are reachable; default: `host` (127.0.0.1 when binding all interfaces). */
  advertiseHost?: string;
  readyTimeoutMs?: number;
  servingReadyTimeoutMs?: number;
  stopGraceMs?: number;
  /** Stop every instance after this long without the control plane; 0 never. */
  lostControlPlaneGraceMs?: number;
  heartbeatMs?: number;
  /** Docker Engine API socket (docker runtime). */
  dockerSocket?: string;
  /** Instance homes and process volumes, outside the data dir; default `<dataDir>-instances`. */
  instancesDir?: string;
  /** Process runtime, agent running as root: the user instances run as (must exist); default nobody. */
  processUser?: string;
  /**
   * Process runtime: `refuse` (default) starts nothing while the agent listens on a non-loopback
   * address (tenants would run as host processes); `allow` is the operator's explicit choice.
   */
  processUntrusted?: 'refuse' | 'allow';
  /** Docker runtime settings (defaults: DOCKER_DEFAULTS). */
  docker?: Partial<DockerSettings>;
  /** TLS: PEM certificate chain and key; plaintext when absent. */
  tls?: { cert: Buffer; key: Buffer };
  logger?: Logger;
  clock?: Clock;
}

export interface AgentHandle {
  /** host:port to dial. */
  address: string;
  port: number;
  agentId: string;
  supervisor: Supervisor;
  /** Stops serving. Instances keep running; the next agent on this data dir adopts them. */
  close(): Promise<void>;
}

export const AGENT_DEFAULTS = {
  readyTimeoutMs: 120_000,
  servingReadyTimeoutMs: 1_800_000,
  stopGraceMs: 10_000,
  lostControlPlaneGraceMs: 600_000,
  heartbeatMs: 5_000,
  gpus: { detect: 'auto', count: 4, model: 'Simulated GPU', memoryMb: 81_920 } satisfies GpuConfig,
} as const;

/** What the docker runtime takes from the settings. */
export interface DockerSettings {
  pullPolicy: PullPolicy;
  /** Address published ports bind; empty: the advertise address when it is an IP address, else 127.0.0.1. */
  publishHost: string;
  limitsPerGpu: { memoryMb: number; cpus: number; pids: number };
  diskQuota: 'auto' | 'off';
  /** Mount the toolbox (rc, rc-tunnel) at /opt/rc. */
  toolbox: boolean;
  buildLocalImage?: DockerRuntimeOptions['buildLocalImage'];
  /** Per-instance networks and the firewall (defaults: ISOLATION_DEFAULTS). */
  isolation: IsolationSettings;
}

export const DOCKER_DEFAULTS: DockerSettings = {
  pullPolicy: 'if-not-present',
  publishHost: '',
  limitsPerGpu: { memoryMb: 65_536, cpus: 8, pids: 4096 },
  diskQuota: 'auto',
  toolbox: true,
  isolation: ISOLATION_DEFAULTS,
};

/** Published ports bind the advertise address when it is an IP address, else loopback: never all interfaces unless configured. */
export function publishHostFor(configured: string, advertiseHost: string): string {
  if (configured) return configured;
  return isIP(advertiseHost) && advertiseHost !== '0.0.0.0' && advertiseHost !== '::' ? advertiseHost : '127.0.0.1';
}

const MAX_TAIL_LINES = 10_000;

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Data dirs held by agents of this process. */
const lockedDirs = new Set<string>();

/** Refuses a second agent on one data dir (pid + start time, so a stale file from a killed agent does not block). */
function lockDataDir(dir: string): () => void {
  const path = join(dir, 'agent.pid');
  if (lockedDirs.has(path)) throw new AgentDataDirLockedError(dir, process.pid);
  if (existsSync(path)) {
    try {
      const { pid, startTime } = JSON.parse(readFileSync(path, 'utf8')) as { pid: number; startTime: string };
      if (pid !== process.pid && isAlive(pid, startTime)) throw new AgentDataDirLockedError(dir, pid);
    } catch (err) {
      if (err instanceof AgentDataDirLockedError) throw err;
    }
  }
  const mine = JSON.stringify({ pid: process.pid, startTime: readProcStat(process.pid)?.startTime ?? '' });
  writeFileSync(path, mine);
  lockedDirs.add(path);
  return () => {
    lockedDirs.delete(path);
    try {
      if (readFileSync(path, 'utf8') === mine) rmSync(path, { force: true });
    } catch {
      // Already gone.
    }
  };
}

function toServiceError(err: unknown, log: Logger): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  if (err instanceof AgentError) {
    metadata.set(ERROR_CODE_METADATA_KEY, err.code);
    return { code: err.grpcCode, details: err.message, metadata };
  }
  log.error('agent call failed', { err });
  metadata.set(ERROR_CODE_METADATA_KEY, 'RC_ERR_AGENT_INTERNAL');
  return { code: grpc.status.INTERNAL, details: `Internal agent error: ${(err as Error)?.message ?? String(err)}`, metadata };
}

export async function startAgent(options: AgentOptions): Promise<AgentHandle> {
  if (!options.token || options.token.length < 16) throw new AgentInvalidArgumentError('The agent token must be at least 16 characters');
  const log = (options.logger ?? createLogger()).child({ part: 'agent' });
  const clock = options.clock ?? systemClock;
  const host = options.host ?? '127.0.0.1';
  const dataDir = resolve(options.dataDir);
  mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  // The token, the state file and the logs: nobody but the agent's user.
  chmodSync(dataDir, 0o700);
  const instancesRoot = resolve(options.instancesDir ?? `${dataDir}-instances`);
  for (const d of [instancesRoot, join(instancesRoot, 'homes'), join(instancesRoot, 'volumes')]) {
    mkdirSync(d, { recursive: true, mode: 0o711 });
    chmodSync(d, 0o711); // instances reach their own home by path, and list nobody else's
  }
  const unlock = lockDataDir(dataDir);
  const store = new StateStore(dataDir, () => randomId('agent_', 9));
  const agentId = store.state.agentId;
  const runtimeKind = options.runtime ?? 'process';
  const advertiseHost = options.advertiseHost ?? (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);
  let runtime: Runtime;
  if (runtimeKind === 'docker') {
    const d = { ...DOCKER_DEFAULTS, ...options.docker };
    runtime = new DockerRuntime({
      agentId,
      socketPath: options.dockerSocket ?? '/var/run/docker.sock',
      logger: log,
      publishHost: publishHostFor(d.publishHost, advertiseHost),
      pullPolicy: d.pullPolicy,
      limitsPerGpu: d.limitsPerGpu,
      diskQuota: d.diskQuota,
      toolbox: d.toolbox ? prepareToolbox(join(dataDir, 'toolbox')) : undefined,
      buildLocalImage: d.buildLocalImage,
      isolation: { ...ISOLATION_DEFAULTS, ...d.isolation },
      loopbackOnly: isLoopbackHost(host),
    });
  } else {
    const loopback = isLoopbackHost(host);
    const refusal =
      !loopback && options.processUntrusted !== 'allow'
        ? `The process runtime runs instances as host processes (no isolation from the host network or each other) and this agent listens on ${host}, reachable from other machines: it starts nothing. Use the docker runtime, or set RC_AGENT_PROCESS_UNTRUSTED=allow if every account is trusted.`
        : undefined;
    if (refusal) log.warn(refusal);
    runtime = new ProcessRuntime({
      agentId,
      refusal,
      binDir: join(instancesRoot, 'bin'),
      user: process.getuid?.() === 0 ? lookupUser(options.processUser ?? 'nobody') : undefined,
    });
  }
  const gpus = new GpuAllocator(detectGpus({ ...AGENT_DEFAULTS.gpus, ...options.gpus }));
  const supervisor = new Supervisor({
    store,
    runtime,
    gpus,
    logger: log,
    clock,
    advertiseHost,
    readyTimeoutMs: options.readyTimeoutMs ?? AGENT_DEFAULTS.readyTimeoutMs,
    servingReadyTimeoutMs: options.servingReadyTimeoutMs ?? AGENT_DEFAULTS.servingReadyTimeoutMs,
    stopGraceMs: options.stopGraceMs ?? AGENT_DEFAULTS.stopGraceMs,
    instancesRoot,
  });
  try {
    await supervisor.adopt();
  } catch (err) {
    supervisor.close();
    unlock();
    throw err;
  }

  const expected = digest(`Bearer ${options.token}`);
  let lastContact = clock.now();
  let openWatches = 0;
  const authorize = (metadata: grpc.Metadata): void => {
    const given = metadata.get(AUTH_METADATA_KEY)[0];
    if (typeof given !== 'string' || !timingSafeEqual(digest(given), expected)) throw new AgentUnauthenticatedError();
    lastContact = clock.now();
  };

  /** A unary handler with auth and error mapping. */
  const unary =
    <Req, Res>(handle: (req: Req) => Promise<Res> | Res): grpc.handleUnaryCall<Req, Res> =>
    (call, callback) => {
      (async () => {
        authorize(call.metadata);
        return handle(call.request);
      })().then(
        (res) => callback(null, res),
        (err: unknown) => callback(toServiceError(err, log)),
      );
    };

  const streams = new Set<grpc.ServerWritableStream<unknown, unknown>>();
  const heartbeatMs = options.heartbeatMs ?? AGENT_DEFAULTS.heartbeatMs;

  const handlers: grpc.UntypedServiceImplementation = {
    startInstance: unary<pb.StartInstanceRequest, pb.StartInstanceResponse>((req) => {
      if (!req.spec) throw new AgentInvalidArgumentError('spec is required');
      const { info, created } = supervisor.start(specFromPb(req.spec));
      return create(pb.StartInstanceResponseSchema, { instance: infoToPb(info), created });
    }),
    stopInstance: unary<pb.StopInstanceRequest, pb.StopInstanceResponse>(async (req) => {
      const info = await supervisor.stop(req.instanceId, req.graceMs || undefined);
      return create(pb.StopInstanceResponseSchema, { instance: infoToPb(info) });
    }),
    removeInstance: unary<pb.RemoveInstanceRequest, pb.RemoveInstanceResponse>(async (req) =>
      create(pb.RemoveInstanceResponseSchema, { removed: await supervisor.remove(req.instanceId, req.graceMs || undefined) }),
    ),
    listInstances: unary<pb.ListInstancesRequest, pb.ListInstancesResponse>(() =>
      create(pb.ListInstancesResponseSchema, { instances: supervisor.list().map(infoToPb) }),
    ),
    reconcile: unary<pb.ReconcileRequest, pb.ReconcileResponse>(async (req) =>
      create(pb.ReconcileResponseSchema, await supervisor.reconcile(req.wantedInstanceIds)),
    ),
    getHost: unary<pb.GetHostRequest, pb.GetHostResponse>(() => create(pb.GetHostResponseSchema, { host: hostToPb(supervisor.host()) })),

    watchEvents: (call: grpc.ServerWritableStream<pb.WatchEventsRequest, pb.WatchEventsResponse>) => {
      try {
        authorize(call.metadata);
      } catch (err) {
        call.emit('error', toServiceError(err, log));
        return;
      }
      const send = (kind: pb.WatchEventsResponse['kind']) => {
        if (!call.cancelled && call.writable) call.write(create(pb.WatchEventsResponseSchema, { kind }));
      };
      const sendHost = () => send({ case: 'host', value: hostToPb(supervisor.host()) });
      openWatches++;
      streams.add(call as grpc.ServerWritableStream<unknown, unknown>);
      sendHost();
      const { backlog, unsubscribe } = supervisor.watchEvents(Number(call.request.afterSeq), (e) => send({ case: 'event', value: eventToPb(e) }));
      for (const e of backlog) send({ case: 'event', value: eventToPb(e) });
      const offHost = supervisor.onHostChange(sendHost);
      const beat = setInterval(() => {
        lastContact = clock.now();
        send({ case: 'heartbeat', value: create(pb.HeartbeatSchema, { timeMs: BigInt(clock.now()), seq: BigInt(supervisor.seq) }) });
      }, heartbeatMs);
      let done = false;
      const cleanup = () => {
        if (done) return;
        done = true;
        openWatches--;
        lastContact = clock.now();
        clearInterval(beat);
        unsubscribe();
        offHost();
        streams.delete(call as grpc.ServerWritableStream<unknown, unknown>);
      };
      call.on('cancelled', cleanup);
      call.on('close', cleanup);
      call.on('finish', cleanup);
      call.on('error', cleanup);
    },

    streamLogs: (call: grpc.ServerWritableStream<pb.StreamLogsRequest, pb.StreamLogsResponse>) => {
      let result: ReturnType<Supervisor['logs']>;
      try {
        authorize(call.metadata);
        const tail = Math.min(call.request.tailLines, MAX_TAIL_LINES);
        const follow = call.request.follow;
        const follower = follow
          ? {
              onLines: (lines: string[]) => {
                if (!call.cancelled) call.write(create(pb.StreamLogsResponseSchema, { lines }));
              },
              onEnd: () => {
                streams.delete(call as grpc.ServerWritableStream<unknown, unknown>);
                call.end();
              },
            }
          : undefined;
        result = supervisor.logs(call.request.instanceId, tail, follower);
      } catch (err) {
        call.emit('error', toServiceError(err, log));
        return;
      }
      if (result.lines.length) call.write(create(pb.StreamLogsResponseSchema, { lines: result.lines }));
      if (!result.following) {
        call.end();
        return;
      }
      streams.add(call as grpc.ServerWritableStream<unknown, unknown>);
      const cleanup = () => {
        result.unsubscribe();
        streams.delete(call as grpc.ServerWritableStream<unknown, unknown>);
      };
      call.on('cancelled', cleanup);
      call.on('close', cleanup);
      call.on('error', cleanup);
    },
  };

  const server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 });
  server.addService(agentServiceDefinition, handlers);
  const credentials = options.tls
    ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: options.tls.cert, private_key: options.tls.key }], false)
    : grpc.ServerCredentials.createInsecure();
  const bindHost = host.includes(':') ? `[${host}]` : host;
  let port: number;
  try {
    port = await new Promise<number>((resolve, reject) =>
      server.bindAsync(`${bindHost}:${options.port ?? 0}`, credentials, (err, p) => (err ? reject(err) : resolve(p))),
    );
  } catch (err) {
    supervisor.close();
    unlock();
    // grpc-js binds exclusively; its message buries the errno: say it as every server of ours does.
    const errno = /\b(EADDRINUSE|EACCES|EADDRNOTAVAIL)\b/.exec(String((err as Error).message))?.[1];
    throw errno ? new ListenError(host, options.port ?? 0, errno) : err;
  }

  // The control plane is "present" while it calls or keeps a watch stream open.
  const graceMs = options.lostControlPlaneGraceMs ?? AGENT_DEFAULTS.lostControlPlaneGraceMs;
  let stoppingAll = false;
  const lostTimer =
    graceMs > 0
      ? setInterval(
          () => {
            if (stoppingAll || openWatches > 0 || clock.now() - lastContact <= graceMs || !supervisor.hasActive()) return;
            stoppingAll = true;
            log.warn('control plane lost: stopping every instance', { silentMs: clock.now() - lastContact });
            void supervisor.stopAll(StopReason.controlPlaneLost).finally(() => {
              stoppingAll = false;
            });
          },
          Math.max(50, Math.min(1000, Math.floor(graceMs / 4))),
        )
      : undefined;
  lostTimer?.unref();

  log.info('agent listening', { address: `${bindHost}:${port}`, runtime: runtimeKind, agentId, gpus: gpus.total, gpuSource: gpus.inventory.source });

  let closing: Promise<void> | undefined;
  return {
    address: `${bindHost}:${port}`,
    port,
    agentId,
    supervisor,
    close: () =>
      (closing ??= (async () => {
        if (lostTimer) clearInterval(lostTimer);
        for (const s of streams) s.end();
        streams.clear();
        await new Promise<void>((resolve) => {
          const force = setTimeout(() => {
            server.forceShutdown();
            resolve();
          }, 2000);
          server.tryShutdown(() => {
            clearTimeout(force);
            resolve();
          });
        });
        supervisor.close();
        unlock();
      })()),
  };
}
