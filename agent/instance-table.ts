// The instances this agent knows: their records (kept in the state file, so a restarted agent
// adopts them), what exists of each only while the agent runs (Live), and the one place a status
// changes. Every module of the supervisor reads and changes instances through it, so the event
// sequence, the state file and the published events never disagree.
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import type { EventHub } from './events.js';
import type { LogWatcher } from './logs.js';
import type { InstanceRecord, StateStore } from './state.js';
import { ACTIVE_STATES, type InstanceInfo, type InstanceState } from './types.js';

/** What exists only while the agent runs, per live instance. */
export interface Live {
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

export interface InstanceTableOptions {
  store: StateStore;
  /** Where status changes are published (WatchEvents; instance-events.ts). */
  hub: EventHub;
  logger: Logger;
  clock: Clock;
}

export class InstanceTable {
  private readonly live = new Map<string, Live>();

  constructor(private readonly opts: InstanceTableOptions) {}

  /** The sequence number of the last event (continues across restarts: it is in the state file). */
  get seq(): number {
    return this.opts.store.state.seq;
  }

  get records(): Record<string, InstanceRecord> {
    return this.opts.store.state.instances;
  }

  /** Writes the records to the state file (after a change made outside transition()). */
  save(): void {
    this.opts.store.save();
  }

  liveOf(id: string): Live | undefined {
    return this.live.get(id);
  }

  newLive(id: string): Live {
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

  /** Ends the watchers of an instance that reached stopped or failed, and forgets its live part. */
  dropLive(id: string, live: Live): void {
    live.cancelExitWatch?.();
    live.stopLogCopy?.();
    live.logs?.close();
    if (this.live.get(id) === live) this.live.delete(id);
  }

  /** Stops every watcher of every instance (they keep running, for the next agent to adopt). */
  dropAllLive(): void {
    for (const live of this.live.values()) {
      live.abort.abort();
      live.cancelExitWatch?.();
      live.stopLogCopy?.();
      live.logs?.close();
    }
    this.live.clear();
  }

  transition(rec: InstanceRecord, state: InstanceState, message: string, reason = '', detail = '', save = true): void {
    const now = this.opts.clock.now();
    const seq = ++this.opts.store.state.seq;
    Object.assign(rec.info, { state, message, reason, detail, seq, updatedAtMs: now });
    if (save) this.opts.store.save();
    this.opts.logger.debug('instance state', { instanceId: rec.info.instanceId, state, message, reason });
    this.opts.hub.publish({ instanceId: rec.info.instanceId, state, message, reason, detail, seq, timeMs: now });
  }

  list(): InstanceInfo[] {
    return Object.values(this.records)
      .map((r) => r.info)
      .sort((a, b) => a.createdAtMs - b.createdAtMs || a.instanceId.localeCompare(b.instanceId));
  }

  /** The ids of the instances that are pending, ready or stopping. */
  activeIds(): string[] {
    return Object.values(this.records)
      .filter((r) => ACTIVE_STATES.has(r.info.state))
      .map((r) => r.info.instanceId);
  }

  hasActive(): boolean {
    return Object.values(this.records).some((r) => ACTIVE_STATES.has(r.info.state));
  }
}
