// Every change of an instance's state goes through here: the guarded transition in the database
// (states.ts), then the in-memory route and the bus. Ending an instance (failed, or destroyed:
// stopping, then stopped) bills it up to that instant in the same transaction as the change.
import type { Bus } from '../../lib/bus.js';
import type { AgentConnection } from './agents.js';
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
  /** An operator destroyed it; the operator's words are its `detail` (operator/instance-ops.ts). */
  operator: 'destroyed_by_operator',
  /** Its account was disabled by an operator (operator/account-ops.ts). */
  accountDisabled: 'account_disabled',
} as const;

/** First wait before a failed removal on a connected host is tried again; it doubles up to REMOVE_RETRY_MAX_MS. */
export const REMOVE_RETRY_MS = 2_000;
export const REMOVE_RETRY_MAX_MS = 60_000;

/** A destroyed instance whose host has not confirmed its removal yet. */
interface PendingRemoval {
  /** A remove call is in flight. */
  busy: boolean;
  /** When the tick may try again (epoch ms). */
  nextAt: number;
  waitMs: number;
}

export class InstanceLifecycle {
  /**
   * Destroyed instances whose removal failed on a host that stays connected (issue 44: at the
   * platform's descriptor limit the agent's engine calls failed, destroy answered 200 and the
   * container kept running, its GPU held "stopping", retried only on a reconnect that never
   * came). They stay `stopping` until the host confirms; the tick retries (retryRemovals).
   */
  private readonly removals = new Map<string, PendingRemoval>();

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

  async transition(
    id: string,
    state: InstanceRow['state'],
    message: string,
    changes?: Changes,
    onlyFrom?: readonly InstanceRow['state'][],
  ): Promise<InstanceRow | undefined> {
    const r = await this.ctx.store.instances.transition(id, state, message, this.ctx.clock.now(), changes, onlyFrom);
    if (r) this.changed(r);
    return r;
  }

  /**
   * Ends an active instance as `failed` (the agent reported it, or its host is gone): final
   * usage up to now, in one transaction with the state change.
   */
  async fail(r: InstanceRow, message: string, reason: string, detail: string): Promise<InstanceRow | undefined> {
    const { store, clock, log } = this.ctx;
    const now = clock.now();
    const out = await store.transaction(async (tx) => {
      const fresh = await tx.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) return undefined;
      await this.billing.bill(tx, fresh, now, true);
      return tx.instances.transition(r.id, 'failed', message, now, { reason, detail, ended_at: now });
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
    const row = await store.transaction(async (tx) => {
      const fresh = await tx.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) return undefined;
      await this.billing.bill(tx, fresh, now, true);
      return tx.instances.transition(r.id, 'stopping', 'stopping', now, { reason, detail, ended_at: now });
    });
    if (!row) return;
    this.changed(row);
    log.info('instance destroyed', { instanceId: r.id, reason });
    if (row.agent_id === null) {
      await this.markStopped(row.id);
      return;
    }
    const conn = agents.get(row.agent_id);
    if (!conn?.connected) return; // reconciliation finishes it when the host answers again
    await this.removeOnHost(row.id, row.agent_id, true);
  }

  /**
   * Has the host remove a destroyed instance: `stopped` once it confirms; else it stays
   * `stopping` and is tried again by retryRemovals (and by reconciliation on a reconnect).
   */
  private async removeOnHost(id: string, agentId: string, first: boolean): Promise<void> {
    const { store, clock, log, agents } = this.ctx;
    const conn = agents.get(agentId);
    if (!conn?.connected) return;
    const pending = this.removals.get(id) ?? { busy: false, nextAt: 0, waitMs: REMOVE_RETRY_MS };
    if (pending.busy) return;
    pending.busy = true;
    this.removals.set(id, pending);
    try {
      // The log tail is kept when the host can give it; a host that cannot must still remove.
      await store.logTails.save(conn.client, id, clock.now()).catch((err: unknown) => log.warn('saving the log tail failed', { instanceId: id, err }));
      await conn.client.remove(id);
      this.removals.delete(id);
      await this.markStopped(id);
    } catch (err) {
      pending.busy = false;
      pending.nextAt = clock.now() + pending.waitMs;
      log.warn('agent remove failed; retrying', { instanceId: id, retryInMs: pending.waitMs, err });
      pending.waitMs = Math.min(pending.waitMs * 2, REMOVE_RETRY_MAX_MS);
      if (first) conn.redial();
    }
  }

  /**
   * A start answered by the host after its instance ended (placement.ts sendStart): one still
   * `stopping` is removed as a destroy removes it (then `stopped`); one already ended is only
   * removed from the host (its saved log tail stays the one from before).
   */
  async removeEnded(conn: AgentConnection, id: string, stopping: boolean): Promise<void> {
    if (stopping) return this.removeOnHost(id, conn.id, false);
    await conn.client.remove(id).catch((err: unknown) => this.ctx.log.warn('could not remove an instance started after it ended', { instanceId: id, err }));
  }

  /** From the tick: tries again the removals whose wait is over, on hosts that are connected. */
  async retryRemovals(now: number, stopping: readonly InstanceRow[] = []): Promise<void> {
    // Instances stopping for a while that this control plane did not ask to remove: destroyed
    // through another control plane that went away or lost its agent stream (control planes on one
    // database), or before a restart. Removing is idempotent on the agent, so asking again is safe.
    for (const r of stopping) {
      if (r.agent_id !== null && !this.removals.has(r.id) && (r.ended_at ?? 0) + REMOVE_RETRY_MS <= now) {
        this.removals.set(r.id, { busy: false, nextAt: 0, waitMs: REMOVE_RETRY_MS });
      }
    }
    const out: Promise<void>[] = [];
    for (const [id, pending] of this.removals) {
      if (pending.busy || now < pending.nextAt) continue;
      const r = await this.ctx.store.instances.get(id);
      if (!r || r.state !== 'stopping' || r.agent_id === null) {
        this.removals.delete(id);
        continue;
      }
      out.push(this.removeOnHost(id, r.agent_id, false));
    }
    await Promise.all(out);
  }

  async markStopped(id: string): Promise<void> {
    this.removals.delete(id);
    const r = await this.transition(id, 'stopped', 'stopped');
    if (r) this.freed();
  }
}
