// Bringing a host in line with the database (the truth) after a restart of either side, and
// clearing a host removed by force.
import type { AgentReports } from './agent-reports.js';
import type { AgentConnection } from './agents.js';
import type { InstanceContext } from './context.js';
import { EndReason, type InstanceLifecycle } from './lifecycle.js';
import type { Placement } from './placement.js';

export class Reconciliation {
  constructor(
    private readonly ctx: InstanceContext,
    private readonly lifecycle: InstanceLifecycle,
    private readonly reports: AgentReports,
    private readonly placement: Placement,
  ) {}

  /**
   * After (re)connecting to a host: adopt what it runs, resend starts it never got, fail ready
   * instances it lost, finish destroys, and have it remove what the database does not want.
   *
   * The database is read on both sides of the host's listing, because another control plane on
   * the same database may place or destroy instances on this host meanwhile (issue 43): an
   * instance is lost only if the database had it before the listing and the listing lacks it,
   * and unwanted only if the listing has it and the database, read after, does not want it. So
   * an instance placed elsewhere while this runs is neither failed nor removed here (its row is
   * in the database before its start reaches the host). Never "remove everything else" (the
   * agent's Reconcile call), which would remove it.
   */
  async reconcile(conn: AgentConnection): Promise<void> {
    const { instances } = this.ctx.store;
    conn.reconciling = true;
    try {
      const before = await instances.onAgent(conn.id);
      const infos = new Map((await conn.client.list()).map((i) => [i.instanceId, i]));
      for (const r of before) {
        if (r.state === 'stopping') continue;
        const info = infos.get(r.id);
        if (info) await this.reports.apply(conn, info);
        else if (r.state === 'pending') void this.placement.sendStart(conn, r);
        else await this.lifecycle.fail(r, 'Instance lost', EndReason.lost, 'Its host no longer had the instance when it reconnected');
      }
      const rows = await instances.onAgent(conn.id);
      const wanted = new Set(rows.filter((r) => r.state !== 'stopping').map((r) => r.id));
      const unwanted = [...infos.keys()].filter((id) => !wanted.has(id));
      const removed = await Promise.all(
        unwanted.map((id) =>
          conn.client.remove(id).then(
            () => true,
            (err: unknown) => {
              this.ctx.log.warn('could not remove an unwanted instance (the next reconciliation or removal retry tries again)', { instanceId: id, err });
              return false;
            },
          ),
        ),
      );
      const failedRemovals = new Set(unwanted.filter((_, i) => !removed[i]));
      for (const r of rows) if (r.state === 'stopping' && !failedRemovals.has(r.id)) await this.lifecycle.markStopped(r.id);
    } finally {
      conn.reconciling = false;
    }
    void this.placement.schedule();
  }

  /**
   * Ends every instance on a host that is being removed by force: failed with `host_removed`,
   * billed up to now; the agent (when it answers) is asked to remove them.
   */
  async endOnHost(id: string): Promise<void> {
    const conn = this.ctx.agents.get(id);
    // Ending instances reschedules the queue: nothing may be placed on the host being removed.
    if (conn) conn.draining = true;
    for (const r of await this.ctx.store.instances.onAgent(id)) {
      if (r.state === 'stopping') await this.lifecycle.markStopped(r.id);
      else await this.lifecycle.fail(r, 'Its host was removed from the platform', EndReason.hostRemoved, `Host ${id} was removed with --force`);
    }
    if (conn?.connected) await conn.client.reconcile([]).catch((err: unknown) => this.ctx.log.warn('could not clear the removed host', { agent: id, err }));
  }
}
