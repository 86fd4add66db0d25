// Adapts the instances service's route (control-plane/instances/ `Instances.route(id)`: one host
// port per instance) to the InstanceRoutes this part reads. In-process (embedded mode): the
// service's in-memory cache is read directly, nothing touches SQLite per request.
import type { Clock } from '../../lib/clock.js';
import { systemClock } from '../../lib/clock.js';
import type { Bus, BusEvent } from '../../lib/bus.js';
import { ActivityThrottle, GoneListeners, type GoneListener, type InstanceRoute, type InstanceRoutes, type RouteStatus } from '../../lib/instance-routes.js';

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

/**
 * InstanceRoutes over the instances service, with what it keeps per instance dropped when the
 * instance goes (gone()): the activity throttle's entry, the last addresses, and, through
 * onGone, the readers' connection pools. The service itself forgets an ended instance; this
 * side learns it from the bus (followGone) or from the gateway's feed (gateway/sync/platform-feed.ts).
 */
export interface ServiceInstanceRoutes extends InstanceRoutes {
  /** The instance ended: forget it here and tell the onGone listeners (idempotent). */
  gone(instanceId: string): void;
  onGone(listener: GoneListener): () => void;
  /** Instances this object keeps something for (throttle entries, addresses): flat over a long run. */
  readonly held: number;
}

/** InstanceRoutes over the instances service, with activity throttled to once per `throttleMs` per instance. */
export function routesFromInstances(source: InstanceRouteSource, throttleMs = 15_000, clock: Clock = systemClock): ServiceInstanceRoutes {
  // The service replaces its route object on every change, so converted routes can be cached by identity.
  const converted = new WeakMap<ServiceRoute, InstanceRoute>();
  const throttle = new ActivityThrottle((id) => source.recordActivity(id), throttleMs, clock);
  /** instance id -> the address its main port had when last read, for the onGone listeners. */
  const addresses = new Map<string, string>();
  const listeners = new GoneListeners();
  return {
    get(instanceId) {
      const r = source.route(instanceId);
      if (!r) return undefined;
      let c = converted.get(r);
      if (!c) {
        const routed = r.routedPort ?? DEFAULT_ROUTED_PORTS[r.instanceType];
        const address = r.host && r.port ? `${r.host.includes(':') ? `[${r.host}]` : r.host}:${r.port}` : '';
        c = {
          instanceId: r.instanceId,
          accountId: r.accountId,
          status: (STATUSES.has(r.status) ? r.status : 'pending') as RouteStatus,
          instanceType: r.instanceType,
          ports: new Map(routed === undefined ? [] : [[routed, address]]),
        };
        converted.set(r, c);
        if (address !== '') addresses.set(instanceId, address);
      }
      return c;
    },
    recordActivity: (id) => throttle.record(id),
    gone(instanceId) {
      throttle.forget(instanceId);
      const address = addresses.get(instanceId);
      addresses.delete(instanceId);
      listeners.tell(instanceId, address === undefined ? [] : [address]);
    },
    onGone: (listener) => listeners.add(listener),
    get held() {
      return Math.max(throttle.size, addresses.size);
    },
  };
}

/** True for a bus event saying the instance is no longer live (lib/bus.ts `instance.changed`). */
export function isInstanceGone(ev: BusEvent): ev is Extract<BusEvent, { type: 'instance.changed' }> {
  if (ev.type !== 'instance.changed') return false;
  return ev.route === null || (ev.route !== undefined && (ev.route.status === 'stopped' || ev.route.status === 'failed'));
}

/** Calls routes.gone() for every instance the bus says ended (embedded mode: the instances service publishes them). Returns the unsubscribe. */
export function followGone(bus: Bus, routes: ServiceInstanceRoutes): () => void {
  return bus.subscribe((ev) => {
    if (isInstanceGone(ev)) routes.gone(ev.instanceId);
  });
}
