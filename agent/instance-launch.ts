// Launching an instance and watching it until it ends: the record and its GPUs (taken at once, so
// concurrent starts never share one), host ports, the instance's files, the runtime's start,
// readiness, and exit detection. A failure at any step kills what is left before the status says
// `failed`, so a caller who sees `failed` can trust that nothing of the instance runs any more.
//
// pending ("starting" | "pulling image" | "waiting for port" | "waiting for health") -> ready
//    \-> failed (reason, detail)          ready -> failed (exited)
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import { AgentSpecMismatchError, FailureReason } from './errors.js';
import { instanceGpuEnv } from './gpus.js';
import type { InstanceFiles } from './instance-files.js';
import type { InstanceOutput } from './instance-output.js';
import type { InstanceResources } from './instance-resources.js';
import type { InstanceTable, Live } from './instance-table.js';
import { SERVING_TYPES, waitReady } from './readiness.js';
import { StartFailure, type ExitInfo, type Runtime } from './runtime.js';
import { redactSpec, specHash, validateSpec } from './spec.js';
import type { InstanceRecord } from './state.js';
import type { InstanceInfo, LaunchSpec } from './types.js';

export interface InstanceLauncherOptions {
  table: InstanceTable;
  resources: InstanceResources;
  output: InstanceOutput;
  files: InstanceFiles;
  runtime: Runtime;
  /** Where instance ports are reachable from the control plane and gateway. */
  advertiseHost: string;
  /** Readiness deadline when the spec gives none. */
  readyTimeoutMs: number;
  /** Readiness deadline for vllm and sglang when the spec gives none (weights download first). */
  servingReadyTimeoutMs: number;
  /** SIGTERM-to-SIGKILL grace for what is left of a failed instance. */
  stopGraceMs: number;
  logger: Logger;
  clock: Clock;
}

export class InstanceLauncher {
  constructor(private readonly o: InstanceLauncherOptions) {}

  /**
   * Starts an instance (or returns the existing one for a repeated call with the same spec). The
   * record is created synchronously, so concurrent calls with one id cannot both start it, and GPUs
   * are assigned synchronously, so concurrent starts never share a GPU.
   */
  start(input: LaunchSpec): { info: InstanceInfo; created: boolean } {
    const { table, resources, runtime } = this.o;
    const spec = validateSpec(input);
    const hash = specHash(spec);
    const existing = table.records[spec.instanceId];
    if (existing) {
      if (existing.specHash !== hash) throw new AgentSpecMismatchError(spec.instanceId);
      return { info: existing.info, created: false };
    }
    const now = this.o.clock.now();
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
        runtime: runtime.kind,
        gpus: [],
        endpoints: [],
        spec: redactSpec(spec),
        runtimeId: '',
      },
    };
    table.records[spec.instanceId] = rec;
    const refusal = resources.gpuRefusal(spec.gpuCount);
    if (refusal) {
      table.transition(rec, 'failed', 'GPUs cannot be used in containers on this host', FailureReason.gpuRuntimeMissing, refusal);
      return { info: rec.info, created: true };
    }
    const gpus = resources.gpus.allocate(spec.instanceId, spec.gpuCount);
    if (!gpus) {
      const { free, total } = resources.gpus;
      table.transition(rec, 'failed', 'Not enough free GPUs', FailureReason.gpusUnavailable, `Requested ${spec.gpuCount} GPUs; ${free} of ${total} are free`);
      return { info: rec.info, created: true };
    }
    rec.info.gpus = gpus;
    table.transition(rec, 'pending', 'starting');
    resources.hostChanged();
    const live = table.newLive(spec.instanceId);
    live.launching = this.launch(rec, spec, live);
    return { info: rec.info, created: true };
  }

  private async launch(rec: InstanceRecord, spec: LaunchSpec, live: Live): Promise<void> {
    const { table, runtime } = this.o;
    const id = spec.instanceId;
    try {
      const hostPorts = await this.o.resources.allocatePorts(spec.ports);
      rec.info.endpoints = spec.ports.map((port) => ({ port, host: this.o.advertiseHost, hostPort: hostPorts.get(port)! }));
      const { instanceDir, homeDir, volumePath } = this.o.files.provision(spec, runtime.kind);
      if (live.abort.signal.aborted) return;
      const gpuDeviceIds = this.o.resources.gpus.deviceIds(rec.info.gpus);
      const ref = await runtime.start({
        spec,
        gpus: rec.info.gpus,
        gpuDeviceIds,
        hostPorts,
        instanceDir,
        homeDir,
        logFile: this.o.output.file(id),
        volumePath,
        agentEnv: {
          RC_INSTANCE_ID: id,
          ...instanceGpuEnv(runtime.kind, rec.info.gpus, gpuDeviceIds),
          ...(spec.sshPublicKey ? { SSH_PUBLIC_KEY: spec.sshPublicKey } : {}),
        },
        onProgress: (message) => {
          if (rec.info.state === 'pending' && rec.info.message !== message) table.transition(rec, 'pending', message);
        },
        signal: live.abort.signal,
      });
      rec.ref = ref;
      rec.info.runtimeId = runtime.describe(ref);
      table.save();
      this.watch(rec, live);
      if (live.abort.signal.aborted || rec.info.state !== 'pending') return;
      await this.awaitReady(rec, live);
    } catch (err) {
      if (rec.info.state !== 'pending' || live.abort.signal.aborted) return;
      const failure = err instanceof StartFailure ? err : new StartFailure(FailureReason.startFailed, (err as Error).message);
      this.o.logger.warn('instance failed to start', { instanceId: id, reason: failure.reason, detail: failure.detail });
      await this.fail(rec, live, 'Instance failed to start', failure.reason, failure.detail);
    }
  }

  /** Exit detection and log tailing for a started (or adopted) instance. */
  watch(rec: InstanceRecord, live: Live): void {
    const ref = rec.ref!;
    this.o.output.follow(rec.info.instanceId, ref, live);
    live.cancelExitWatch = this.o.runtime.watchExit(ref, (exit) => void this.onExit(rec, live, exit));
  }

  /** Waits until the instance's main port answers (HTTP health for serving types), then marks it ready. */
  async awaitReady(rec: InstanceRecord, live: Live): Promise<void> {
    const { spec } = rec.info;
    const main = rec.info.endpoints[0];
    const { table } = this.o;
    if (main) {
      const serving = SERVING_TYPES.has(spec.instanceType);
      table.transition(rec, 'pending', 'waiting for port');
      // The app itself, not the published port: a proxy in front of it accepts before it listens.
      let target: { host: string; port: number };
      try {
        target = await this.o.runtime.probeAddress(rec.ref!, main.port, main.hostPort);
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
        timeoutMs: spec.readyTimeoutMs || (serving ? this.o.servingReadyTimeoutMs : this.o.readyTimeoutMs),
        onPortOpen: serving
          ? () => {
              if (rec.info.state === 'pending') table.transition(rec, 'pending', 'waiting for health');
            }
          : undefined,
      });
      if (rec.info.state !== 'pending' || live.failing) return; // exited, stopped or failed meanwhile
      if (!result.ok) {
        if (result.aborted) return;
        const detail = this.o.output.withLastLines(rec.info.instanceId, live, result.detail);
        await this.fail(rec, live, 'Instance did not become ready', FailureReason.readyTimeout, detail);
        return;
      }
    }
    table.transition(rec, 'ready', 'ready');
  }

  private async onExit(rec: InstanceRecord, live: Live, exit: ExitInfo): Promise<void> {
    if (live.failing || (rec.info.state !== 'pending' && rec.info.state !== 'ready')) return; // stopping: expected
    const reason = exit.code === 127 ? FailureReason.commandNotFound : exit.code === 126 ? FailureReason.commandNotExecutable : FailureReason.exited;
    const how = exit.code !== null ? `exit status ${exit.code}` : exit.signal ? `signal ${exit.signal}` : 'exit status unknown (adopted process)';
    live.abort.abort();
    const detail = this.o.output.withLastLines(rec.info.instanceId, live, `The instance's process ended: ${how}`);
    await this.fail(rec, live, `Instance exited (${how})`, reason, detail);
  }

  /**
   * Kills what is left of the instance, then marks it failed and frees what it holds: a caller who
   * sees `failed` can trust that nothing of the instance runs any more.
   */
  private fail(rec: InstanceRecord, live: Live, message: string, reason: string, detail: string): Promise<void> {
    if (live.failing) return live.failing;
    live.abort.abort();
    live.failing = (async () => {
      if (rec.ref) await this.o.runtime.stop(rec.ref, this.o.stopGraceMs).catch((err: unknown) => this.o.logger.warn('cleanup stop failed', { err }));
      this.o.table.transition(rec, 'failed', message, reason, detail);
      this.o.table.dropLive(rec.info.instanceId, live);
      this.o.resources.release(rec.info);
    })();
    return live.failing;
  }
}
