// Ending instances: stop (the runtime's SIGTERM-then-kill, or docker stop), remove (the record,
// the runtime's leftovers and the instance's files), reconcile with the list the control plane
// wants, and stop everything when the control plane has been gone too long.
//
// pending | ready -> stopping -> stopped          any -> removed (event only)
import { AgentInstanceNotFoundError } from './errors.js';
import type { InstanceFiles } from './instance-files.js';
import type { InstanceResources } from './instance-resources.js';
import type { InstanceTable } from './instance-table.js';
import type { Runtime } from './runtime.js';
import { ACTIVE_STATES, type InstanceInfo, type ReconcileResult } from './types.js';

export interface InstanceStopperOptions {
  table: InstanceTable;
  resources: InstanceResources;
  files: InstanceFiles;
  runtime: Runtime;
  /** SIGTERM-to-SIGKILL grace when the caller gives none. */
  stopGraceMs: number;
}

export class InstanceStopper {
  constructor(private readonly o: InstanceStopperOptions) {}

  /** Stops an instance; repeating it (or stopping a failed one) returns the current status. */
  async stop(id: string, graceMs = this.o.stopGraceMs, reason = ''): Promise<InstanceInfo> {
    const { table } = this.o;
    const rec = table.records[id];
    if (!rec) throw new AgentInstanceNotFoundError(id);
    const live = table.liveOf(id);
    if (live?.failing) {
      await live.failing;
      return rec.info;
    }
    if (live?.stopping) {
      await live.stopping;
      return rec.info;
    }
    if (!ACTIVE_STATES.has(rec.info.state)) return rec.info;
    const l = live ?? table.newLive(id);
    l.stopping = (async () => {
      if (rec.info.state !== 'stopping') table.transition(rec, 'stopping', 'stopping');
      l.abort.abort();
      await l.launching?.catch(() => {});
      await l.failing;
      if (rec.info.state !== 'stopping') return; // it failed while starting; the launch cleaned up
      if (rec.ref) await this.o.runtime.stop(rec.ref, graceMs);
      table.transition(rec, 'stopped', reason ? `Stopped by the agent` : 'stopped', reason, '');
      table.dropLive(id, l);
      this.o.resources.release(rec.info);
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
  async remove(id: string, graceMs = this.o.stopGraceMs): Promise<boolean> {
    const { table } = this.o;
    const rec = table.records[id];
    if (!rec) return false;
    await this.stop(id, graceMs);
    if (table.records[id] !== rec) return false; // a concurrent remove won
    if (rec.ref) await this.o.runtime.remove(rec.ref);
    delete table.records[id];
    table.transition(rec, 'removed', 'removed', '', '', false);
    table.save();
    this.o.files.remove(id);
    return true;
  }

  /** Stops and removes every instance not in `wanted`; reports wanted ids this host does not know. */
  async reconcile(wanted: string[]): Promise<ReconcileResult> {
    const want = new Set(wanted);
    const unwanted = Object.keys(this.o.table.records).filter((id) => !want.has(id));
    await Promise.all(unwanted.map((id) => this.stop(id, this.o.stopGraceMs, 'unwanted').catch(() => undefined)));
    await Promise.all(unwanted.map((id) => this.remove(id)));
    return { removedInstanceIds: unwanted, unknownInstanceIds: [...want].filter((id) => !this.o.table.records[id]) };
  }

  /** Stops every active instance (the control plane has been gone too long). */
  async stopAll(reason: string): Promise<string[]> {
    const ids = this.o.table.activeIds();
    await Promise.all(ids.map((id) => this.stop(id, this.o.stopGraceMs, reason).catch(() => undefined)));
    return ids;
  }
}
