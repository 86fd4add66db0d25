// The host agent: a gRPC server (rc.agent.v1.AgentService) in front of the supervisor.
// Every call must carry the shared token; the agent stops its instances on its own when the
// control plane has been silent for longer than lostControlPlaneGraceMs.
//
// startAgent puts the parts together: the directories and their lock (data-dir.ts), the state
// file, the runtime (runtime-setup.ts), the GPUs, the supervisor and its reconciliation with what
// still runs (supervisor.ts, instance-adopt.ts), the service's handlers (grpc-service.ts) behind the token
// (token-auth.ts), the gRPC listener (grpc-listener.ts) and the lost control plane
// (control-plane-watchdog.ts). Closing stops serving; the instances keep running.
import type { LogCap } from './log-file.js';
import { systemClock, type Clock } from '../lib/clock.js';
import { randomId } from '../lib/ids.js';
import { createLogger, type Logger } from '../lib/log.js';
import { ControlPlaneWatchdog } from './control-plane-watchdog.js';
import { lockDataDir, prepareAgentDirs } from './data-dir.js';
import { AgentInvalidArgumentError } from './errors.js';
import { detectGpus, GpuAllocator, type GpuConfig } from './gpus.js';
import { GpuSampler } from './gpu-telemetry.js';
import { GrpcListener } from './grpc-listener.js';
import { AgentGrpcService } from './grpc-service.js';
import { createRuntime, type RuntimeSettings } from './runtime-setup.js';
import { StateStore } from './state.js';
import { Supervisor } from './supervisor.js';
import { TokenAuth } from './token-auth.js';
import type { RuntimeKind } from './types.js';

export interface AgentOptions extends RuntimeSettings {
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
  /** GPU telemetry: one nvidia-smi call for all GPUs this often (GPUs found by nvidia-smi only); 0: off. */
  gpuSampleMs?: number;
  /** Where instance host ports are reachable; default: `host` (127.0.0.1 when binding all interfaces). */
  advertiseHost?: string;
  readyTimeoutMs?: number;
  servingReadyTimeoutMs?: number;
  stopGraceMs?: number;
  /** Bytes of output kept per instance, rotated (agent/log-file.ts; default 2 x 20 MiB). */
  logCap?: LogCap;
  /** Stop every instance after this long without the control plane; 0 never. */
  lostControlPlaneGraceMs?: number;
  heartbeatMs?: number;
  /** Instance homes and process volumes, outside the data dir; default `<dataDir>-instances`. */
  instancesDir?: string;
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
  gpuSampleMs: 5_000,
} as const;

export async function startAgent(options: AgentOptions): Promise<AgentHandle> {
  if (!options.token || options.token.length < 16) throw new AgentInvalidArgumentError('The agent token must be at least 16 characters');
  const log = (options.logger ?? createLogger()).child({ part: 'agent' });
  const clock = options.clock ?? systemClock;
  const host = options.host ?? '127.0.0.1';
  const dirs = prepareAgentDirs(options.dataDir, options.instancesDir);
  const unlock = lockDataDir(dirs.dataDir);
  const store = new StateStore(dirs.dataDir, () => randomId('agent_', 9));
  const agentId = store.state.agentId;
  const runtimeKind = options.runtime ?? 'process';
  const advertiseHost = options.advertiseHost ?? (host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host);
  const runtime = createRuntime(runtimeKind, options, { agentId, host, advertiseHost, dirs, logger: log });
  const gpuConfig: GpuConfig = { ...AGENT_DEFAULTS.gpus, ...options.gpus };
  const gpus = new GpuAllocator(detectGpus(gpuConfig));
  const sampleMs = options.gpuSampleMs ?? AGENT_DEFAULTS.gpuSampleMs;
  // Real GPUs only: simulated ones report nothing rather than made-up numbers.
  const sampler =
    gpus.inventory.source === 'nvidia-smi' && sampleMs > 0
      ? new GpuSampler({ command: gpuConfig.command ?? 'nvidia-smi', intervalMs: sampleMs, clock, logger: log, onChange: () => supervisor.notifyHost() })
      : undefined;
  const supervisor = new Supervisor({
    store,
    runtime,
    gpus,
    gpuUsage: sampler && ((index) => sampler.usage(index)),
    logger: log,
    clock,
    advertiseHost,
    readyTimeoutMs: options.readyTimeoutMs ?? AGENT_DEFAULTS.readyTimeoutMs,
    servingReadyTimeoutMs: options.servingReadyTimeoutMs ?? AGENT_DEFAULTS.servingReadyTimeoutMs,
    stopGraceMs: options.stopGraceMs ?? AGENT_DEFAULTS.stopGraceMs,
    logCap: options.logCap,
    instancesRoot: dirs.instancesRoot,
  });
  const release = () => {
    sampler?.stop();
    supervisor.close();
    unlock();
  };
  let listener: GrpcListener;
  let watchdog: ControlPlaneWatchdog;
  let service: AgentGrpcService;
  try {
    await supervisor.adopt();
    const graceMs = options.lostControlPlaneGraceMs ?? AGENT_DEFAULTS.lostControlPlaneGraceMs;
    watchdog = new ControlPlaneWatchdog({ supervisor, clock, graceMs, logger: log });
    const heartbeatMs = options.heartbeatMs ?? AGENT_DEFAULTS.heartbeatMs;
    service = new AgentGrpcService({ supervisor, auth: new TokenAuth(options.token), watchdog, clock, heartbeatMs, logger: log });
    listener = await GrpcListener.listen(service.handlers(), { host, port: options.port ?? 0, tls: options.tls });
  } catch (err) {
    release();
    throw err;
  }
  watchdog.start();
  sampler?.start();
  log.info('agent listening', { address: listener.address, runtime: runtimeKind, agentId, gpus: gpus.total, gpuSource: gpus.inventory.source });

  let closing: Promise<void> | undefined;
  return {
    address: listener.address,
    port: listener.port,
    agentId,
    supervisor,
    close: () =>
      (closing ??= (async () => {
        watchdog.stop();
        service.endStreams();
        await listener.close();
        release();
      })()),
  };
}
