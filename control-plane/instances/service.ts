// The instance service: the one object the rest of the platform uses (routes, streams, the
// fleet, the gateway's routes), a thin facade over the concerns it is made of:
//
//   launch.ts          launch rules and the accepted launch
//   placement.ts       the FIFO queue, the choice of host, the start sent to it
//   usage-billing.ts   usage written to the ledger
//   agent-reports.ts   the agents' reports folded into the database
//   reconciliation.ts  database and agents brought back in line after a restart of either side
//   tick.ts            the periodic checks: billing, credits, lifetime, idle, silent hosts
//   gpu-activity.ts    the GPU side of the idle rule: a busy GPU (its telemetry) is activity
//   gpu-history.ts     the last samples of every GPU (the console's sparklines; gpu-views.ts)
//   lifecycle.ts       every state change (route cache, bus), failing and destroying
//   connections.ts     the connections to the host agents
//
// The database is the truth; an agent's report moves an instance only along an allowed
// transition (states.ts); after a restart of either side, reconciliation brings the two back in line.
import type { Bus } from '../../lib/bus.js';
import { systemClock, type Clock } from '../../lib/clock.js';
import { createLogger, type Logger } from '../../lib/log.js';
import type { Account } from '../accounts.js';
import type { HostInfo } from '../../agent/types.js';
import type { Store } from '../store.js';
import { AgentReports } from './agent-reports.js';
import type { AgentConfig, AgentConnection } from './agents.js';
import { AgentConnections } from './connections.js';
import type { InstanceContext } from './context.js';
import { NO_ACTIVE_INSTANCE, noInstance } from './errors.js';
import type { HostStore } from './host-store.js';
import { HostSync } from './host-sync.js';
import { Launcher, type LaunchInput } from './launch.js';
import { launchQuote, type LaunchQuote } from './launch-quote.js';
import { InstanceLifecycle } from './lifecycle.js';
import { LiveRoutes, type InstanceRoute } from './live-routes.js';
import { LiveTunnels } from './live-tunnels.js';
import type { LogTails } from './log-tails.js';
import { GpuActivity } from './gpu-activity.js';
import { GpuHistory } from './gpu-history.js';
import { hostGpusView, instanceGpusView, type HostGpuHistoryView, type InstanceGpusView } from './gpu-views.js';
import { Placement, type Provisioner } from './placement.js';
import { Reconciliation } from './reconciliation.js';
import { publicUrls, resolveInstanceSettings, type InstanceSettings, type PublicUrls } from './settings.js';
import type { InstanceRow, InstanceStore } from './store.js';
import { InstanceTicker } from './tick.js';
import { UsageBilling } from './usage-billing.js';
import { ACTIVE } from './states.js';
import { instanceGpuUsage, queuedMessage, toStatus, type InstanceStatus } from './views.js';
import { WorkLease } from '../work-lease.js';

export type { InstanceRoute } from './live-routes.js';
export type { LaunchInput } from './launch.js';
export type { Provisioner } from './placement.js';

export interface InstanceServiceOptions {
  store: Store;
  bus: Bus;
  clock?: Clock;
  logger?: Logger;
  /** Hosts given at start (the embedded local agent); hosts registered with `rc host add` come from the database. */
  agents: AgentConfig[];
  settings?: Partial<InstanceSettings>;
  /** Added to each launch spec when it is sent to the host (not stored: derived from the instance id). */
  provision?: Provisioner;
  /** The platform API's public URL (base URLs point at its hand-over route); default from the settings. Read when a status is made. */
  apiUrl?: () => string;
}

export class InstanceService {
  /** The instance tables (`store.instances`). */
  readonly instances: InstanceStore;
  /** The last log lines of ended instances (saved before the host removes them; `store.logTails`). */
  readonly logTails: LogTails;
  /** The hosts registry (`store.hosts`). */
  readonly hosts: HostStore;
  readonly settings: InstanceSettings;
  /** The connections to the host agents, by host name. */
  readonly agents: ReadonlyMap<string, AgentConnection>;
  /** Each live instance's tunnels, as the gateways' brokers announce them (live-tunnels.ts). */
  readonly tunnels: LiveTunnels;
  private readonly clock: Clock;
  private readonly urls: PublicUrls;
  private readonly connections: AgentConnections;
  private readonly hostSync: HostSync;
  private readonly routes = new LiveRoutes();
  private readonly lifecycle: InstanceLifecycle;
  private readonly reports: AgentReports;
  private readonly placement: Placement;
  private readonly reconciliation: Reconciliation;
  private readonly launcher: Launcher;
  private readonly ticker: InstanceTicker;
  private readonly gpuActivity: GpuActivity;
  /** The last telemetry samples of every GPU, in this process's memory (gpu-history.ts). */
  readonly gpuHistory: GpuHistory;
  /** Told which instances' GPUs got a new sample (in this process only: never on the bus, which may be Redis). */
  private readonly sampleListeners = new Set<(instanceIds: ReadonlySet<string>) => void>();
  private readonly ctx: InstanceContext;

  /** Builds the service over the database's hosts and live instances (InstanceService.create). */
  private constructor(o: InstanceServiceOptions, hosts: Awaited<ReturnType<HostStore['list']>>, live: InstanceRow[]) {
    const { store } = o;
    this.clock = o.clock ?? store.clock ?? systemClock;
    const log = (o.logger ?? createLogger()).child({ part: 'instances' });
    this.settings = resolveInstanceSettings(o.settings);
    this.urls = publicUrls(this.settings, o.apiUrl);
    this.instances = store.instances;
    this.logTails = store.logTails;
    this.hosts = store.hosts;
    this.gpuHistory = new GpuHistory(this.settings.instanceGpuHistorySamples);
    this.tunnels = new LiveTunnels(o.bus, this.clock);
    this.gpuActivity = new GpuActivity({ busyPct: this.settings.instanceGpuBusyPct, windowMs: this.settings.instanceGpuBusyWindowSec * 1000 }, (id, at) =>
      this.routes.recordActivity(id, at),
    );
    this.connections = new AgentConnections(this.clock, log, this.settings.instanceHostStallMs, {
      onConnect: (c) => this.reconciliation.reconcile(c),
      onEvent: (c, e) => this.reports.onEvent(c, e),
      onHost: (c) => {
        if (c.host) this.recordTelemetry(c.id, c.host);
        void this.placement.schedule();
      },
    });
    this.agents = this.connections.all;
    this.hostSync = new HostSync(
      store.hosts,
      this.connections,
      o.bus,
      log,
      (name) => this.forgetHost(name),
      () => void this.placement.schedule(),
    );
    const background = new WorkLease(store, 'background', this.settings.instanceLeaseMs, this.clock);
    const ctx: InstanceContext = { store, settings: this.settings, clock: this.clock, log, agents: this.agents, background };
    this.ctx = ctx;
    const billing = new UsageBilling(store);
    this.lifecycle = new InstanceLifecycle(ctx, this.routes, o.bus, billing, () => void this.placement.schedule());
    this.reports = new AgentReports(ctx, this.lifecycle);
    this.placement = new Placement(ctx, this.lifecycle, this.reports, o.provision);
    this.reconciliation = new Reconciliation(ctx, this.lifecycle, this.reports, this.placement);
    this.launcher = new Launcher(ctx, this.lifecycle, this.placement);
    this.ticker = new InstanceTicker(ctx, this.routes, billing, this.lifecycle, this.placement);
    this.connections.attachAll(o.agents, hosts);
    for (const r of live) this.routes.update(r);
  }

  /** The service over the database's registered hosts and live instances. */
  static async create(o: InstanceServiceOptions): Promise<InstanceService> {
    return new InstanceService(o, await o.store.hosts.list(), await o.store.instances.live());
  }

  // ---- hosts and the service's life ----------------------------------------------------------

  /** Adds a connection to a host (dialled now when the service runs); replaces one of the same name. */
  attachHost(config: AgentConfig): AgentConnection {
    return this.connections.attach(config);
  }

  /** Closes the connection to a host and forgets it (its instances must have ended: see endOnHost). */
  async detachHost(id: string): Promise<void> {
    await this.connections.detach(id);
    this.forgetHost(id);
  }

  /** After the hang-up: no host item of it can arrive any more to bring its GPUs back. */
  private forgetHost(id: string): void {
    this.gpuActivity.forget(id);
    this.gpuHistory.forget(id);
  }

  /** This control plane changed the hosts registry: the others on the database follow (host-sync.ts). */
  hostsChanged(): void {
    this.hostSync.announce();
  }

  /**
   * Ends every instance on a host that is being removed by force: failed with `host_removed`,
   * billed up to now; the agent (when it answers) is asked to remove them.
   */
  endOnHost(id: string): Promise<void> {
    return this.reconciliation.endOnHost(id);
  }

  /** A host status arrived: its GPUs' samples go to the idle rule and the history, and the instances that got one are told. */
  private recordTelemetry(hostName: string, host: HostInfo): void {
    this.gpuActivity.record(hostName, host, this.clock.now());
    const fresh = this.gpuHistory.record(hostName, host);
    if (fresh.size) for (const l of this.sampleListeners) l(fresh);
  }

  /** Calls `listener` with the instances whose GPUs got a new telemetry sample; returns the unsubscribe function. */
  onGpuSamples(listener: (instanceIds: ReadonlySet<string>) => void): () => void {
    this.sampleListeners.add(listener);
    return () => this.sampleListeners.delete(listener);
  }

  /** Dials the agents and starts the periodic tick. */
  start(): void {
    this.connections.start();
    this.hostSync.start();
    this.ticker.start();
  }

  /** Stops the tick and the agent streams. Instances keep running; the next start reconciles them. */
  async close(): Promise<void> {
    this.placement.stop();
    await this.hostSync.close();
    await this.ticker.stop();
    await this.connections.close();
    await this.ticker.flushActivity();
    this.tunnels.close();
  }

  // ---- the API -------------------------------------------------------------------------------

  async view(r: InstanceRow): Promise<InstanceStatus> {
    const status = toStatus(r, this.clock.now(), this.urls, this.settings.instanceIdleTimeoutSec * 1000, this.settings.instanceStopWarningSec * 1000);
    const position = await this.queuePosition(r);
    if (position !== null) return { ...status, message: queuedMessage(position) };
    if (r.agent_id === null || (r.state !== 'ready' && r.state !== 'pending')) return status;
    return { ...status, gpus: instanceGpuUsage(this.agents.get(r.agent_id)?.host, r.id), tunnels: this.tunnels.of(r.id) };
  }

  /**
   * The GPUs an instance holds while pending or ready, their figures and (with `history`) the
   * samples taken while it held them; none once it ended or while it waits in the queue.
   */
  gpus(r: InstanceRow, history: boolean): InstanceGpusView {
    const live = r.agent_id !== null && (r.state === 'ready' || r.state === 'pending');
    const conn = live ? this.agents.get(r.agent_id!) : undefined;
    return instanceGpusView(r.id, conn, history ? this.gpuHistory : undefined);
  }

  /** Every GPU of a host with its holder, figures and history (operators); undefined for an unknown host. */
  hostGpus(name: string): HostGpuHistoryView | undefined {
    const conn = this.agents.get(name);
    return conn && hostGpusView(conn, this.gpuHistory);
  }

  /** 1-based place of a queued (pending, unplaced) instance in the queue; null otherwise. */
  async queuePosition(r: InstanceRow): Promise<number | null> {
    if (r.state !== 'pending' || r.agent_id !== null) return null;
    const i = (await this.instances.queue()).findIndex((q) => q.id === r.id);
    return i < 0 ? null : i + 1;
  }

  /** The account's most recent instance (any state); 404 when it never had one. */
  async status(accountId: number): Promise<InstanceStatus> {
    const r = await this.instances.latest(accountId);
    if (!r) throw noInstance();
    return this.view(r);
  }

  /** Launches `templateId` for `account` (the rules and their order: launch.ts). */
  async launch(account: Account, templateId: number, input: LaunchInput): Promise<InstanceStatus> {
    return this.view(await this.launcher.launch(account, templateId, input));
  }

  /** How long (ms) until the account may launch again; 0 when it may now. The longest wait of every full window. */
  launchWait(accountId: number, now: number): Promise<number> {
    return this.launcher.launchWait(accountId, now);
  }

  /** Price per GPU count, balance and the hours it buys, free GPUs, launch rate left (launch-quote.ts). */
  async launchQuote(accountId: number): Promise<LaunchQuote> {
    const wait = await this.launcher.launchWait(accountId, this.clock.now());
    return launchQuote(this.ctx, accountId, this.launcher.windows, (c) => this.placement.freeGpus(c), wait);
  }

  /** Destroys the account's active instance; 404 when there is none. Billing stops now. */
  async destroyCurrent(accountId: number): Promise<InstanceStatus> {
    const r = await this.instances.active(accountId);
    if (!r) throw noInstance(NO_ACTIVE_INSTANCE);
    await this.lifecycle.destroy(r, null, null);
    return this.view((await this.instances.get(r.id))!);
  }

  /**
   * Destroys any account's active instance (the operator's console): `reason` and `detail` land in
   * its status object, so the owner sees why. 404 when it is not pending or ready.
   */
  async destroyById(instanceId: string, reason: string, detail: string): Promise<InstanceStatus> {
    const r = await this.instances.get(instanceId);
    if (!r || !ACTIVE.includes(r.state)) throw noInstance(NO_ACTIVE_INSTANCE);
    await this.lifecycle.destroy(r, reason, detail);
    return this.view((await this.instances.get(r.id))!);
  }

  /** Dedicated-endpoint, proxy, tunnel or SSH traffic: the instance is not idle. */
  recordActivity(instanceId: string): void {
    this.routes.recordActivity(instanceId, this.clock.now());
  }

  /** Every live instance's route (the gateways' snapshot). */
  allRoutes(): InstanceRoute[] {
    return this.routes.all();
  }

  /** Where to relay traffic for an instance (pending, ready or stopping), from memory. */
  route(instanceId: string): InstanceRoute | undefined {
    return this.routes.get(instanceId);
  }

  /** GPUs of a connected host not held by its pending, ready or stopping instances. */
  freeGpus(conn: AgentConnection): Promise<number> {
    return this.placement.freeGpus(conn);
  }

  /** Places waiting instances, first come first served: the head of the queue blocks the rest until it fits. */
  schedule(): Promise<void> {
    return this.placement.schedule();
  }

  /** Billing, credits, lifetime, idle timeout and unreachable hosts; then the queue (tick.ts). Tests call it with a fake clock. */
  tick(): Promise<void> {
    return this.ticker.tick();
  }
}
