// The live instances in memory: where the gateway relays to each (read on every request, so never
// from the database), and the traffic seen since the last tick (idle tracking, flushed by tick.ts).
import { mainPort } from './launch-spec.js';
import { snapshotOf, type InstanceRow } from './store.js';

/** What the gateway needs to relay to an instance (issue #9). */
export interface InstanceRoute {
  instanceId: string;
  accountId: number;
  status: InstanceRow['state'];
  instanceType: string;
  /** Where the instance's main (routed) port is reachable; null until placed and started. */
  host: string | null;
  port: number | null;
  /** The routed port inside the instance (the template's app_port, or the instance type's). */
  routedPort: number | null;
}

export class LiveRoutes {
  private readonly routes = new Map<string, InstanceRoute>();
  /** Activity seen since the last tick (instance id -> time); flushed to the database by the tick. */
  private readonly activity = new Map<string, number>();

  /** Follows a change of `r`: its route while it is live; forgotten, with its activity, once it ended. */
  update(r: InstanceRow): void {
    if (r.state === 'stopped' || r.state === 'failed') {
      this.routes.delete(r.id);
      this.activity.delete(r.id);
      return;
    }
    this.routes.set(r.id, {
      instanceId: r.id,
      accountId: r.account_id,
      status: r.state,
      instanceType: snapshotOf(r).instance_type,
      host: r.endpoint_host,
      port: r.endpoint_port,
      routedPort: mainPort(snapshotOf(r)) ?? null,
    });
  }

  /** Where to relay traffic for an instance (pending, ready or stopping). */
  get(instanceId: string): InstanceRoute | undefined {
    return this.routes.get(instanceId);
  }

  /** Every live instance's route (the gateways' snapshot). */
  all(): InstanceRoute[] {
    return [...this.routes.values()];
  }

  /** Traffic to a live instance at `at`; ignored for an instance that is not live. */
  recordActivity(instanceId: string, at: number): void {
    if (this.routes.has(instanceId)) this.activity.set(instanceId, at);
  }

  /** The activity seen since the last call (instance id, time), forgotten here. */
  takeActivity(): [string, number][] {
    const seen = [...this.activity];
    this.activity.clear();
    return seen;
  }
}
