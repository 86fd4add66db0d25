// The instance service: launch rules, the FIFO scheduler, billing, lifetime and idle
// enforcement, and the agents' state folded into the database. The database is the truth; an
// agent's report moves an instance only along an allowed transition (states.ts); after a
// restart of either side, reconciliation brings the two back in line.
import { AgentCallError } from '../../agent/errors.js';
import type { InstanceEvent, InstanceInfo } from '../../agent/types.js';
import type { Bus } from '../../lib/bus.js';
import { systemClock, type Clock } from '../../lib/clock.js';
import { randomBytes } from 'node:crypto';
import { createLogger, type Logger } from '../../lib/log.js';
import type { Account } from '../accounts.js';
import { accountNotVerified, badRequest, INVALID_IMAGE, notFound } from '../errors.js';
import type { Store } from '../store.js';
import { AgentConnection, type AgentConfig } from './agents.js';
import { HostStore } from './host-store.js';
import { MICROS_PER_CREDIT, pendingCharges, usageKey } from './billing.js';
import {
  diskTooLarge,
  gpuCountInvalid,
  insufficientCredits,
  launchRateLimited,
  launchTokenInvalid,
  launchVerificationRequired,
  NO_ACTIVE_INSTANCE,
  noInstance,
  oneActiveInstance,
} from './errors.js';
import { buildSpec, mainPort, SSH_PORT } from './launch-spec.js';
import { liveBalanceMicros } from './live-balance.js';
import { LogTails } from './log-tails.js';
import { parseRateWindows, publicUrls, resolveInstanceSettings, type InstanceSettings, type PublicUrls, type RateWindow } from './settings.js';
import { ACTIVE } from './states.js';
import { InstanceStore, snapshotOf, type Changes, type InstanceRow, type TemplateSnapshot } from './store.js';
import { toStatus, type InstanceStatus } from './views.js';

export const GPU_COUNTS: readonly number[] = [1, 2, 4];
/** Disk ceiling (GB) per GPU count (SPEC Limits); the floor is 100 GB. */
export const DISK_CEILING_GB: Readonly<Record<number, number>> = { 1: 100, 2: 150, 4: 200 };

/** Stable reasons of instances the platform ended itself (status `reason`). */
export const EndReason = {
  lifetime: 'lifetime_exceeded',
  idle: 'idle_timeout',
  credits: 'insufficient_credits',
  hostLost: 'host_lost',
  lost: 'lost',
  startRejected: 'start_rejected',
  stoppedByHost: 'stopped_by_host',
  hostRemoved: 'host_removed',
} as const;

export const HOST_UNREACHABLE = 'host unreachable';

/** A launch spec as stored with the instance (JSON: no files). */
type StoredSpec = ReturnType<typeof buildSpec>;

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

/** Files (relative to the instance directory) and environment provisioned into every instance, such as the rc-tunnel identity. */
export type Provisioner = (instanceId: string) => { files: Record<string, string>; env: Record<string, string> };

export interface LaunchInput {
  gpu_count?: unknown;
  launch_verification_token?: unknown;
}

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
  readonly instances: InstanceStore;
  /** The last log lines of ended instances (saved before the host removes them). */
  readonly logTails: LogTails;
  readonly settings: InstanceSettings;
  readonly agents = new Map<string, AgentConnection>();
  readonly hosts: HostStore;
  private readonly store: Store;
  private readonly bus: Bus;
  private readonly clock: Clock;
  private readonly log: Logger;
  private readonly windows: RateWindow[];
  private readonly urls: PublicUrls;
  private readonly provision: Provisioner | undefined;
  private readonly routes = new Map<string, InstanceRoute>();
  /** Activity seen since the last tick (instance id -> time); flushed to the database by tick(). */
  private readonly activity = new Map<string, number>();
  private timer: NodeJS.Timeout | undefined;
  private ticking: Promise<void> | undefined;
  private closed = false;
  private started = false;

  constructor(o: InstanceServiceOptions) {
    this.store = o.store;
    this.bus = o.bus;
    this.clock = o.clock ?? o.store.clock ?? systemClock;
    this.log = (o.logger ?? createLogger()).child({ part: 'instances' });
    this.settings = resolveInstanceSettings(o.settings);
    this.windows = parseRateWindows(this.settings.instanceLaunchRate);
    this.urls = publicUrls(this.settings, o.apiUrl);
    this.provision = o.provision;
    this.instances = new InstanceStore(o.store.db);
    this.logTails = new LogTails(o.store.db);
    this.hosts = new HostStore(o.store.db, o.store.sealKey, this.clock);
    for (const a of o.agents) this.attachHost(a);
    for (const h of this.hosts.list()) {
      if (this.agents.has(h.name)) continue; // a host given at start wins over a stored one of the same name
      if (h.token === undefined) this.log.error('host token cannot be unsealed (seal.key changed?); rc host add it again', { host: h.name });
      else this.attachHost({ id: h.name, address: h.address, token: h.token, draining: h.draining, registered: true });
    }
    for (const r of this.instances.live()) this.cacheRoute(r);
  }

  /** Adds a connection to a host (dialled now when the service runs); replaces one of the same name. */
  attachHost(config: AgentConfig): AgentConnection {
    const conn = new AgentConnection(
      config,
      this.clock,
      this.log,
      {
        onConnect: (c) => this.reconcile(c),
        onEvent: (c, e) => this.onAgentEvent(c, e),
        onHost: () => this.schedule(),
      },
      this.settings.instanceHostStallMs,
    );
    const old = this.agents.get(config.id);
    this.agents.set(config.id, conn);
    if (old) void old.close();
    if (this.started) conn.start();
    return conn;
  }

  /** Closes the connection to a host and forgets it (its instances must have ended: see endOnHost). */
  async detachHost(id: string): Promise<void> {
    const conn = this.agents.get(id);
    if (!conn) return;
    this.agents.delete(id);
    await conn.close();
  }

  /**
   * Ends every instance on a host that is being removed by force: failed with `host_removed`,
   * billed up to now; the agent (when it answers) is asked to remove them.
   */
  async endOnHost(id: string): Promise<void> {
    const conn = this.agents.get(id);
    // Ending instances reschedules the queue: nothing may be placed on the host being removed.
    if (conn) conn.draining = true;
    for (const r of this.instances.onAgent(id)) {
      if (r.state === 'stopping') this.markStopped(r.id);
      else this.fail(r, 'Its host was removed from the platform', EndReason.hostRemoved, `Host ${id} was removed with --force`);
    }
    if (conn?.connected) await conn.client.reconcile([]).catch((err: unknown) => this.log.warn('could not clear the removed host', { agent: id, err }));
  }

  /** Dials the agents and starts the periodic tick. */
  start(): void {
    this.started = true;
    for (const a of this.agents.values()) a.start();
    this.timer ??= setInterval(() => void this.tick(), this.settings.instanceTickMs);
    this.timer.unref();
  }

  /** Stops the tick and the agent streams. Instances keep running; the next start reconciles them. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.ticking;
    await Promise.all([...this.agents.values()].map((a) => a.close()));
    this.flushActivity();
  }

  // ---- the API -------------------------------------------------------------------------------

  private now(): number {
    return this.clock.now();
  }

  view(r: InstanceRow): InstanceStatus {
    return toStatus(r, this.now(), this.urls, this.settings.instanceIdleTimeoutSec * 1000);
  }

  /** The account's most recent instance (any state); 404 when it never had one. */
  status(accountId: number): InstanceStatus {
    const r = this.instances.latest(accountId);
    if (!r) throw noInstance();
    return this.view(r);
  }

  /**
   * Launches `templateId` for `account`. Checks in this order: verified (403), template visible
   * (404), gpu_count (400), launch verification token present (403), then in one transaction:
   * token valid (403), image enabled (400), disk ceiling (400), no active instance (400),
   * credits (400), launch rate (429). Nothing is written unless every check passes.
   */
  launch(account: Account, templateId: number, input: LaunchInput): InstanceStatus {
    if (!account.verified) throw accountNotVerified();
    const template = this.store.templates.get(templateId);
    const owner = this.store.templates.ownerOf(templateId);
    if (!template || (!template.enabled && owner !== account.id)) throw notFound('Template not found');
    const gpus = input.gpu_count ?? 1;
    if (typeof gpus !== 'number' || !GPU_COUNTS.includes(gpus)) throw gpuCountInvalid();
    const token = input.launch_verification_token;
    if (token !== undefined && token !== null && (typeof token !== 'string' || token.length > 256)) {
      throw badRequest('launch_verification_token must be a string', 'RC_ERR_VALIDATION');
    }
    if (account.launchVerification && !token) throw launchVerificationRequired();

    const now = this.now();
    // A DNS label (lowercase hex): the id is the first label of the app's own origin on the
    // instance proxy (lib/instance-origin.ts).
    const id = `inst-${randomBytes(12).toString('hex')}`;
    const snapshot: TemplateSnapshot = {
      id: template.id,
      title: template.title,
      image: template.image,
      instance_type: template.instance_type,
      repo_url: template.repo_url,
      branch: template.branch,
      notebook_path: template.notebook_path,
      start_command: template.start_command,
      app_port: template.app_port,
      ssh_enabled: template.ssh_enabled,
      persistent_storage: template.persistent_storage,
      disk_gb: template.disk_gb,
      ssh_public_key: template.ssh_enabled ? account.sshPublicKey : null,
    };
    this.store.transaction(() => {
      if (account.launchVerification && !this.instances.consumeLaunchToken(account.id, token as string, now)) throw launchTokenInvalid();
      if (!this.store.images.isEnabled(template.image)) throw badRequest(INVALID_IMAGE, 'invalid_image');
      const ceiling = DISK_CEILING_GB[gpus]!;
      if (template.disk_gb > ceiling) throw diskTooLarge(template.disk_gb, ceiling, gpus);
      if (this.instances.active(account.id)) throw oneActiveInstance();
      if (this.store.ledger.balance(account.id) < gpus) throw insufficientCredits();
      const wait = this.launchWait(account.id, now);
      if (wait > 0) throw launchRateLimited(Math.max(1, Math.ceil(wait / 1000)));
      try {
        this.instances.insert({
          id,
          accountId: account.id,
          templateId: template.id,
          template: snapshot,
          gpuCount: gpus,
          diskGb: template.disk_gb,
          microsPerHour: Math.round(this.settings.instanceCreditsPerGpuHour * gpus * MICROS_PER_CREDIT),
          periodMs: this.settings.instanceBillingPeriodSec * 1000,
          now,
        });
      } catch (err) {
        // The partial unique index: a concurrent launch of this account won.
        if ((err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE') throw oneActiveInstance();
        throw err;
      }
      this.instances.recordLaunch(account.id, now);
    });
    const row = this.instances.get(id)!;
    this.changed(row);
    this.log.info('instance launched', { instanceId: id, accountId: account.id, templateId, gpus });
    this.schedule();
    return this.view(this.instances.get(id)!);
  }

  /** How long (ms) until the account may launch again; 0 when it may now. The longest wait of every full window. */
  launchWait(accountId: number, now: number): number {
    const longest = Math.max(0, ...this.windows.map((w) => w.ms));
    const times = this.instances.launchTimes(accountId, now - longest);
    let wait = 0;
    for (const w of this.windows) {
      const inWindow = times.filter((t) => t > now - w.ms);
      if (inWindow.length >= w.max) wait = Math.max(wait, inWindow[w.max - 1]! + w.ms - now);
    }
    return wait;
  }

  /** Destroys the account's active instance; 404 when there is none. Billing stops now. */
  async destroyCurrent(accountId: number): Promise<InstanceStatus> {
    const r = this.instances.active(accountId);
    if (!r) throw noInstance(NO_ACTIVE_INSTANCE);
    await this.destroy(r, null, null);
    return this.view(this.instances.get(r.id)!);
  }

  /** Dedicated-endpoint, proxy, tunnel or SSH traffic: the instance is not idle. */
  recordActivity(instanceId: string): void {
    if (this.routes.has(instanceId)) this.activity.set(instanceId, this.now());
  }

  /** Every live instance's route (the gateways' snapshot). */
  allRoutes(): InstanceRoute[] {
    return [...this.routes.values()];
  }

  /** Where to relay traffic for an instance (pending, ready or stopping), from memory. */
  route(instanceId: string): InstanceRoute | undefined {
    return this.routes.get(instanceId);
  }

  // ---- state changes ---------------------------------------------------------------------------

  private cacheRoute(r: InstanceRow): void {
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

  /** After every change of an instance: the route cache and the bus. */
  private changed(r: InstanceRow): void {
    this.cacheRoute(r);
    void this.bus
      .publish({ type: 'instance.changed', instanceId: r.id, route: this.routes.get(r.id) ?? null })
      .catch((err: unknown) => this.log.warn('bus publish failed', { err }));
  }

  private transition(id: string, state: InstanceRow['state'], message: string, changes?: Changes): InstanceRow | undefined {
    const r = this.instances.transition(id, state, message, this.now(), changes);
    if (r) this.changed(r);
    return r;
  }

  /** Writes the usage charges due up to `until` (all of them with `final`), in one transaction with the row's period count. */
  private bill(r: InstanceRow, until: number, final: boolean): void {
    // Billing runs from ready: a launch that never became ready (pull, start, exit, readiness
    // timeout, host lost, destroyed while pending) costs nothing.
    if (r.ready_at === null) return;
    const { charges, billedPeriods } = pendingCharges(
      { placedAt: r.ready_at, periodMs: r.period_ms, microsPerHour: r.micros_per_hour, billedPeriods: r.billed_periods },
      until,
      final,
    );
    if (billedPeriods === r.billed_periods && charges.length === 0) return;
    for (const c of charges) {
      this.store.ledger.append({
        accountId: r.account_id,
        kind: 'instance_usage',
        credits: -c.micros / MICROS_PER_CREDIT,
        idempotencyKey: usageKey(r.id, c.period),
        ref: r.id,
      });
    }
    this.instances.setBilledPeriods(r.id, r.billed_periods, billedPeriods);
  }

  /**
   * Ends an active instance as `failed` (the agent reported it, or its host is gone): final
   * usage up to now, in one transaction with the state change.
   */
  private fail(r: InstanceRow, message: string, reason: string, detail: string): InstanceRow | undefined {
    const now = this.now();
    const out = this.store.transaction(() => {
      const fresh = this.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) return undefined;
      this.bill(fresh, now, true);
      return this.instances.transition(r.id, 'failed', message, now, { reason, detail, ended_at: now });
    });
    if (out) {
      this.changed(out);
      this.log.info('instance failed', { instanceId: r.id, reason });
      this.schedule();
    }
    return out;
  }

  /**
   * Destroys an instance: final usage up to now and `stopping` in one transaction (billing stops
   * at this instant; the account may launch again at once), then the agent removes it.
   */
  private async destroy(r: InstanceRow, reason: string | null, detail: string | null): Promise<void> {
    const now = this.now();
    const row = this.store.transaction(() => {
      const fresh = this.instances.get(r.id);
      if (!fresh || !ACTIVE.includes(fresh.state)) return undefined;
      this.bill(fresh, now, true);
      return this.instances.transition(r.id, 'stopping', 'stopping', now, { reason, detail, ended_at: now });
    });
    if (!row) return;
    this.changed(row);
    this.log.info('instance destroyed', { instanceId: r.id, reason });
    if (row.agent_id === null) {
      this.markStopped(row.id);
      return;
    }
    const conn = this.agents.get(row.agent_id);
    if (!conn?.connected) return; // reconciliation finishes it when the host answers again
    try {
      await this.logTails.save(conn.client, row.id, this.now());
      await conn.client.remove(row.id);
      this.markStopped(row.id);
    } catch (err) {
      this.log.warn('agent remove failed; will retry on reconnect', { instanceId: row.id, err });
      conn.redial();
    }
  }

  private markStopped(id: string): void {
    const r = this.transition(id, 'stopped', 'stopped');
    if (r) this.schedule();
  }

  // ---- scheduling ------------------------------------------------------------------------------

  /** GPUs of a connected host not held by its pending, ready or stopping instances. */
  freeGpus(conn: AgentConnection): number {
    if (!conn.host) return 0;
    let used = 0;
    for (const r of this.instances.onAgent(conn.id)) used += r.gpu_count;
    return conn.host.gpus.length - used;
  }

  /** The host for `r`: the one holding the account's volume when it fits, else pack (fullest that fits) or spread (emptiest). */
  private pickHost(r: InstanceRow): AgentConnection | undefined {
    const fits: { conn: AgentConnection; free: number }[] = [];
    for (const conn of this.agents.values()) {
      if (!conn.connected || conn.reconciling || conn.draining) continue;
      const free = this.freeGpus(conn);
      if (free >= r.gpu_count) fits.push({ conn, free });
    }
    if (!fits.length) return undefined;
    if (snapshotOf(r).persistent_storage) {
      const home = this.instances.volumeHost(r.account_id);
      const preferred = fits.find((f) => f.conn.id === home);
      if (preferred) return preferred.conn;
    }
    const spread = this.settings.instanceSchedule === 'spread';
    fits.sort((a, b) => (spread ? b.free - a.free : a.free - b.free));
    return fits[0]!.conn;
  }

  /** Places waiting instances, first come first served: the head of the queue blocks the rest until it fits. */
  schedule(): void {
    if (this.closed) return;
    for (const r of this.instances.queue()) {
      const conn = this.pickHost(r);
      if (!conn) return;
      this.place(r, conn);
    }
  }

  private place(r: InstanceRow, conn: AgentConnection): void {
    const now = this.now();
    const spec = buildSpec(r, snapshotOf(r));
    const placed = this.transition(r.id, 'pending', 'starting', {
      agent_id: conn.id,
      spec: JSON.stringify(spec),
      placed_at: now,
      expires_at: now + this.settings.instanceMaxLifetimeSec * 1000,
    });
    if (!placed) return;
    this.log.info('instance placed', { instanceId: r.id, agent: conn.id });
    void this.sendStart(conn, placed);
  }

  /** The stored spec plus what `provision` adds for this instance (deterministic, so a resend is the same spec). */
  private withProvisioning(spec: StoredSpec): StoredSpec {
    const extra = this.provision?.(spec.instanceId);
    return extra ? { ...spec, env: { ...spec.env, ...extra.env }, files: { ...spec.files, ...extra.files } } : spec;
  }

  private async sendStart(conn: AgentConnection, r: InstanceRow): Promise<void> {
    try {
      const { instance } = await conn.client.start(this.withProvisioning(JSON.parse(r.spec!) as StoredSpec));
      await conn.run(() => this.applyInfo(conn, instance));
    } catch (err) {
      if (err instanceof AgentCallError && (err.code === 'RC_ERR_AGENT_SPEC_MISMATCH' || err.code === 'RC_ERR_AGENT_INVALID_ARGUMENT')) {
        this.fail(r, 'The host refused to start the instance', EndReason.startRejected, err.message);
        return;
      }
      // Unreachable or shutting down: reconciliation resends the same spec when the host answers.
      this.log.warn('start not delivered; will resend on reconnect', { instanceId: r.id, err });
      conn.redial();
    }
  }

  // ---- what the agents report --------------------------------------------------------------

  private async onAgentEvent(conn: AgentConnection, e: InstanceEvent): Promise<void> {
    const r = this.instances.get(e.instanceId);
    if (!r || r.agent_id !== conn.id) return;
    if (e.state === 'removed') {
      if (r.state === 'stopping') this.markStopped(r.id);
      return;
    }
    if (e.state === 'ready' && r.state === 'pending') {
      // Events carry no endpoints: read them from the agent.
      const info = (await conn.client.list()).find((i) => i.instanceId === e.instanceId);
      if (info) this.applyInfo(conn, info);
      return;
    }
    this.applyInfo(conn, { instanceId: e.instanceId, state: e.state, message: e.message, reason: e.reason, detail: e.detail, endpoints: [] });
  }

  /** Folds an agent's view of one instance into the database. */
  private applyInfo(conn: AgentConnection, info: Pick<InstanceInfo, 'instanceId' | 'state' | 'message' | 'reason' | 'detail' | 'endpoints'>): void {
    const r = this.instances.get(info.instanceId);
    if (!r || r.agent_id !== conn.id) return;
    const live = r.state === 'pending' || r.state === 'ready';
    switch (info.state) {
      case 'pending':
        if (r.state === 'pending' && r.message !== info.message) this.transition(r.id, 'pending', info.message);
        return;
      case 'ready': {
        if (!live) return;
        const main = info.endpoints[0];
        const ssh = info.endpoints.find((e) => e.port === SSH_PORT);
        const now = this.now();
        if (r.state === 'pending') {
          this.transition(r.id, 'ready', 'ready', {
            ready_at: now,
            last_activity_at: now,
            endpoint_host: main?.host ?? null,
            endpoint_port: main?.hostPort ?? null,
            ssh_port: ssh?.hostPort ?? null,
          });
        } else if (r.message !== 'ready' || (main && main.hostPort !== r.endpoint_port)) {
          this.transition(r.id, 'ready', 'ready', main ? { endpoint_host: main.host, endpoint_port: main.hostPort, ssh_port: ssh?.hostPort ?? null } : {});
        }
        return;
      }
      case 'failed':
        if (live) this.fail(r, info.message || 'Instance failed', info.reason || 'failed', info.detail);
        else if (r.state === 'stopping') this.markStopped(r.id);
        void this.removeQuietly(conn, r.id);
        return;
      case 'stopped':
        if (live) this.fail(r, 'Stopped by its host', info.reason || EndReason.stoppedByHost, info.detail || 'The host agent stopped the instance');
        else if (r.state === 'stopping') this.markStopped(r.id);
        void this.removeQuietly(conn, r.id);
        return;
      default:
        return; // stopping: wait for stopped
    }
  }

  private async removeQuietly(conn: AgentConnection, id: string): Promise<void> {
    try {
      await this.logTails.save(conn.client, id, this.now());
      await conn.client.remove(id);
    } catch (err) {
      this.log.debug('remove after end failed (reconciliation retries)', { instanceId: id, err });
    }
  }

  /**
   * After (re)connecting to a host: adopt what it runs, resend starts it never got, fail ready
   * instances it lost, finish destroys, and have it remove everything the database does not want.
   */
  private async reconcile(conn: AgentConnection): Promise<void> {
    conn.reconciling = true;
    try {
      const infos = new Map((await conn.client.list()).map((i) => [i.instanceId, i]));
      for (const r of this.instances.onAgent(conn.id)) {
        if (r.state === 'stopping') continue;
        const info = infos.get(r.id);
        if (info) this.applyInfo(conn, info);
        else if (r.state === 'pending') void this.sendStart(conn, r);
        else this.fail(r, 'Instance lost', EndReason.lost, 'Its host no longer had the instance when it reconnected');
      }
      const wanted = this.instances
        .onAgent(conn.id)
        .filter((r) => r.state !== 'stopping')
        .map((r) => r.id);
      await conn.client.reconcile(wanted);
      for (const r of this.instances.onAgent(conn.id)) if (r.state === 'stopping') this.markStopped(r.id);
    } finally {
      conn.reconciling = false;
    }
    this.schedule();
  }

  // ---- the periodic checks ----------------------------------------------------------------

  private flushActivity(): void {
    if (!this.activity.size) return;
    const seen = [...this.activity];
    this.activity.clear();
    this.store.transaction(() => {
      for (const [id, at] of seen) this.instances.touch(id, at);
    });
  }

  /**
   * Billing (complete periods), credits, lifetime, idle timeout and unreachable hosts; then the
   * queue. Runs every instanceTickMs; tests call it directly with a fake clock.
   */
  tick(): Promise<void> {
    this.ticking ??= this.runTick().finally(() => {
      this.ticking = undefined;
    });
    return this.ticking;
  }

  private async runTick(): Promise<void> {
    if (this.closed) return;
    this.flushActivity();
    const now = this.now();
    const idleMs = this.settings.instanceIdleTimeoutSec * 1000;
    const ends: Promise<void>[] = [];
    for (const r0 of this.instances.live()) {
      if (r0.state === 'stopping') continue;
      const r = this.store.transaction(() => {
        this.bill(r0, now, false);
        return this.instances.get(r0.id)!;
      });
      if (r.placed_at === null) continue;
      const balanceMicros = liveBalanceMicros(this.store, r.account_id, now); // the figure GET /api/me shows
      if (balanceMicros <= 0) {
        ends.push(this.destroy(r, EndReason.credits, 'The credit balance reached zero'));
      } else if (r.expires_at !== null && now >= r.expires_at) {
        ends.push(this.destroy(r, EndReason.lifetime, `The maximum lifetime of ${this.settings.instanceMaxLifetimeSec} s was reached`));
      } else if (r.state === 'ready' && now >= (r.last_activity_at ?? r.ready_at ?? now) + idleMs) {
        ends.push(this.destroy(r, EndReason.idle, `No activity for ${this.settings.instanceIdleTimeoutSec} s`));
      }
    }
    await Promise.all(ends);
    this.checkHosts(now);
    this.schedule();
  }

  /** Hosts that stopped answering: first a message, then (after instanceHostLostMs) their instances fail. */
  private checkHosts(now: number): void {
    for (const conn of this.agents.values()) {
      conn.checkStall();
      if (conn.connected) continue;
      const silentMs = now - conn.downSince;
      if (silentMs < this.settings.instanceHostUnreachableMs) continue;
      for (const r of this.instances.onAgent(conn.id)) {
        if (silentMs >= this.settings.instanceHostLostMs) {
          if (r.state === 'stopping') this.markStopped(r.id);
          else this.fail(r, 'Host lost', EndReason.hostLost, `Its host did not answer for ${Math.round(silentMs / 1000)} s`);
        } else if (r.state !== 'stopping' && r.message !== HOST_UNREACHABLE) {
          this.transition(r.id, r.state, HOST_UNREACHABLE);
        }
      }
    }
  }
}
