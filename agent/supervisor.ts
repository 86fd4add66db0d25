// The supervisor: the lifecycle of every instance on this host. It owns the state file, the GPU
// and port accounting, readiness, exit detection, logs, events, and reconciliation after a restart.
// Apart from it: what is written for an instance before it starts (instance-files.ts), the host
// status and its watchers (host-status.ts), the GPU variables and the engine's GPU support
// (gpus.ts, gpu-support.ts).
//
// pending ("starting" | "pulling image" | "waiting for port") -> ready -> stopping -> stopped
//    \-> failed (reason, detail)          ready -> failed (exited)        any -> removed (event only)
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import { AgentClosingError, AgentInstanceNotFoundError, AgentSpecMismatchError, FailureReason } from './errors.js';
import { EventHub, type EventListener } from './events.js';
import { gpuLaunchRefusal } from './gpu-support.js';
import { instanceGpuEnv, type GpuAllocator } from './gpus.js';
import { DEFAULT_LOG_CAP, type LogCap } from './log-file.js';
import { LogWatcher, readKeptLines, readLastLines, type LogFollower } from './logs.js';
import { HostStatus } from './host-status.js';
import { InstanceFiles } from './instance-files.js';
import { HostPorts } from './ports.js';
import { SERVING_TYPES, waitReady } from './readiness.js';
import { StartFailure, type ExitInfo, type Runtime } from './runtime.js';
import { redactSpec, specHash, validateSpec } from './spec.js';
import type { InstanceRecord, RuntimeRef, StateStore } from './state.js';
import {
  ACTIVE_STATES,
  type GpuUsage,
  type HostInfo,
  type InstanceEvent,
  type InstanceInfo,
  type InstanceState,
  type LaunchSpec,
  type ReconcileResult,
} from './types.js';

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

/** What exists only while the agent runs, per live instance. */
interface Live {
  abort: AbortController;
  /** Settles when the start sequence (through readiness) is over. */
  launching: Promise<void> | undefined;
  stopping: Promise<void> | undefined;
  /** Set while a failure cleans up (the status turns failed once nothing of the instance runs). */
  failing: Promise<void> | undefined;
  cancelExitWatch: (() => void) | undefined;
  stopLogCopy: (() => void) | undefined;
  logs: LogWatcher | undefined;
}

const FAILURE_LOG_LINES = 20;

export class Supervisor {
  private readonly store: StateStore;
  private readonly runtime: Runtime;
  readonly gpus: GpuAllocator;
  private readonly ports: HostPorts;
  private readonly hub = new EventHub();
  private readonly live = new Map<string, Live>();
  private readonly hostStatus: HostStatus;
  private readonly files: InstanceFiles;
  private readonly log: Logger;
  private closed = false;

  constructor(private readonly opts: SupervisorOptions) {
    this.store = opts.store;
    this.runtime = opts.runtime;
    this.gpus = opts.gpus;
    this.ports = new HostPorts(opts.runtime.checkHost);
    this.log = opts.logger;
    this.files = new InstanceFiles(opts.store.dir, opts.instancesRoot);
    this.hostStatus = new HostStatus({
      agentId: () => this.agentId,
      runtime: opts.runtime.kind,
      advertiseHost: opts.advertiseHost,
      gpus: opts.gpus,
      usage: opts.gpuUsage,
    });
  }

  get agentId(): string {
    return this.store.state.agentId;
  }

  get seq(): number {
    return this.store.state.seq;
  }

  private get records(): Record<string, InstanceRecord> {
    return this.store.state.instances;
  }

  private logFile(id: string): string {
    return this.files.logFile(id);
  }

  // ---- restart: adopt what still runs, fail what is gone, kill orphans -----------------------

  /** Takes over the instances recorded in the state file. Call once, before serving. */
  async adopt(): Promise<void> {
    await this.runtime.init?.();
    const refusal = this.gpuRefusal(1);
    if (refusal) this.log.warn('GPU launches will be refused', { detail: refusal });
    // What the runtime runs for this agent, by instance id (labels or the environment say which).
    const found = await this.runtime.discover();
    for (const rec of Object.values(this.records)) {
      const { info } = rec;
      if (!ACTIVE_STATES.has(info.state)) continue;
      // Killed between the runtime's start and the state-file write: take the one the runtime found.
      if (!rec.ref && found.get(info.instanceId)?.length === 1) {
        rec.ref = found.get(info.instanceId)![0]!;
        info.runtimeId = this.runtime.describe(rec.ref);
        this.store.save();
      }
      const running = rec.ref ? await this.runtime.isRunning(rec.ref) : false;
      if (!running) {
        if (rec.ref) await this.runtime.stop(rec.ref, 0); // leftovers of its process group
        this.transition(
          rec,
          info.state === 'stopping' ? 'stopped' : 'failed',
          info.state === 'stopping' ? '' : 'Instance is no longer running',
          info.state === 'stopping' ? '' : FailureReason.lost,
          info.state === 'stopping' ? '' : 'The instance was not running when the agent restarted',
        );
        continue;
      }
      this.gpus.claim(info.instanceId, info.gpus);
      this.ports.claim(info.endpoints.map((e) => e.hostPort));
      await this.runtime
        .resume?.(info.spec, rec.ref!)
        .catch((err: unknown) => this.log.warn('resuming an adopted instance failed', { instanceId: info.instanceId, err }));
      const live = this.newLive(info.instanceId);
      this.watch(rec, live);
      this.log.info('adopted instance', { instanceId: info.instanceId, state: info.state, runtimeId: info.runtimeId });
      if (info.state === 'pending') live.launching = this.awaitReady(rec, live);
      else if (info.state === 'stopping') void this.stop(info.instanceId, this.opts.stopGraceMs).catch(() => {});
    }
    // Processes or containers of this agent that no active record accounts for.
    for (const [id, refs] of found) {
      const rec = this.records[id];
      for (const ref of refs) {
        const ours = rec && ACTIVE_STATES.has(rec.info.state) && rec.ref && this.runtime.describe(rec.ref) === this.runtime.describe(ref);
        if (ours) continue;
        this.log.warn('stopping orphan', { instanceId: id, runtimeId: this.runtime.describe(ref) });
        await this.runtime.stop(ref, this.opts.stopGraceMs);
        await this.runtime.remove(ref);
      }
    }
  }

  // ---- start ----------------------------------------------------------------------------------

  /**
   * Starts an instance (or returns the existing one for a repeated call with the same spec). The
   * record is created synchronously, so concurrent calls with one id cannot both start it, and GPUs
   * are assigned synchronously, so concurrent starts never share a GPU.
   */
  start(input: LaunchSpec): { info: InstanceInfo; created: boolean } {
    if (this.closed) throw new AgentClosingError();
    const spec = validateSpec(input);
    const hash = specHash(spec);
    const existing = this.records[spec.instanceId];
    if (existing) {
      if (existing.specHash !== hash) throw new AgentSpecMismatchError(spec.instanceId);
      return { info: existing.info, created: false };
    }
    const now = this.opts.clock.now();
    const rec: InstanceRecord = {
      specHash: hash,
      info: {
        instanceId: spec.instanceId,
        state: 'pending',
        message: 'starting',
        reason: '',
        detail: '',
        seq: 0,
        createdAtMs: now,
        updatedAtMs: now,
        runtime: this.runtime.kind,
        gpus: [],
        endpoints: [],
        spec: redactSpec(spec),
        runtimeId: '',
      },
    };
    this.records[spec.instanceId] = rec;
    const refusal = this.gpuRefusal(spec.gpuCount);
    if (refusal) {
      this.transition(rec, 'failed', 'GPUs cannot be used in containers on this host', FailureReason.gpuRuntimeMissing, refusal);
      return { info: rec.info, created: true };
    }
    const gpus = this.gpus.allocate(spec.instanceId, spec.gpuCount);
    if (!gpus) {
      this.transition(
        rec,
        'failed',
        'Not enough free GPUs',
        FailureReason.gpusUnavailable,
        `Requested ${spec.gpuCount} GPUs; ${this.gpus.free} of ${this.gpus.total} are free`,
      );
      return { info: rec.info, created: true };
    }
    rec.info.gpus = gpus;
    this.transition(rec, 'pending', 'starting');
    this.notifyHost();
    const live = this.newLive(spec.instanceId);
    live.launching = this.launch(rec, spec, live);
    return { info: rec.info, created: true };
  }

  /**
   * Why a launch of `gpuCount` real GPUs cannot work here (the engine cannot give containers GPUs),
   * or undefined. Simulated GPUs are never requested from the engine, so they need nothing.
   */
  private gpuRefusal(gpuCount: number): string | undefined {
    return gpuLaunchRefusal(gpuCount, this.gpus.inventory.source, this.runtime.gpuSupport);
  }

  private newLive(id: string): Live {
    const live: Live = {
      abort: new AbortController(),
      launching: undefined,
      stopping: undefined,
      failing: undefined,
      cancelExitWatch: undefined,
      stopLogCopy: undefined,
      logs: undefined,
    };
    this.live.set(id, live);
    return live;
  }

  private async launch(rec: InstanceRecord, spec: LaunchSpec, live: Live): Promise<void> {
    const id = spec.instanceId;
    try {
      const hostPorts = new Map<number, number>();
      for (const port of spec.ports) hostPorts.set(port, await this.ports.allocate());
      rec.info.endpoints = spec.ports.map((port) => ({ port, host: this.opts.advertiseHost, hostPort: hostPorts.get(port)! }));
      const { instanceDir, homeDir, volumePath } = this.files.provision(spec, this.runtime.kind);
      if (live.abort.signal.aborted) return;
      const gpuDeviceIds = this.gpus.deviceIds(rec.info.gpus);
      const ref = await this.runtime.start({
        spec,
        gpus: rec.info.gpus,
        gpuDeviceIds,
        hostPorts,
        instanceDir,
        homeDir,
        logFile: this.logFile(id),
        volumePath,
        agentEnv: {
          RC_INSTANCE_ID: id,
          ...instanceGpuEnv(this.runtime.kind, rec.info.gpus, gpuDeviceIds),
          ...(spec.sshPublicKey ? { SSH_PUBLIC_KEY: spec.sshPublicKey } : {}),
        },
        onProgress: (message) => {
          if (rec.info.state === 'pending' && rec.info.message !== message) this.transition(rec, 'pending', message);
        },
        signal: live.abort.signal,
      });
      rec.ref = ref;
      rec.info.runtimeId = this.runtime.describe(ref);
      this.store.save();
      this.watch(rec, live);
      if (live.abort.signal.aborted || rec.info.state !== 'pending') return;
      await this.awaitReady(rec, live);
    } catch (err) {
      if (rec.info.state !== 'pending' || live.abort.signal.aborted) return;
      const failure = err instanceof StartFailure ? err : new StartFailure(FailureReason.startFailed, (err as Error).message);
      this.log.warn('instance failed to start', { instanceId: id, reason: failure.reason, detail: failure.detail });
      await this.fail(rec, live, 'Instance failed to start', failure.reason, failure.detail);
    }
  }

  /** Exit detection and log tailing for a started (or adopted) instance. */
  private watch(rec: InstanceRecord, live: Live): void {
    const ref = rec.ref!;
    live.stopLogCopy = this.runtime.attachLogs?.(ref, this.logFile(rec.info.instanceId));
    live.logs = new LogWatcher(this.logFile(rec.info.instanceId), this.opts.logCap ?? DEFAULT_LOG_CAP);
    live.cancelExitWatch = this.runtime.watchExit(ref, (exit) => void this.onExit(rec, live, exit));
  }

  private async awaitReady(rec: InstanceRecord, live: Live): Promise<void> {
    const { spec } = rec.info;
    const main = rec.info.endpoints[0];
    if (main) {
      const serving = SERVING_TYPES.has(spec.instanceType);
      this.transition(rec, 'pending', 'waiting for port');
      // The app itself, not the published port: a proxy in front of it accepts before it listens.
      let target: { host: string; port: number };
      try {
        target = await this.runtime.probeAddress(rec.ref!, main.port, main.hostPort);
      } catch (err) {
        if (rec.info.state === 'pending' && !live.failing) {
          await this.fail(rec, live, 'Instance failed to start', FailureReason.startFailed, `Could not find the instance's address: ${(err as Error).message}`);
        }
        return;
      }
      const result = await waitReady({
        host: target.host,
        port: target.port,
        http: serving,
        signal: live.abort.signal,
        timeoutMs: spec.readyTimeoutMs || (serving ? this.opts.servingReadyTimeoutMs : this.opts.readyTimeoutMs),
        onPortOpen: serving
          ? () => {
              if (rec.info.state === 'pending') this.transition(rec, 'pending', 'waiting for health');
            }
          : undefined,
      });
      if (rec.info.state !== 'pending' || live.failing) return; // exited, stopped or failed meanwhile
      if (!result.ok) {
        if (result.aborted) return;
        await this.fail(rec, live, 'Instance did not become ready', FailureReason.readyTimeout, this.withLogs(rec, live, result.detail));
        return;
      }
    }
    this.transition(rec, 'ready', 'ready');
  }

  private async onExit(rec: InstanceRecord, live: Live, exit: ExitInfo): Promise<void> {
    if (live.failing || (rec.info.state !== 'pending' && rec.info.state !== 'ready')) return; // stopping: expected
    const reason = exit.code === 127 ? FailureReason.commandNotFound : exit.code === 126 ? FailureReason.commandNotExecutable : FailureReason.exited;
    const how = exit.code !== null ? `exit status ${exit.code}` : exit.signal ? `signal ${exit.signal}` : 'exit status unknown (adopted process)';
    live.abort.abort();
    await this.fail(rec, live, `Instance exited (${how})`, reason, this.withLogs(rec, live, `The instance's process ended: ${how}`));
  }

  private withLogs(rec: InstanceRecord, live: Live, detail: string): string {
    const lines = live.logs ? live.logs.recent(FAILURE_LOG_LINES) : readLastLines(this.logFile(rec.info.instanceId), FAILURE_LOG_LINES);
    return lines.length ? `${detail}\nLast output:\n${lines.join('\n')}` : detail;
  }

  /**
   * Kills what is left of the instance, then marks it failed and frees what it holds: a caller who
   * sees `failed` can trust that nothing of the instance runs any more.
   */
  private fail(rec: InstanceRecord, live: Live, message: string, reason: string, detail: string): Promise<void> {
    if (live.failing) return live.failing;
    live.abort.abort();
    live.failing = (async () => {
      if (rec.ref) await this.runtime.stop(rec.ref, this.opts.stopGraceMs).catch((err: unknown) => this.log.warn('cleanup stop failed', { err }));
      this.transition(rec, 'failed', message, reason, detail);
      this.release(rec, live);
    })();
    return live.failing;
  }

  /** Frees GPUs, ports and watchers of an instance that reached stopped or failed. */
  private release(rec: InstanceRecord, live: Live | undefined): void {
    const id = rec.info.instanceId;
    this.gpus.release(id);
    this.ports.release(rec.info.endpoints.map((e) => e.hostPort));
    if (live) {
      live.cancelExitWatch?.();
      live.stopLogCopy?.();
      live.logs?.close();
      if (this.live.get(id) === live) this.live.delete(id);
    }
    this.notifyHost();
  }

  // ---- stop and remove --------------------------------------------------------------------------

  /** Stops an instance; repeating it (or stopping a failed one) returns the current status. */
  async stop(id: string, graceMs = this.opts.stopGraceMs, reason = ''): Promise<InstanceInfo> {
    const rec = this.records[id];
    if (!rec) throw new AgentInstanceNotFoundError(id);
    const live = this.live.get(id);
    if (live?.failing) {
      await live.failing;
      return rec.info;
    }
    if (live?.stopping) {
      await live.stopping;
      return rec.info;
    }
    if (!ACTIVE_STATES.has(rec.info.state)) return rec.info;
    const l = live ?? this.newLive(id);
    l.stopping = (async () => {
      if (rec.info.state !== 'stopping') this.transition(rec, 'stopping', 'stopping');
      l.abort.abort();
      await l.launching?.catch(() => {});
      await l.failing;
      if (rec.info.state !== 'stopping') return; // it failed while starting; fail() cleaned up
      if (rec.ref) await this.runtime.stop(rec.ref, graceMs);
      this.transition(rec, 'stopped', reason ? `Stopped by the agent` : 'stopped', reason, '');
      this.release(rec, l);
    })();
    const stopping = l.stopping;
    try {
      await stopping;
    } catch (err) {
      // The runtime could not stop it (the engine refused, EMFILE, ...): the next stop or remove
      // tries again instead of awaiting this failure forever (issue 44: destroy answered while
      // the container kept running). It stays `stopping`, and active.
      if (l.stopping === stopping) l.stopping = undefined;
      throw err;
    }
    return rec.info;
  }

  /** Stops (if needed) and forgets an instance. Returns false when there was none. */
  async remove(id: string, graceMs = this.opts.stopGraceMs): Promise<boolean> {
    const rec = this.records[id];
    if (!rec) return false;
    await this.stop(id, graceMs);
    if (this.records[id] !== rec) return false; // a concurrent remove won
    if (rec.ref) await this.runtime.remove(rec.ref);
    delete this.records[id];
    this.transition(rec, 'removed', 'removed', '', '', false);
    this.store.save();
    this.files.remove(id);
    return true;
  }

  /** Stops and removes every instance not in `wanted`; reports wanted ids this host does not know. */
  async reconcile(wanted: string[]): Promise<ReconcileResult> {
    const want = new Set(wanted);
    const unwanted = Object.keys(this.records).filter((id) => !want.has(id));
    await Promise.all(unwanted.map((id) => this.stop(id, this.opts.stopGraceMs, 'unwanted').catch(() => undefined)));
    await Promise.all(unwanted.map((id) => this.remove(id)));
    return { removedInstanceIds: unwanted, unknownInstanceIds: [...want].filter((id) => !this.records[id]) };
  }

  /** Stops every active instance (the control plane has been gone too long). */
  async stopAll(reason: string): Promise<string[]> {
    const ids = Object.values(this.records)
      .filter((r) => ACTIVE_STATES.has(r.info.state))
      .map((r) => r.info.instanceId);
    await Promise.all(ids.map((id) => this.stop(id, this.opts.stopGraceMs, reason).catch(() => undefined)));
    return ids;
  }

  hasActive(): boolean {
    return Object.values(this.records).some((r) => ACTIVE_STATES.has(r.info.state));
  }

  // ---- reads --------------------------------------------------------------------------------

  list(): InstanceInfo[] {
    return Object.values(this.records)
      .map((r) => r.info)
      .sort((a, b) => a.createdAtMs - b.createdAtMs || a.instanceId.localeCompare(b.instanceId));
  }

  get(id: string): InstanceInfo | undefined {
    return this.records[id]?.info;
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

  /**
   * The events a watcher starting now should see first: those after `afterSeq` when still
   * buffered, else a snapshot (one event per instance, its current status). Then live events.
   */
  watchEvents(afterSeq: number, listener: EventListener): { backlog: InstanceEvent[]; unsubscribe: () => void } {
    const replay = afterSeq > 0 ? (afterSeq >= this.seq ? [] : this.hub.since(afterSeq)) : undefined;
    const backlog =
      replay ??
      this.list().map((i) => ({
        instanceId: i.instanceId,
        state: i.state,
        message: i.message,
        reason: i.reason,
        detail: i.detail,
        seq: i.seq,
        timeMs: i.updatedAtMs,
      }));
    return { backlog, unsubscribe: this.hub.subscribe(listener) };
  }

  /**
   * The last `tail` lines of an instance's output and, when `follower` is given and the instance is
   * live, the lines after them. Returns `following: false` when there is nothing more to come.
   */
  logs(id: string, tail: number, follower?: LogFollower): { lines: string[]; following: boolean; unsubscribe: () => void } {
    const rec = this.records[id];
    if (!rec) throw new AgentInstanceNotFoundError(id);
    const watcher = this.live.get(id)?.logs;
    if (watcher && ACTIVE_STATES.has(rec.info.state)) {
      const r = watcher.tailAndFollow(tail, follower);
      return { lines: r.lines, following: follower !== undefined, unsubscribe: r.unsubscribe };
    }
    return { lines: readKeptLines(this.logFile(id), tail, this.opts.logCap ?? DEFAULT_LOG_CAP), following: false, unsubscribe: () => {} };
  }

  // ---- state changes --------------------------------------------------------------------------

  private transition(rec: InstanceRecord, state: InstanceState, message: string, reason = '', detail = '', save = true): void {
    const now = this.opts.clock.now();
    const seq = ++this.store.state.seq;
    Object.assign(rec.info, { state, message, reason, detail, seq, updatedAtMs: now });
    if (save) this.store.save();
    this.log.debug('instance state', { instanceId: rec.info.instanceId, state, message, reason });
    this.hub.publish({ instanceId: rec.info.instanceId, state, message, reason, detail, seq, timeMs: now });
  }

  /** Stops watching (instances keep running: they are adopted by the next agent on this data dir). */
  close(): void {
    this.closed = true;
    for (const live of this.live.values()) {
      live.abort.abort();
      live.cancelExitWatch?.();
      live.stopLogCopy?.();
      live.logs?.close();
    }
    this.live.clear();
    this.runtime.close?.();
  }
}

export type { RuntimeRef };
