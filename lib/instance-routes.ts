// Where an instance is reachable and whose it is: the table the dedicated endpoints, the instance
// proxy and the tunnel broker read on every request. It is held in memory (never SQLite on the
// request path) and kept current by the instances service (control-plane/instances/).
import type { Clock } from './clock.js';
import { systemClock } from './clock.js';

/** Instance status as the routes see it; only `ready` is forwarded to, `pending` answers 503. */
export type RouteStatus = 'pending' | 'ready' | 'stopping' | 'stopped' | 'failed';

export interface InstanceRoute {
  instanceId: string;
  /** Owner account id. */
  accountId: number;
  status: RouteStatus;
  /** Template instance_type: jupyter, gradio, streamlit, comfyui, vllm, sglang, custom. */
  instanceType: string;
  /**
   * Routed port inside the instance (for example 8000) -> `host:port` where the agent exposes it
   * ('' while not known yet, before the instance is placed). The first entry is the instance's
   * main app port (the one the instance proxy serves).
   */
  ports: ReadonlyMap<number, string>;
}

/** The seam to the instances service. */
export interface InstanceRoutes {
  get(instanceId: string): InstanceRoute | undefined;
  /** Traffic reached the instance: resets its idle timer. Called at most once per instance per throttle interval. */
  recordActivity(instanceId: string): void;
  /**
   * Calls `listener` when an instance's route is removed (the instance ended), with the addresses
   * its ports had, so a reader drops what it keeps per instance or address (connection pools):
   * without it, every instance ever launched left some behind. Returns the unsubscribe.
   * Optional: routes that never remove one need not offer it.
   */
  onGone?(listener: GoneListener): () => void;
}

/** An instance's route was removed: its id and the `host:port` addresses it had ('' left out). */
export type GoneListener = (instanceId: string, addresses: readonly string[]) => void;

/** Listeners of removed routes (InstanceRoutes.onGone), each called once per removal; a throwing one does not stop the others. */
export class GoneListeners {
  private readonly listeners = new Set<GoneListener>();

  add(listener: GoneListener): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  tell(instanceId: string, addresses: readonly string[]): void {
    for (const l of this.listeners) {
      try {
        l(instanceId, addresses);
      } catch {
        // Dropping a cache is best effort: a failing listener never fails the route's removal.
      }
    }
  }
}

/** The non-empty addresses of a route's ports. */
export function addressesOf(route: InstanceRoute): string[] {
  return [...route.ports.values()].filter((a) => a !== '');
}

/** The main (first) routed port of a route and its address, or undefined when it has none. */
export function mainEndpoint(route: InstanceRoute): { port: number; address: string } | undefined {
  for (const [port, address] of route.ports) return { port, address };
  return undefined;
}

/**
 * An in-memory InstanceRoutes: `set` and `delete` keep it current (from the instances service's
 * events or, in tests, from an agent's ListInstances). `onActivity` receives the (already
 * throttled) activity reports.
 */
export class InstanceRouteTable implements InstanceRoutes {
  private readonly routes = new Map<string, InstanceRoute>();
  private readonly activity: ActivityThrottle;
  private readonly gone = new GoneListeners();

  constructor(onActivity: (instanceId: string) => void = () => {}, throttleMs = 15_000, clock: Clock = systemClock) {
    this.activity = new ActivityThrottle(onActivity, throttleMs, clock);
  }

  get(instanceId: string): InstanceRoute | undefined {
    return this.routes.get(instanceId);
  }

  set(route: InstanceRoute): void {
    this.routes.set(route.instanceId, route);
  }

  delete(instanceId: string): void {
    const route = this.routes.get(instanceId);
    this.routes.delete(instanceId);
    this.activity.forget(instanceId);
    if (route) this.gone.tell(instanceId, addressesOf(route));
  }

  onGone(listener: GoneListener): () => void {
    return this.gone.add(listener);
  }

  recordActivity(instanceId: string): void {
    this.activity.record(instanceId);
  }

  get size(): number {
    return this.routes.size;
  }
}

/**
 * Passes an activity report on at most once per `intervalMs` per instance, so that counting every
 * request as activity costs one Map lookup and a comparison.
 */
export class ActivityThrottle {
  private readonly last = new Map<string, number>();

  constructor(
    private readonly report: (instanceId: string) => void,
    private readonly intervalMs: number,
    private readonly clock: Clock = systemClock,
  ) {}

  record(instanceId: string): void {
    const now = this.clock.now();
    const prev = this.last.get(instanceId);
    if (prev !== undefined && now - prev < this.intervalMs) return;
    this.last.set(instanceId, now);
    try {
      this.report(instanceId);
    } catch {
      // Activity is best effort: a failing reporter never fails a request.
    }
  }

  forget(instanceId: string): void {
    this.last.delete(instanceId);
  }

  /** Instances with a report time kept (one entry each until forget()). */
  get size(): number {
    return this.last.size;
  }
}

/** Wraps any InstanceRoutes so that its recordActivity is throttled per instance. */
export function throttledRoutes(inner: InstanceRoutes, intervalMs = 15_000, clock: Clock = systemClock): InstanceRoutes {
  const throttle = new ActivityThrottle((id) => inner.recordActivity(id), intervalMs, clock);
  inner.onGone?.((id) => throttle.forget(id));
  return {
    get: (id) => inner.get(id),
    recordActivity: (id) => throttle.record(id),
    onGone: inner.onGone ? (listener) => inner.onGone!(listener) : undefined,
  };
}
