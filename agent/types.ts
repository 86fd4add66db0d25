// The agent's plain data types: what the supervisor works with, what the state file holds and what
// the typed client returns. The protobuf messages are converted to and from these in convert.ts.

export const INSTANCE_STATES = ['pending', 'ready', 'failed', 'stopping', 'stopped', 'removed'] as const;
/** `removed` appears only in events: a removed instance is no longer listed. */
export type InstanceState = (typeof INSTANCE_STATES)[number];

/** States in which an instance holds its GPUs and ports and has (or may have) a running process. */
export const ACTIVE_STATES: ReadonlySet<InstanceState> = new Set(['pending', 'ready', 'stopping']);

export type RuntimeKind = 'process' | 'docker';

/** The launch spec as the control plane sends it (see LaunchSpec in proto/rc/agent/v1/agent.proto). */
export interface LaunchSpec {
  instanceId: string;
  image: string;
  instanceType: string;
  startCommand: string;
  env: Record<string, string>;
  /** Routed ports inside the instance; the first is the main one (PORT, readiness). */
  ports: number[];
  gpuCount: number;
  diskGb: number;
  sshPublicKey: string;
  /** An absolute host path or a volume name; empty: no persistent storage. */
  volume: string;
  /** Relative path -> content, written under the instance directory before start. */
  files: Record<string, Uint8Array>;
  /** 0: the agent's default. */
  readyTimeoutMs: number;
}

/** What callers may leave out of a LaunchSpec. */
export type LaunchSpecInput = Pick<LaunchSpec, 'instanceId'> &
  Partial<Omit<LaunchSpec, 'files'>> & {
    files?: Record<string, Uint8Array | string>;
  };

/** A routed port and where it is reachable. */
export interface Endpoint {
  port: number;
  host: string;
  hostPort: number;
}

export interface InstanceInfo {
  instanceId: string;
  state: InstanceState;
  message: string;
  /** Stable failure code (see agent/README.md); empty unless failed (or stopped by the agent itself). */
  reason: string;
  detail: string;
  seq: number;
  createdAtMs: number;
  updatedAtMs: number;
  runtime: RuntimeKind;
  gpus: number[];
  endpoints: Endpoint[];
  /** The launch spec; file contents are never echoed back (only their paths, with empty content). */
  spec: LaunchSpec;
  /** Process id (process runtime) or container id (docker). */
  runtimeId: string;
}

export interface InstanceEvent {
  instanceId: string;
  state: InstanceState;
  message: string;
  reason: string;
  detail: string;
  seq: number;
  timeMs: number;
}

/** One GPU's telemetry sample (agent/gpu-telemetry.ts). */
export interface GpuUsage {
  /** nvidia-smi's utilization.gpu: percent of the last sample period a kernel ran. */
  utilizationPct: number;
  memoryUsedMb: number;
  sampledAtMs: number;
}

export interface Gpu {
  index: number;
  model: string;
  memoryMb: number;
  /** Empty when free. */
  instanceId: string;
  /** nvidia-smi's GPU UUID; absent for simulated GPUs. */
  uuid?: string;
  /** The last telemetry sample; absent for simulated GPUs, with sampling off, or when the last call failed. */
  usage?: GpuUsage;
}

export interface HostInfo {
  agentId: string;
  hostname: string;
  runtime: RuntimeKind;
  advertiseHost: string;
  gpus: Gpu[];
  freeGpus: number;
  gpuSource: 'nvidia-smi' | 'configured';
}

export interface Heartbeat {
  timeMs: number;
  seq: number;
}

/** One item of the WatchEvents stream. */
export type WatchItem = { kind: 'event'; event: InstanceEvent } | { kind: 'heartbeat'; heartbeat: Heartbeat } | { kind: 'host'; host: HostInfo };

export interface ReconcileResult {
  removedInstanceIds: string[];
  unknownInstanceIds: string[];
}
