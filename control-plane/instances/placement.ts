// Placement: the FIFO queue of launched instances waiting for capacity, the choice of host
// (`instanceSchedule`: pack or spread; a persistent launch prefers the host holding its volume),
// and the start sent to that host with the launch spec stored at placement.
import { AgentCallError } from '../../agent/client.js';
import type { AgentReports } from './agent-reports.js';
import type { AgentConnection } from './agents.js';
import type { InstanceContext } from './context.js';
import { buildSpec } from './launch-spec.js';
import { EndReason, type InstanceLifecycle } from './lifecycle.js';
import { ACTIVE } from './states.js';
import { snapshotOf, type InstanceRow } from './store.js';

/**
 * How long after its placement a placed instance whose start this control plane did not see
 * delivered waits before its host is asked whether it has it (resendUndelivered): long enough for
 * the placing control plane's own start call, which follows its placing transaction at once.
 */
export const START_CONFIRM_MS = 5_000;

/** A launch spec as stored with the instance (JSON: no files). */
type StoredSpec = ReturnType<typeof buildSpec>;

/** Files (relative to the instance directory) and environment provisioned into every instance, such as the rc-tunnel identity. */
export type Provisioner = (instanceId: string) => { files: Record<string, string>; env: Record<string, string> };

export class Placement {
  private closed = false;
  /** The pass running now; passes never overlap (two would count the same free GPUs twice). */
  private running: Promise<void> | undefined;
  /** The pass asked for while one runs: it starts when that one ends (one for any number of asks). */
  private next: Promise<void> | undefined;
  /**
   * Placed instances whose start this control plane saw its host accept (its own start call, or
   * the host listing it); pruned to the placed pending ones by resendUndelivered.
   */
  private readonly delivered = new Set<string>();
  /** A resendUndelivered pass running now (the tick does not wait for it: a hung host must not hold up billing). */
  private resending: Promise<void> | undefined;

  /** @param provision added to each launch spec when it is sent to the host (not stored: derived from the instance id). */
  constructor(
    private readonly ctx: InstanceContext,
    private readonly lifecycle: InstanceLifecycle,
    private readonly reports: AgentReports,
    private readonly provision: Provisioner | undefined,
  ) {}

  /** No more placements (the service is closing). */
  stop(): void {
    this.closed = true;
  }

  /** GPUs of a connected host not held by its pending, ready or stopping instances. */
  async freeGpus(conn: AgentConnection): Promise<number> {
    if (!conn.host) return 0;
    let used = 0;
    for (const r of await this.ctx.store.instances.onAgent(conn.id)) used += r.gpu_count;
    return conn.host.gpus.length - used;
  }

  /**
   * The most GPUs one host of the fleet can ever give an instance: the largest GPU total among the
   * hosts not draining (their inventory as last reported; it stays known while a host is
   * unreachable). Undefined while the platform cannot tell: a host not draining has not reported
   * since this control plane started (after a restart the hosts connect one by one, and queued
   * instances must not be ended for want of the host that answers last), or every host drains.
   */
  largestHost(): number | undefined {
    let largest: number | undefined;
    for (const conn of this.ctx.agents.values()) {
      if (conn.draining) continue;
      if (!conn.host) return undefined;
      largest = Math.max(largest ?? 0, conn.host.gpus.length);
    }
    return largest;
  }

  /**
   * Places waiting instances, first come first served: the head of the queue blocks the rest until
   * it fits. Resolves when a pass that began after this call has ended (never rejects).
   */
  schedule(): Promise<void> {
    if (this.closed) return Promise.resolve();
    if (this.running) {
      this.next ??= this.running.then(() => {
        this.next = undefined;
        return this.schedule();
      });
      return this.next;
    }
    this.running = this.pass()
      .catch((err: unknown) => this.ctx.log.error('placement failed', { err }))
      .finally(() => {
        this.running = undefined;
      });
    return this.running;
  }

  private async pass(): Promise<void> {
    if (this.closed) return;
    // Control planes on one database: one places at a time, the holder of the background lease
    // (free GPUs are counted outside the placing transaction: two placing at once would count the
    // same GPUs). Elsewhere a launch waits for the holder's next tick, at most instanceTickMs.
    const lease = this.ctx.background;
    if (!(await lease.stillHeld()) && !(await lease.acquire())) return;
    const largest = this.largestHost();
    for (const r of await this.ctx.store.instances.queue()) {
      if (largest !== undefined && r.gpu_count > largest) {
        // It can never fit (the host it waited for was drained or removed): ending it unblocks
        // the queue behind it; fail() schedules the queue again.
        await this.lifecycle.fail(
          r,
          'No host can hold this instance',
          EndReason.noHostFits,
          `No host of the fleet has ${r.gpu_count} GPUs (the largest has ${largest})`,
        );
        return;
      }
      const conn = await this.pickHost(r);
      if (!conn) return;
      await this.place(r, conn);
    }
  }

  /** The host for `r`: the one holding the account's volume when it fits, else pack (fullest that fits) or spread (emptiest). */
  private async pickHost(r: InstanceRow): Promise<AgentConnection | undefined> {
    const fits: { conn: AgentConnection; free: number }[] = [];
    for (const conn of this.ctx.agents.values()) {
      if (!conn.connected || conn.reconciling || conn.draining) continue;
      const free = await this.freeGpus(conn);
      if (free >= r.gpu_count) fits.push({ conn, free });
    }
    if (!fits.length) return undefined;
    if (snapshotOf(r).persistent_storage) {
      const home = await this.ctx.store.instances.volumeHost(r.account_id);
      const preferred = fits.find((f) => f.conn.id === home);
      if (preferred) return preferred.conn;
    }
    const spread = this.ctx.settings.instanceSchedule === 'spread';
    fits.sort((a, b) => (spread ? b.free - a.free : a.free - b.free));
    return fits[0]!.conn;
  }

  private async place(r: InstanceRow, conn: AgentConnection): Promise<void> {
    const now = this.ctx.clock.now();
    const spec = buildSpec(r, snapshotOf(r));
    const placed = await this.lifecycle.transition(r.id, 'pending', 'starting', {
      agent_id: conn.id,
      spec: JSON.stringify(spec),
      placed_at: now,
      expires_at: now + this.ctx.settings.instanceMaxLifetimeSec * 1000,
    });
    if (!placed) return;
    this.ctx.log.info('instance placed', { instanceId: r.id, agent: conn.id });
    void this.sendStart(conn, placed);
  }

  /**
   * From the tick (control planes on one database): placed instances still pending whose start
   * this control plane did not see delivered. Another control plane placed them and went away
   * (SIGKILL, a crash) between its placing transaction and its start call; their host stayed
   * connected here, so no reconciliation resends the start, and without this they would stay
   * `starting` for ever, holding their GPUs and their account's one active instance. Once placed
   * START_CONFIRM_MS ago, the host is asked what it runs: one it lists is confirmed and its report
   * applied; one it lacks gets its start (the stored spec; StartInstance is idempotent).
   */
  resendUndelivered(now: number, placed: readonly InstanceRow[]): void {
    const ids = new Set(placed.map((r) => r.id));
    for (const id of this.delivered) if (!ids.has(id)) this.delivered.delete(id);
    if (this.resending || this.closed) return;
    const due = placed.filter((r) => r.agent_id !== null && !this.delivered.has(r.id) && (r.placed_at ?? now) + START_CONFIRM_MS <= now);
    if (!due.length) return;
    this.resending = this.resendPass(due)
      .catch((err: unknown) => this.ctx.log.warn('checking undelivered starts failed; the next tick retries', { err }))
      .finally(() => {
        this.resending = undefined;
      });
  }

  private async resendPass(due: readonly InstanceRow[]): Promise<void> {
    for (const agentId of new Set(due.map((r) => r.agent_id!))) {
      const conn = this.ctx.agents.get(agentId);
      if (!conn?.connected || conn.reconciling) continue; // reconciliation resends when it connects
      const listed = new Map((await conn.client.list()).map((i) => [i.instanceId, i]));
      for (const r of due.filter((d) => d.agent_id === agentId)) {
        const info = listed.get(r.id);
        if (info) {
          this.delivered.add(r.id);
          await conn.run(() => this.reports.apply(conn, info));
          continue;
        }
        const fresh = await this.ctx.store.instances.get(r.id);
        if (fresh?.state !== 'pending' || fresh.agent_id !== agentId) continue;
        this.ctx.log.warn('placed instance missing on its host; sending its start', { instanceId: r.id, agent: agentId });
        await this.sendStart(conn, fresh);
      }
    }
  }

  /** The stored spec plus what `provision` adds for this instance (deterministic, so a resend is the same spec). */
  private withProvisioning(spec: StoredSpec): StoredSpec {
    const extra = this.provision?.(spec.instanceId);
    return extra ? { ...spec, env: { ...spec.env, ...extra.env }, files: { ...spec.files, ...extra.files } } : spec;
  }

  /** Sends (or, from reconciliation, resends) a placed instance's start to its host. */
  async sendStart(conn: AgentConnection, r: InstanceRow): Promise<void> {
    try {
      const { instance } = await conn.client.start(this.withProvisioning(JSON.parse(r.spec!) as StoredSpec));
      this.delivered.add(r.id);
      // Ended while the start was on its way (destroyed through another control plane, whose
      // remove may have reached the host before this start did): the host removes it again, so
      // nothing runs there that the database says is gone. A destroy after this read sends its
      // own remove, which reaches the host after the start it answered.
      const fresh = await this.ctx.store.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) {
        await this.lifecycle.removeEnded(conn, r.id, fresh?.state === 'stopping');
        return;
      }
      await conn.run(() => this.reports.apply(conn, instance));
    } catch (err) {
      if (err instanceof AgentCallError && (err.code === 'RC_ERR_AGENT_SPEC_MISMATCH' || err.code === 'RC_ERR_AGENT_INVALID_ARGUMENT')) {
        await this.lifecycle.fail(r, 'The host refused to start the instance', EndReason.startRejected, err.message);
        return;
      }
      // Unreachable or shutting down: reconciliation resends the same spec when the host answers.
      this.ctx.log.warn('start not delivered; will resend on reconnect', { instanceId: r.id, err });
      conn.redial();
    }
  }
}
