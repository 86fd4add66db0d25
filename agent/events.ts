// The event hub: recent instance events (for WatchEvents replay after a reconnect) and live fan-out.
import type { InstanceEvent } from './types.js';

export type EventListener = (event: InstanceEvent) => void;

export class EventHub {
  private readonly recentEvents: InstanceEvent[] = [];
  private readonly listeners = new Set<EventListener>();

  constructor(private readonly keep = 2000) {}

  publish(event: InstanceEvent): void {
    this.recentEvents.push(event);
    if (this.recentEvents.length > this.keep * 1.5) this.recentEvents.splice(0, this.recentEvents.length - this.keep);
    for (const l of this.listeners) l(event);
  }

  /** Events after `seq`, or undefined when some of them are no longer buffered. */
  since(seq: number): InstanceEvent[] | undefined {
    const first = this.recentEvents[0];
    if (!first || first.seq > seq + 1) return undefined;
    return this.recentEvents.filter((e) => e.seq > seq);
  }

  subscribe(listener: EventListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }
}
