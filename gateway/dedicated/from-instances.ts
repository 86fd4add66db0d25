// Adapts the instances service's route (control-plane/instances/ `Instances.route(id)`: one host
// port per instance) to the InstanceRoutes this part reads. In-process (embedded mode): the
// service's in-memory cache is read directly, nothing touches SQLite per request.
import type { Clock } from '../../lib/clock.js';
import { systemClock } from '../../lib/clock.js';
import { ActivityThrottle, type InstanceRoute, type InstanceRoutes, type RouteStatus } from '../../lib/instance-routes.js';

/** The shape of control-plane/instances/service.ts InstanceRoute (structural: no import of the control plane). */
export interface ServiceRoute {
  instanceId: string;
  accountId: number;
  status: string;
  instanceType: string;
  /** Where the main routed port is reachable; null until placed and started. */
  host: string | null;
  port: number | null;
  /** The routed port inside the instance (template app_port); default: the instance type's. */
  routedPort?: number | null;
}

export interface InstanceRouteSource {
  route(instanceId: string): ServiceRoute | undefined;
  recordActivity(instanceId: string): void;
}

/** Routed port per instance type when the route does not carry one (control-plane/instances DEFAULT_PORTS). */
export const DEFAULT_ROUTED_PORTS: Readonly<Record<string, number>> = {
  jupyter: 8888,
  gradio: 7860,
  streamlit: 8501,
  comfyui: 8188,
  vllm: 8000,
  sglang: 30000,
};

const STATUSES: ReadonlySet<string> = new Set(['pending', 'ready', 'stopping', 'stopped', 'failed']);

/** InstanceRoutes over the instances service, with activity throttled to once per `throttleMs` per instance. */
export function routesFromInstances(source: InstanceRouteSource, throttleMs = 15_000, clock: Clock = systemClock): InstanceRoutes {
  // The service replaces its route object on every change, so converted routes can be cached by identity.
  const converted = new WeakMap<ServiceRoute, InstanceRoute>();
  const throttle = new ActivityThrottle((id) => source.recordActivity(id), throttleMs, clock);
  return {
    get(instanceId) {
      const r = source.route(instanceId);
      if (!r) return undefined;
      let c = converted.get(r);
      if (!c) {
        const routed = r.routedPort ?? DEFAULT_ROUTED_PORTS[r.instanceType];
        c = {
          instanceId: r.instanceId,
          accountId: r.accountId,
          status: (STATUSES.has(r.status) ? r.status : 'pending') as RouteStatus,
          instanceType: r.instanceType,
          ports: new Map(routed === undefined ? [] : [[routed, r.host && r.port ? `${r.host.includes(':') ? `[${r.host}]` : r.host}:${r.port}` : '']]),
        };
        converted.set(r, c);
      }
      return c;
    },
    recordActivity: (id) => throttle.record(id),
  };
}
