// After a restart on the same data dir: take over the instances the state file records. What still
// runs is watched again (and its GPUs and ports held again), what is gone is marked failed (or
// stopped, when it was being stopped), and what the runtime runs for this agent that no active
// record accounts for (an orphan) is stopped and removed.
import type { Logger } from '../lib/log.js';
import { FailureReason } from './errors.js';
import type { InstanceLauncher } from './instance-launch.js';
import type { InstanceResources } from './instance-resources.js';
import type { InstanceStopper } from './instance-stop.js';
import type { InstanceTable } from './instance-table.js';
import type { Runtime } from './runtime.js';
import type { InstanceRecord, RuntimeRef } from './state.js';
import { ACTIVE_STATES } from './types.js';

export interface InstanceAdopterOptions {
  table: InstanceTable;
  resources: InstanceResources;
  launcher: InstanceLauncher;
  stopper: InstanceStopper;
  runtime: Runtime;
  /** SIGTERM-to-SIGKILL grace for orphans. */
  stopGraceMs: number;
  logger: Logger;
}

export class InstanceAdopter {
  constructor(private readonly o: InstanceAdopterOptions) {}

  /** Takes over the instances recorded in the state file. Call once, before serving. */
  async adopt(): Promise<void> {
    const { runtime } = this.o;
    await runtime.init?.();
    const refusal = this.o.resources.gpuRefusal(1);
    if (refusal) this.o.logger.warn('GPU launches will be refused', { detail: refusal });
    // What the runtime runs for this agent, by instance id (labels or the environment say which).
    const found = await runtime.discover();
    for (const rec of Object.values(this.o.table.records)) {
      if (ACTIVE_STATES.has(rec.info.state)) await this.adoptOne(rec, found);
    }
    await this.stopOrphans(found);
  }

  private async adoptOne(rec: InstanceRecord, found: Map<string, RuntimeRef[]>): Promise<void> {
    const { info } = rec;
    const { runtime, table } = this.o;
    // Killed between the runtime's start and the state-file write: take the one the runtime found.
    if (!rec.ref && found.get(info.instanceId)?.length === 1) {
      rec.ref = found.get(info.instanceId)![0]!;
      info.runtimeId = runtime.describe(rec.ref);
      table.save();
    }
    const running = rec.ref ? await runtime.isRunning(rec.ref) : false;
    if (!running) {
      if (rec.ref) await runtime.stop(rec.ref, 0); // leftovers of its process group
      const wasStopping = info.state === 'stopping';
      table.transition(
        rec,
        wasStopping ? 'stopped' : 'failed',
        wasStopping ? '' : 'Instance is no longer running',
        wasStopping ? '' : FailureReason.lost,
        wasStopping ? '' : 'The instance was not running when the agent restarted',
      );
      return;
    }
    this.o.resources.claim(info);
    await runtime
      .resume?.(info.spec, rec.ref!)
      .catch((err: unknown) => this.o.logger.warn('resuming an adopted instance failed', { instanceId: info.instanceId, err }));
    const live = table.newLive(info.instanceId);
    this.o.launcher.watch(rec, live);
    this.o.logger.info('adopted instance', { instanceId: info.instanceId, state: info.state, runtimeId: info.runtimeId });
    if (info.state === 'pending') live.launching = this.o.launcher.awaitReady(rec, live);
    else if (info.state === 'stopping') void this.o.stopper.stop(info.instanceId).catch(() => {});
  }

  /** Processes or containers of this agent that no active record accounts for. */
  private async stopOrphans(found: Map<string, RuntimeRef[]>): Promise<void> {
    const { runtime } = this.o;
    for (const [id, refs] of found) {
      const rec = this.o.table.records[id];
      for (const ref of refs) {
        const ours = rec && ACTIVE_STATES.has(rec.info.state) && rec.ref && runtime.describe(rec.ref) === runtime.describe(ref);
        if (ours) continue;
        this.o.logger.warn('stopping orphan', { instanceId: id, runtimeId: runtime.describe(ref) });
        await runtime.stop(ref, this.o.stopGraceMs);
        await runtime.remove(ref);
      }
    }
  }
}
