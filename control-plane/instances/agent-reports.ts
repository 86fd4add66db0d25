// What the agents report, folded into the database. The database is the truth: a report moves an
// instance only along an allowed transition (states.ts), and only when it comes from the host the
// instance is placed on.
import type { InstanceEvent, InstanceInfo } from '../../agent/types.js';
import type { AgentConnection } from './agents.js';
import type { InstanceContext } from './context.js';
import { SSH_PORT } from './launch-spec.js';
import { EndReason, type InstanceLifecycle } from './lifecycle.js';
import type { InstanceRow } from './store.js';

/** An agent's view of one instance, as its events and its list carry it. */
export type AgentReport = Pick<InstanceInfo, 'instanceId' | 'state' | 'message' | 'reason' | 'detail' | 'endpoints'>;

export class AgentReports {
  constructor(
    private readonly ctx: InstanceContext,
    private readonly lifecycle: InstanceLifecycle,
  ) {}

  /** An event of the agent's WatchEvents stream (run on the agent's serial queue). */
  async onEvent(conn: AgentConnection, e: InstanceEvent): Promise<void> {
    const r = await this.ctx.store.instances.get(e.instanceId);
    if (!r || r.agent_id !== conn.id) return;
    if (e.state === 'removed') {
      if (r.state === 'stopping') await this.lifecycle.markStopped(r.id);
      return;
    }
    if (e.state === 'ready' && r.state === 'pending') {
      // Events carry no endpoints: read them from the agent.
      const info = (await conn.client.list()).find((i) => i.instanceId === e.instanceId);
      if (info) await this.apply(conn, info);
      return;
    }
    await this.apply(conn, { instanceId: e.instanceId, state: e.state, message: e.message, reason: e.reason, detail: e.detail, endpoints: [] });
  }

  /** Folds an agent's view of one instance into the database. */
  async apply(conn: AgentConnection, info: AgentReport): Promise<void> {
    const r = await this.ctx.store.instances.get(info.instanceId);
    if (!r || r.agent_id !== conn.id) return;
    const live = r.state === 'pending' || r.state === 'ready';
    switch (info.state) {
      case 'pending':
        if (r.state === 'pending' && r.message !== info.message) await this.lifecycle.transition(r.id, 'pending', info.message);
        return;
      case 'ready':
        if (live) await this.applyReady(r, info);
        return;
      case 'failed':
        if (live) await this.lifecycle.fail(r, info.message || 'Instance failed', info.reason || 'failed', info.detail);
        else if (r.state === 'stopping') await this.lifecycle.markStopped(r.id);
        void this.removeQuietly(conn, r.id);
        return;
      case 'stopped':
        if (live)
          await this.lifecycle.fail(r, 'Stopped by its host', info.reason || EndReason.stoppedByHost, info.detail || 'The host agent stopped the instance');
        else if (r.state === 'stopping') await this.lifecycle.markStopped(r.id);
        void this.removeQuietly(conn, r.id);
        return;
      default:
        return; // stopping: wait for stopped
    }
  }

  /** A pending instance became ready (billing starts now), or a ready one's endpoints or message changed. */
  private async applyReady(r: InstanceRow, info: AgentReport): Promise<void> {
    const main = info.endpoints[0];
    const ssh = info.endpoints.find((e) => e.port === SSH_PORT);
    const now = this.ctx.clock.now();
    if (r.state === 'pending') {
      // Only from pending: every control plane folds the host's reports, and billing counts from
      // the first one's ready_at, which a later fold of the same report must not move.
      await this.lifecycle.transition(
        r.id,
        'ready',
        'ready',
        {
          ready_at: now,
          last_activity_at: now,
          endpoint_host: main?.host ?? null,
          endpoint_port: main?.hostPort ?? null,
          ssh_port: ssh?.hostPort ?? null,
        },
        ['pending'],
      );
    } else if (r.message !== 'ready' || (main && main.hostPort !== r.endpoint_port)) {
      const endpoints = main ? { endpoint_host: main.host, endpoint_port: main.hostPort, ssh_port: ssh?.hostPort ?? null } : {};
      await this.lifecycle.transition(r.id, 'ready', 'ready', endpoints);
    }
  }

  /** After an instance ended on its host: keep its log tail, then have the host remove it. */
  private async removeQuietly(conn: AgentConnection, id: string): Promise<void> {
    try {
      await this.ctx.store.logTails.save(conn.client, id, this.ctx.clock.now());
      await conn.client.remove(id);
    } catch (err) {
      this.ctx.log.debug('remove after end failed (reconciliation retries)', { instanceId: id, err });
    }
  }
}
