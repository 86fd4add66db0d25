// The connections to the host agents, by host name: the hosts given at start (the embedded local
// agent) and those registered with `rc host add` (the hosts table), dialled when the service
// starts and hung up on when it closes or a host is removed.
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/log.js';
import { AgentConnection, type AgentConfig, type AgentHandlers } from './agents.js';
import type { HostRecord } from './host-store.js';

export class AgentConnections {
  private readonly byId = new Map<string, AgentConnection>();
  private started = false;

  /** @param handlers what the service does when a host connects, reports an event, or its GPUs change. */
  constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly stallMs: number,
    private readonly handlers: AgentHandlers,
  ) {}

  /** The connections by host name (read-only: attach and detach change it). */
  get all(): ReadonlyMap<string, AgentConnection> {
    return this.byId;
  }

  /** The hosts given at start, then the registered ones (a host given at start wins over a stored one of the same name). */
  attachAll(configured: AgentConfig[], stored: HostRecord[]): void {
    for (const a of configured) this.attach(a);
    for (const h of stored) {
      if (this.byId.has(h.name)) continue; // a host given at start wins over a stored one of the same name
      if (h.token === undefined) this.log.error('host token cannot be unsealed (seal.key changed?); rc host add it again', { host: h.name });
      else this.attach({ id: h.name, address: h.address, token: h.token, draining: h.draining, registered: true });
    }
  }

  /** Adds a connection to a host (dialled now when the service runs); replaces one of the same name. */
  attach(config: AgentConfig): AgentConnection {
    const conn = new AgentConnection(config, this.clock, this.log, this.handlers, this.stallMs);
    const old = this.byId.get(config.id);
    this.byId.set(config.id, conn);
    if (old) void old.close();
    if (this.started) conn.start();
    return conn;
  }

  /**
   * Brings the registered hosts in line with the registry as stored (another control plane on the
   * same database added, changed, drained or removed one): new ones attached, changed ones
   * redialled, draining copied, removed ones detached. Hosts given at start stay as they are.
   * Returns the names detached.
   */
  async sync(stored: HostRecord[]): Promise<string[]> {
    const names = new Set(stored.map((h) => h.name));
    for (const h of stored) {
      const conn = this.byId.get(h.name);
      if (conn && !conn.registered) continue;
      if (h.token === undefined) continue; // cannot be unsealed: attachAll logged it at start
      if (!conn || !conn.dials(h.address, h.token)) this.attach({ id: h.name, address: h.address, token: h.token, draining: h.draining, registered: true });
      else conn.draining = h.draining;
    }
    const gone = [...this.byId.values()].filter((c) => c.registered && !names.has(c.id)).map((c) => c.id);
    for (const id of gone) await this.detach(id);
    return gone;
  }

  /** Closes the connection to a host and forgets it (its instances must have ended: see Reconciliation.endOnHost). */
  async detach(id: string): Promise<void> {
    const conn = this.byId.get(id);
    if (!conn) return;
    this.byId.delete(id);
    await conn.close();
  }

  /** Dials every host, and from now on every attached one at once. */
  start(): void {
    this.started = true;
    for (const a of this.byId.values()) a.start();
  }

  /** Closes every stream (the instances keep running on their hosts). */
  async close(): Promise<void> {
    await Promise.all([...this.byId.values()].map((a) => a.close()));
  }
}
