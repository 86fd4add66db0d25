// The instances part, as the platform assembly wires it:
//
//   const instances = await createInstances({ store, bus, clock, logger, agents: [{ id, address, token }], settings: config });
//   const cp = await createControlPlane({ store, bus, routes: instances.routes, ... });
//   instances.start();
//   ... await instances.close() before cp.close().
import type { ApiDeps } from '../deps.js';
import type { Route } from '../router.js';
import { gpuRoutes } from './gpu-routes.js';
import { instanceRoutes } from './routes.js';
import { streamRoutes } from './streams.js';
import type { InstanceRoute } from './live-routes.js';
import { InstanceService, type InstanceServiceOptions } from './service.js';

export type { AgentConfig } from './agents.js';
export type { InstanceSettings } from './settings.js';
export type { InstanceRoute } from './live-routes.js';
export type { InstanceStatus } from './views.js';
export { InstanceService } from './service.js';

export interface Instances {
  /** The instance endpoints, for createControlPlane's `routes` option. */
  routes(deps: ApiDeps): Route[];
  /** Dials the agents (reconciling with each) and starts billing / lifetime / idle checks. */
  start(): void;
  /** Stops checks and agent streams; instances keep running and are adopted by the next start. */
  close(): Promise<void>;
  /** Dedicated-endpoint, proxy, tunnel or SSH traffic seen for the instance: resets its idle timer. */
  recordActivity(instanceId: string): void;
  /** What the gateway needs to relay to an instance (in memory; undefined when it is not live). */
  route(instanceId: string): InstanceRoute | undefined;
  service: InstanceService;
}

export async function createInstances(options: InstanceServiceOptions): Promise<Instances> {
  const service = await InstanceService.create(options);
  return {
    routes: (deps) => [...instanceRoutes(service, deps), ...streamRoutes(service, deps), ...gpuRoutes(service)],
    start: () => service.start(),
    close: () => service.close(),
    recordActivity: (id) => service.recordActivity(id),
    route: (id) => service.route(id),
    service,
  };
}
