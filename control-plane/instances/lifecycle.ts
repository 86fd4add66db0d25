// Every change of an instance's state goes through here: the guarded transition in the database
// (states.ts), then the in-memory route and the bus. Ending an instance (failed, or destroyed:
// stopping, then stopped) bills it up to that instant in the same transaction as the change.
import type { Bus } from '../../lib/bus.js';
import type { InstanceContext } from './context.js';
import type { LiveRoutes } from './live-routes.js';
import { ACTIVE } from './states.js';
import type { Changes, InstanceRow } from './store.js';
import type { UsageBilling } from './usage-billing.js';

/** Stable reasons of instances the platform ended itself (status `reason`). */
export const EndReason = {
  lifetime: 'lifetime_exceeded',
  idle: 'idle_timeout',
  credits: 'insufficient_credits',
  hostLost: 'host_lost',
  lost: 'lost',
  startRejected: 'start_rejected',
  stoppedByHost: 'stopped_by_host',
  hostRemoved: 'host_removed',
  /** Queued, and no host of the fleet has that many GPUs any more (the one it waited for was drained or removed). */
  noHostFits: 'no_host_fits',
} as const;

export class InstanceLifecycle {
  /**
   * @param freed called when an instance ended or stopped: GPUs or an account's slot may have
   *   freed, so the queue is scheduled again (placement.ts).
   */
  constructor(
    private readonly ctx: InstanceContext,
    private readonly routes: LiveRoutes,
    private readonly bus: Bus,
    private readonly billing: UsageBilling,
    private readonly freed: () => void,
  ) {}

  /** After every change of an instance: the route cache and the bus. */
  changed(r: InstanceRow): void {
    this.routes.update(r);
    void this.bus
      .publish({ type: 'instance.changed', instanceId: r.id, route: this.routes.get(r.id) ?? null })
      .catch((err: unknown) => this.ctx.log.warn('bus publish failed', { err }));
  }

  transition(id: string, state: InstanceRow['state'], message: string, changes?: Changes): InstanceRow | undefined {
    const r = this.ctx.store.instances.transition(id, state, message, this.ctx.clock.now(), changes);
    if (r) this.changed(r);
    return r;
  }

  /**
   * Ends an active instance as `failed` (the agent reported it, or its host is gone): final
   * usage up to now, in one transaction with the state change.
   */
  fail(r: InstanceRow, message: string, reason: string, detail: string): InstanceRow | undefined {
    const { store, clock, log } = this.ctx;
    const now = clock.now();
    const out = store.transaction(() => {
      const fresh = store.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) return undefined;
      this.billing.bill(fresh, now, true);
      return store.instances.transition(r.id, 'failed', message, now, { reason, detail, ended_at: now });
    });
    if (out) {
      this.changed(out);
      log.info('instance failed', { instanceId: r.id, reason });
      this.freed();
    }
    return out;
  }

  /**
   * Destroys an instance: final usage up to now and `stopping` in one transaction (billing stops
   * at this instant; the account may launch again at once), then the agent removes it.
   */
  async destroy(r: InstanceRow, reason: string | null, detail: string | null): Promise<void> {
    const { store, clock, log, agents } = this.ctx;
    const now = clock.now();
    const row = store.transaction(() => {
      const fresh = store.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) return undefined;
      this.billing.bill(fresh, now, true);
      return store.instances.transition(r.id, 'stopping', 'stopping', now, { reason, detail, ended_at: now });
    });
    if (!row) return;
    this.changed(row);
    log.info('instance destroyed', { instanceId: r.id, reason });
    if (row.agent_id === null) {
      this.markStopped(row.id);
      return;
    }
    const conn = agents.get(row.agent_id);
    if (!conn?.connected) return; // reconciliation finishes it when the host answers again
    try {
      await store.logTails.save(conn.client, row.id, clock.now());
      await conn.client.remove(row.id);
      this.markStopped(row.id);
    } catch (err) {
      log.warn('agent remove failed; will retry on reconnect', { instanceId: row.id, err });
      conn.redial();
    }
  }

  markStopped(id: string): void {
    const r = this.transition(id, 'stopped', 'stopped');
    if (r) this.freed();
  }
}
