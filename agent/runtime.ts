// The seam between the supervisor and the ways an instance can run (local process, container).
import type { EngineGpuSupport } from './gpu-support.js';
import type { LaunchSpec, RuntimeKind } from './types.js';
import type { RuntimeRef } from './state.js';

export interface StartContext {
  spec: LaunchSpec;
  /** GPU indexes assigned to the instance. */
  gpus: number[];
  /** What container device requests name (nvidia-smi UUIDs); undefined when the GPUs are simulated. */
  gpuDeviceIds: string[] | undefined;
  /** Routed port (inside the instance) -> host port the agent allocated for it. */
  hostPorts: Map<number, number>;
  /** The instance's own directory under the data dir. */
  instanceDir: string;
  /** Working directory (process runtime) and root of `spec.files`; mounted at /rc in containers. */
  homeDir: string;
  /** Where stdout and stderr go. */
  logFile: string;
  /** Persistent storage on the host, when the spec asks for a volume path; undefined otherwise. */
  volumePath: string | undefined;
  /** Variables the agent sets (they override the spec's env): RC_INSTANCE_ID, RC_AGENT_ID, GPU lists. */
  agentEnv: Record<string, string>;
  /** Progress for pending messages ("pulling image", ...). */
  onProgress(message: string): void;
  /** Aborted when the instance is stopped before it finished starting. */
  signal: AbortSignal;
}

export interface ExitInfo {
  /** Exit code; null when killed by a signal or unknown (an adopted process). */
  code: number | null;
  signal: string | null;
}

/** A start failure with a stable reason (FailureReason) for the instance's status. */
export class StartFailure extends Error {
  constructor(
    readonly reason: string,
    readonly detail: string,
  ) {
    super(detail);
  }
}

export interface Runtime {
  readonly kind: RuntimeKind;
  /** The host address instance ports are published on (host ports are allocated there). */
  readonly checkHost: string;
  /** Containers: whether the engine can give them NVIDIA GPUs (known after init); undefined: no check (host processes use the host's driver). */
  readonly gpuSupport?: EngineGpuSupport;
  /** Connects to what the runtime needs (the engine); called once before anything else. */
  init?(): Promise<void>;
  /** After an agent restart, before an adopted instance is watched again (e.g. the broker relay). */
  resume?(spec: LaunchSpec, ref: RuntimeRef): Promise<void>;
  /**
   * Where readiness probes reach the app listening on routed `port` (published on `hostPort`):
   * the app itself, never a proxy in front of it (docker-proxy accepts before the app listens).
   */
  probeAddress(ref: RuntimeRef, port: number, hostPort: number): Promise<{ host: string; port: number }>;
  /** Starts the instance; throws StartFailure on a failure the instance's status should report. */
  start(ctx: StartContext): Promise<RuntimeRef>;
  /** A short id to report: pid or container id. */
  describe(ref: RuntimeRef): string;
  /** After an agent restart: does the recorded instance still run (the same process, not a reused pid)? */
  isRunning(ref: RuntimeRef): Promise<boolean>;
  /** Calls `onExit` once when the instance's main process or container ends. Returns a cancel function. */
  watchExit(ref: RuntimeRef, onExit: (exit: ExitInfo) => void): () => void;
  /** Copies the instance's output into `logFile` when the runtime does not write it there itself. Returns a stop function. */
  attachLogs?(ref: RuntimeRef, logFile: string): () => void;
  /** Stops the instance: SIGTERM (or docker stop), then a kill after `graceMs`. Safe to repeat. */
  stop(ref: RuntimeRef, graceMs: number): Promise<void>;
  /** Frees what the runtime holds for a stopped instance (the container). Safe to repeat. */
  remove(ref: RuntimeRef): Promise<void>;
  /** Instances of this agent the runtime can see (instance id -> ref), to find orphans. */
  discover(): Promise<Map<string, RuntimeRef[]>>;
  /** Releases what the runtime holds in the agent (connections, relays); instances keep running. */
  close?(): void;
}
