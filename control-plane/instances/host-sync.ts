// The hosts registry across control planes on one database (issue 43): `rc host add`, drain,
// resume and remove change the hosts table through one control plane, which announces it on the
// bus (`hosts.changed`); every control plane then re-reads the table and brings its agent
// connections in line (connections.ts sync). A re-read also runs every HOST_SYNC_MS, so a control
// plane that missed the event (no shared Redis, or Redis down a moment) catches up on its own.
import type { Bus } from '../../lib/bus.js';
import type { Logger } from '../../lib/log.js';
import type { AgentConnections } from './connections.js';
import type { HostStore } from './host-store.js';

/** How often the hosts table is read again without an event. */
export const HOST_SYNC_MS = 10_000;

export class HostSync {
  private running: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private unsubscribe: (() => void) | undefined;

  /**
   * @param detached told the names of hosts removed elsewhere, after their connection closed.
   * @param synced after each re-read (a host added or resumed elsewhere may take queued launches).
   */
  constructor(
    private readonly hosts: HostStore,
    private readonly connections: AgentConnections,
    private readonly bus: Bus,
    private readonly log: Logger,
    private readonly detached: (name: string) => void,
    private readonly synced: () => void,
  ) {}

  start(): void {
    this.unsubscribe ??= this.bus.subscribe((e) => {
      if (e.type === 'hosts.changed') void this.sync();
    });
    this.timer ??= setInterval(() => void this.sync(), HOST_SYNC_MS);
    this.timer.unref();
  }

  close(): Promise<void> {
    this.unsubscribe?.();
    clearInterval(this.timer);
    return this.running;
  }

  /** Tells the other control planes that this one changed the registry. */
  announce(): void {
    void this.bus.publish({ type: 'hosts.changed' }).catch((err: unknown) => this.log.warn('bus publish failed', { err }));
  }

  /** Reads the table and syncs the connections; runs one at a time, a failure logged (the next one retries). */
  sync(): Promise<void> {
    this.running = this.running.then(async () => {
      try {
        for (const name of await this.connections.sync(await this.hosts.list())) this.detached(name);
        this.synced();
      } catch (err) {
        this.log.warn('reading the hosts registry failed; the next sync retries', { err });
      }
    });
    return this.running;
  }
}
