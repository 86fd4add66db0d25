// What every part of the instance service shares: the platform's store (the instances' tables
// are registered on it), the resolved settings, the clock, the logger and the connections to the
// host agents. Built once by the facade (service.ts) and handed to each part.
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/log.js';
import type { Store } from '../store.js';
import type { WorkLease } from '../work-lease.js';
import type { AgentConnection } from './agents.js';
import type { InstanceSettings } from './settings.js';

export interface InstanceContext {
  /** The database is the truth: `store.instances`, `store.logTails`, the ledger, transactions. */
  readonly store: Store;
  readonly settings: InstanceSettings;
  readonly clock: Clock;
  readonly log: Logger;
  /** The connected (or redialling) host agents by host name (connections.ts). */
  readonly agents: ReadonlyMap<string, AgentConnection>;
  /**
   * Control planes on one database: the lease under which one of them runs the tick's work and
   * placement (control-plane/leases.ts); on a single control plane, always this one's.
   */
  readonly background: WorkLease;
}
