// What a watcher of instance events (WatchEvents) sees first, then live: the events it missed
// when the hub still holds them (a reconnect), else one event per instance with its current status.
import type { EventHub, EventListener } from './events.js';
import type { InstanceTable } from './instance-table.js';
import type { InstanceEvent } from './types.js';

export class InstanceEvents {
  constructor(
    private readonly hub: EventHub,
    private readonly table: InstanceTable,
  ) {}

  /**
   * The events a watcher starting now should see first: those after `afterSeq` when still
   * buffered, else a snapshot (one event per instance, its current status). Then live events.
   */
  watch(afterSeq: number, listener: EventListener): { backlog: InstanceEvent[]; unsubscribe: () => void } {
    const replay = afterSeq > 0 ? (afterSeq >= this.table.seq ? [] : this.hub.since(afterSeq)) : undefined;
    const backlog =
      replay ??
      this.table.list().map((i) => ({
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
}
