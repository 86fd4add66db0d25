// The supervisor: the lifecycle of every instance on this host, as the gRPC service (and the
// control-plane watchdog) call it. A facade over one module per concern, which share the instance
// table (so a status changes in one place):
//   instance-table.ts      the records (state file), what lives only while the agent runs, status changes
//   instance-launch.ts     start, the runtime's start, readiness, exit detection, failure cleanup
//   instance-stop.ts       stop, remove, reconcile, stop everything
//   instance-adopt.ts      after a restart: adopt what still runs, fail what is gone, kill orphans
//   instance-resources.ts  the GPUs and host ports instances hold
//   instance-events.ts     what a watcher of events sees (replay or snapshot, then live)
//   instance-output.ts     instance output: the log file, following it, failure details
// Apart from it: what is written for an instance before it starts (instance-files.ts), the host
// status and its watchers (host-status.ts), the GPU variables and the engine's GPU support
// (gpus.ts, gpu-support.ts).
//
// pending ("starting" | "pulling image" | "waiting for port") -> ready -> stopping -> stopped
//    \-> failed (reason, detail)          ready -> failed (exited)        any -> removed (event only)
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import { AgentClosingError } from './errors.js';
import { EventHub, type EventListener } from './events.js';
import type { GpuAllocator } from './gpus.js';
import type { LogCap } from './log-file.js';
import type { LogFollower } from './logs.js';
import { HostStatus } from './host-status.js';
import { InstanceAdopter } from './instance-adopt.js';
import { InstanceEvents } from './instance-events.js';
import { InstanceFiles } from './instance-files.js';
import { InstanceLauncher } from './instance-launch.js';
import { InstanceOutput } from './instance-output.js';
import { InstanceResources } from './instance-resources.js';
import { InstanceStopper } from './instance-stop.js';
import { InstanceTable } from './instance-table.js';
import type { Runtime } from './runtime.js';
import type { RuntimeRef, StateStore } from './state.js';
import type { GpuUsage, HostInfo, InstanceEvent, InstanceInfo, LaunchSpec, ReconcileResult } from './types.js';

export interface SupervisorOptions {
  store: StateStore;
  runtime: Runtime;
  gpus: GpuAllocator;
  /** Where instance ports are reachable from the control plane and gateway. */
  advertiseHost: string;
  /** Readiness deadline when the spec gives none. */
  readyTimeoutMs: number;
  /** Readiness deadline for vllm and sglang when the spec gives none (weights download first). */
  servingReadyTimeoutMs: number;
  /** SIGTERM-to-SIGKILL grace when the caller gives none. */
  stopGraceMs: number;
  /**
   * Where instance homes (`homes/<id>`) and named process volumes (`volumes/<name>`) live: outside
   * the data dir, so an instance never needs (nor gets) a way into it.
   */
  instancesRoot: string;
  /** Bytes of output kept per instance (log-file.ts; DEFAULT_LOG_CAP when absent). */
  logCap?: LogCap;
  /** The last telemetry sample of a GPU, reported with the host status (gpu-telemetry.ts); absent: none. */
  gpuUsage?: (index: number) => GpuUsage | undefined;
  logger: Logger;
  clock: Clock;
}

export class Supervisor {
  private readonly store: StateStore;
  private readonly runtime: Runtime;
  readonly gpus: GpuAllocator;
  private readonly table: InstanceTable;
  private readonly events: InstanceEvents;
  private readonly output: InstanceOutput;
  private readonly hostStatus: HostStatus;
  private readonly launcher: InstanceLauncher;
  private readonly stopper: InstanceStopper;
  private readonly adopter: InstanceAdopter;
  private closed = false;

  constructor(opts: SupervisorOptions) {
    const { store, runtime, gpus, logger, clock, stopGraceMs } = opts;
    this.store = store;
    this.runtime = runtime;
    this.gpus = gpus;
    const hub = new EventHub();
    const table = new InstanceTable({ store, hub, logger, clock });
    const files = new InstanceFiles(store.dir, opts.instancesRoot);
    this.hostStatus = new HostStatus({
      agentId: () => this.agentId,
      runtime: runtime.kind,
      advertiseHost: opts.advertiseHost,
      gpus,
      usage: opts.gpuUsage,
    });
    const resources = new InstanceResources(gpus, runtime, () => this.hostStatus.changed());
    const output = new InstanceOutput(table, files, runtime, opts.logCap);
    const launcher = new InstanceLauncher({
      table,
      resources,
      output,
      files,
      runtime,
      advertiseHost: opts.advertiseHost,
      readyTimeoutMs: opts.readyTimeoutMs,
      servingReadyTimeoutMs: opts.servingReadyTimeoutMs,
      stopGraceMs,
      logger,
      clock,
    });
    const stopper = new InstanceStopper({ table, resources, files, runtime, stopGraceMs });
    this.adopter = new InstanceAdopter({ table, resources, launcher, stopper, runtime, stopGraceMs, logger });
    this.table = table;
    this.events = new InstanceEvents(hub, table);
    this.output = output;
    this.launcher = launcher;
    this.stopper = stopper;
  }

  get agentId(): string {
    return this.store.state.agentId;
  }

  get seq(): number {
    return this.table.seq;
  }

  /** Takes over the instances recorded in the state file. Call once, before serving. */
  adopt(): Promise<void> {
    return this.adopter.adopt();
  }

  /** Starts an instance, or returns the existing one for a repeated call with the same spec (instance-launch.ts). */
  start(input: LaunchSpec): { info: InstanceInfo; created: boolean } {
    if (this.closed) throw new AgentClosingError();
    return this.launcher.start(input);
  }

  /** Stops an instance; repeating it (or stopping a failed one) returns the current status. */
  stop(id: string, graceMs?: number, reason?: string): Promise<InstanceInfo> {
    return this.stopper.stop(id, graceMs, reason);
  }

  /** Stops (if needed) and forgets an instance. Returns false when there was none. */
  remove(id: string, graceMs?: number): Promise<boolean> {
    return this.stopper.remove(id, graceMs);
  }

  /** Stops and removes every instance not in `wanted`; reports wanted ids this host does not know. */
  reconcile(wanted: string[]): Promise<ReconcileResult> {
    return this.stopper.reconcile(wanted);
  }

  /** Stops every active instance (the control plane has been gone too long). */
  stopAll(reason: string): Promise<string[]> {
    return this.stopper.stopAll(reason);
  }

  hasActive(): boolean {
    return this.table.hasActive();
  }

  list(): InstanceInfo[] {
    return this.table.list();
  }

  get(id: string): InstanceInfo | undefined {
    return this.table.records[id]?.info;
  }

  host(): HostInfo {
    return this.hostStatus.info();
  }

  /** Calls `listener` whenever the host status changes (GPU assignment, telemetry). */
  onHostChange(listener: () => void): () => void {
    return this.hostStatus.onChange(listener);
  }

  /** Tells the host's watchers that its status changed (a new telemetry sample). */
  notifyHost(): void {
    this.hostStatus.changed();
  }

  /** Buffered events after `afterSeq` (or a snapshot of every instance), then live ones (instance-events.ts). */
  watchEvents(afterSeq: number, listener: EventListener): { backlog: InstanceEvent[]; unsubscribe: () => void } {
    return this.events.watch(afterSeq, listener);
  }

  /** The last `tail` lines of an instance's output, then (with `follower`, while it lives) what follows. */
  logs(id: string, tail: number, follower?: LogFollower): { lines: string[]; following: boolean; unsubscribe: () => void } {
    return this.output.read(id, tail, follower);
  }

  /** Stops watching (instances keep running: they are adopted by the next agent on this data dir). */
  close(): void {
    this.closed = true;
    this.table.dropAllLive();
    this.runtime.close?.();
  }
}

export type { RuntimeRef };
