// The periodic checks, every instanceTickMs: activity flushed to the database, billing of
// complete periods, the zero-balance stop, lifetime and idle enforcement, removals a host failed
// (retried), hosts that stopped answering; then the queue. Tests call tick() directly with a fake clock.
// With several control planes on one database, only the holder of the "background" lease runs
// these (control-plane/leases.ts); every control plane still writes the activity it saw.
import type { InstanceContext } from './context.js';
import { EndReason, type InstanceLifecycle } from './lifecycle.js';
import { liveBalanceMicros } from './live-balance.js';
import type { LiveRoutes } from './live-routes.js';
import { LeaseLostError, type WorkLease } from '../work-lease.js';
import type { Placement } from './placement.js';
import type { InstanceRow } from './store.js';
import type { UsageBilling } from './usage-billing.js';
import { stopWarning, type StopWarning } from './views.js';

/** The message of a live instance whose host is silent (its state stays). */
export const HOST_UNREACHABLE = 'host unreachable';

export class InstanceTicker {
  /** Live instances under a stop warning, and which (the status streams were told when it began or ended). */
  private readonly warned = new Map<string, StopWarning['reason']>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private closed = false;
  constructor(
    private readonly ctx: InstanceContext,
    private readonly routes: LiveRoutes,
    private readonly billing: UsageBilling,
    private readonly lifecycle: InstanceLifecycle,
    private readonly placement: Placement,
  ) {}

  /** Billing, stops, host checks and the queue run on one control plane at a time. */
  private get lease(): WorkLease {
    return this.ctx.background;
  }

  /** Starts the periodic tick (once). */
  start(): void {
    // A failed tick (the database unreachable a moment) is logged and the next one tries again, never an unhandled rejection.
    this.timer ??= setInterval(
      () => void this.tick().catch((err: unknown) => this.ctx.log.warn('instance tick failed; the next one retries', { err })),
      this.ctx.settings.instanceTickMs,
    );
    this.timer.unref();
  }

  /** Stops the tick and waits for a running one to finish. */
  async stop(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
  }

  /** Writes the activity seen since the last flush (last_activity_at, for the idle timeout). */
  async flushActivity(): Promise<void> {
    const seen = this.routes.takeActivity();
    if (!seen.length) return;
    await this.ctx.store.transaction(async (tx) => {
      for (const [id, at] of seen) await tx.instances.touch(id, at);
    });
  }

  /**
   * Billing (complete periods), credits, lifetime, idle timeout and unreachable hosts; then the
   * queue. Runs every instanceTickMs; tests call it directly with a fake clock.
   */
  tick(): Promise<void> {
    this.ticking ??= this.runTick().finally(() => {
      this.ticking = undefined;
    });
    return this.ticking;
  }

  private async runTick(): Promise<void> {
    if (this.closed) return;
    await this.flushActivity();
    if (!(await this.lease.acquire())) return; // another control plane runs them
    const now = this.ctx.clock.now();
    const ends: Promise<void>[] = [];
    const live = new Set<string>();
    const stopping: InstanceRow[] = [];
    const placed: InstanceRow[] = [];
    for (const r0 of await this.ctx.store.instances.live()) {
      if (r0.state === 'pending' && r0.agent_id !== null) placed.push(r0);
      if (r0.state === 'stopping') {
        stopping.push(r0);
        continue;
      }
      // A control plane paused past its lease (SIGSTOP, a long GC) stops here rather than act on what it read before.
      if (!(await this.lease.stillHeld())) break;
      live.add(r0.id);
      let r: InstanceRow;
      try {
        r = await this.billing.billCompletePeriods(r0, now, (tx) => this.lease.guard(tx));
      } catch (err) {
        if (err instanceof LeaseLostError) break; // taken over while this run went on: its writes are the other's now
        throw err;
      }
      if (r.placed_at === null) continue;
      const end = await this.limitReached(r, now);
      if (end) ends.push(this.lifecycle.destroy(r, end.reason, end.detail));
      else this.announceStopWarning(r, now);
    }
    // Ended instances leave the warned map with the tick that finds them gone.
    for (const id of this.warned.keys()) if (!live.has(id)) this.warned.delete(id);
    await Promise.all(ends);
    // Destroyed instances a connected host failed to remove, or that stay stopping (another
    // control plane's destroy): tried again until the host confirms (not awaited: a hung host must
    // not hold up billing).
    void this.lifecycle.retryRemovals(now, stopping).catch((err: unknown) => this.ctx.log.warn('removal retries failed', { err }));
    // Placed instances whose start never reached their host (placed by a control plane that died
    // before sending it): sent again (placement.ts resendUndelivered; not awaited either).
    this.placement.resendUndelivered(now, placed);
    await this.checkHosts(now);
    await this.placement.schedule();
  }

  /** Why a placed instance must end (out of credits, lifetime reached, idle); undefined when none applies. */
  private async limitReached(r: InstanceRow, now: number): Promise<{ reason: string; detail: string } | undefined> {
    const s = this.ctx.settings;
    const idleMs = s.instanceIdleTimeoutSec * 1000;
    const balanceMicros = await liveBalanceMicros(this.ctx.store, r.account_id, now); // the figure GET /api/me shows
    if (balanceMicros <= 0) return { reason: EndReason.credits, detail: 'The credit balance reached zero' };
    if (r.expires_at !== null && now >= r.expires_at) {
      return { reason: EndReason.lifetime, detail: `The maximum lifetime of ${s.instanceMaxLifetimeSec} s was reached` };
    }
    if (r.state === 'ready' && now >= (r.last_activity_at ?? r.ready_at ?? now) + idleMs) {
      return { reason: EndReason.idle, detail: `No activity for ${s.instanceIdleTimeoutSec} s` };
    }
    return undefined;
  }

  /**
   * Tells the status streams (an instance.changed event) when a stop warning begins, changes kind or
   * ends (activity came): the status object carries it (views.ts stopWarning), the console shows it.
   */
  private announceStopWarning(r: InstanceRow, now: number): void {
    const s = this.ctx.settings;
    const warning = stopWarning(r, now, s.instanceIdleTimeoutSec * 1000, s.instanceStopWarningSec * 1000)?.reason;
    if (warning === this.warned.get(r.id)) return;
    if (warning) this.warned.set(r.id, warning);
    else this.warned.delete(r.id);
    this.lifecycle.changed(r);
  }

  /** Hosts that stopped answering: first a message, then (after instanceHostLostMs) their instances fail. */
  private async checkHosts(now: number): Promise<void> {
    const s = this.ctx.settings;
    for (const conn of this.ctx.agents.values()) {
      conn.checkStall();
      if (conn.connected) continue;
      const silentMs = now - conn.downSince;
      if (silentMs < s.instanceHostUnreachableMs) continue;
      for (const r of await this.ctx.store.instances.onAgent(conn.id)) {
        if (silentMs >= s.instanceHostLostMs) {
          if (r.state === 'stopping') await this.lifecycle.markStopped(r.id);
          else await this.lifecycle.fail(r, 'Host lost', EndReason.hostLost, `Its host did not answer for ${Math.round(silentMs / 1000)} s`);
        } else if (r.state !== 'stopping' && r.message !== HOST_UNREACHABLE) {
          await this.lifecycle.transition(r.id, r.state, HOST_UNREACHABLE);
        }
      }
    }
  }
}
