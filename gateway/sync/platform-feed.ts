// A standalone gateway's feed from the control plane (RC_CONTROL_PLANE_URL): the snapshot of
// keys, sessions, limits, catalog and instance routes at start (lib/gateway-snapshot.ts), bus
// events in between (key and session changes reach the directories directly; this feed applies
// instance routes and catalog changes), and a full resync every `resyncMs` that repairs anything
// a Redis outage made it miss. While the control plane is down the gateway keeps serving with
// what it holds and catches up at the next resync that succeeds.
//
// Nothing here is on the request path: the routes table is a Map read by the dedicated endpoints
// and the tunnel broker; activity they report is published on the bus (`instance.activity`).
import { setTimeout as sleep } from 'node:timers/promises';
import { request } from 'undici';
import type { Bus, BusEvent } from '../../lib/bus.js';
import type { ModelEntry } from '../../lib/config.js';
import { RcError } from '../../lib/errors.js';
import {
  gatewaySnapshotSchema,
  instanceRouteSchema,
  INTERNAL_TOKEN_HEADER,
  SNAPSHOT_PATH,
  type GatewaySnapshot,
  type InstanceRouteWire,
} from '../../lib/gateway-snapshot.js';
import type { Logger } from '../../lib/log.js';
import { routesFromInstances, type ServiceInstanceRoutes } from '../dedicated/from-instances.js';
import type { AccountLimits } from '../gates/limits.js';
import type { KeySource } from '../auth/keys.js';
import type { Gateway } from '../server.js';

export class SnapshotError extends RcError {
  constructor(
    message: string,
    /** The control plane's HTTP status, when it answered. */
    readonly answered?: number,
  ) {
    super('RC_ERR_GATEWAY_SNAPSHOT', message, 502);
  }
}

export interface PlatformFeedOptions {
  /** The control plane's platform API URL. */
  url: string;
  /** The internal token (RC_INTERNAL_TOKEN). */
  token: string;
  bus?: Bus;
  logger: Logger;
  /** Full resync interval (RC_GATEWAY_RESYNC_MS). */
  resyncMs: number;
  /** Activity is reported at most once per instance per this interval (per replica). */
  activityThrottleMs?: number;
}

export class PlatformFeed {
  private readonly routes = new Map<string, InstanceRouteWire>();
  /** Bus events seen while a snapshot is being fetched; replayed after it (null: no fetch running). */
  private buffered: BusEvent[] | null = null;
  private unsubscribe: (() => void) | undefined;
  private timer: NodeJS.Timeout | undefined;
  private resyncing: Promise<void> | undefined;
  private models = '';
  private closed = false;
  private target: { gateway: Gateway; limits: AccountLimits } | undefined;
  /** The instance routes as the dedicated endpoints and the tunnel broker read them. */
  readonly instanceRoutes: ServiceInstanceRoutes;

  constructor(private readonly o: PlatformFeedOptions) {
    this.instanceRoutes = routesFromInstances(
      {
        route: (id) => this.routes.get(id),
        recordActivity: (instanceId) => {
          void o.bus?.publish({ type: 'instance.activity', instanceId }).catch(() => {});
        },
      },
      o.activityThrottleMs,
    );
    // Subscribed before the first fetch, so nothing published meanwhile is lost.
    this.unsubscribe = o.bus?.subscribe((ev) => this.onEvent(ev));
  }

  /** GET the snapshot once; SnapshotError when the control plane does not answer it well. */
  async fetch(): Promise<GatewaySnapshot> {
    let res;
    try {
      res = await request(new URL(SNAPSHOT_PATH, this.o.url), {
        headers: { [INTERNAL_TOKEN_HEADER]: this.o.token },
        headersTimeout: 10_000,
        bodyTimeout: 30_000,
      });
    } catch (err) {
      throw new SnapshotError(`control plane ${this.o.url} unreachable: ${(err as Error).message}`);
    }
    const text = await res.body.text();
    if (res.statusCode !== 200)
      throw new SnapshotError(`control plane ${this.o.url} answered ${res.statusCode} to the snapshot: ${text.slice(0, 200)}`, res.statusCode);
    let parsed;
    try {
      parsed = gatewaySnapshotSchema.safeParse(JSON.parse(text));
    } catch {
      throw new SnapshotError('the snapshot is not JSON');
    }
    if (!parsed.success) throw new SnapshotError(`the snapshot is malformed: ${parsed.error.issues[0]!.path.join('.')}: ${parsed.error.issues[0]!.message}`);
    return parsed.data;
  }

  /**
   * The first snapshot, retried until the control plane answers (a gateway without it has no
   * keys to serve with). A bad token (401) is not retried: that is a configuration error.
   */
  async first(): Promise<GatewaySnapshot> {
    this.buffered = [];
    for (let wait = 200; ; wait = Math.min(wait * 2, 5000)) {
      try {
        const snap = await this.fetch();
        this.setRoutes(snap.instances);
        return snap;
      } catch (err) {
        if (this.closed || (err instanceof SnapshotError && err.answered === 401)) throw err; // a wrong token: waiting cannot help
        this.o.logger.warn('waiting for the control plane', { err: (err as Error).message });
        await sleep(wait);
      }
    }
  }

  /** A KeySource over the first snapshot (createGateway loads it once). */
  keySource(snap: GatewaySnapshot): KeySource {
    return { load: async () => snap.keys, loadSessions: async () => snap.sessions };
  }

  /** Account limit overrides of a snapshot, as AccountLimits.load takes them. */
  static limitEntries(snap: GatewaySnapshot): [number, { rpm?: number | null; tpm?: number | null; dailyTokens?: number | null }][] {
    return snap.limits.map((l) => [l.accountId, { rpm: l.rpm, tpm: l.tpm, dailyTokens: l.dailyTokens }]);
  }

  /** Starts following: catalog events and the periodic resync act on `gateway` and `limits`. */
  follow(gateway: Gateway, limits: AccountLimits, snap: GatewaySnapshot): void {
    this.target = { gateway, limits };
    this.models = JSON.stringify(snap.models);
    // Events between the first fetch and the gateway's own subscriptions are replayed here.
    const since = this.buffered ?? [];
    this.buffered = null;
    this.apply(snap, since);
    this.timer = setInterval(() => void this.resync('periodic'), this.o.resyncMs);
    this.timer.unref();
  }

  /** Fetches a snapshot and replaces everything with it; a failure keeps what the gateway holds. */
  resync(why: string): Promise<void> {
    this.resyncing ??= this.runResync(why).finally(() => {
      this.resyncing = undefined;
    });
    return this.resyncing;
  }

  private async runResync(why: string): Promise<void> {
    const t = this.target;
    if (!t || this.closed) return;
    this.buffered = [];
    let snap: GatewaySnapshot;
    try {
      snap = await this.fetch();
    } catch (err) {
      this.buffered = null;
      this.o.logger.warn('resync failed; serving with what we hold', { why, err: (err as Error).message });
      return;
    }
    const since = this.buffered;
    this.buffered = null;
    this.apply(snap, since);
    this.o.logger.debug('resynced with the control plane', { why, keys: snap.keys.length, instances: snap.instances.length });
  }

  /** Replaces everything with `snap`, then replays the events that arrived while it was fetched. */
  private apply(snap: GatewaySnapshot, since: readonly BusEvent[]): void {
    const t = this.target!;
    t.gateway.context.keys.replaceAll(snap.keys, since);
    t.gateway.sessions.replaceAll(snap.sessions, since);
    t.limits.load(PlatformFeed.limitEntries(snap));
    for (const ev of since) if (ev.type === 'account.changed' && ev.limits !== undefined) t.limits.set(ev.accountId, ev.limits);
    this.setRoutes(snap.instances);
    for (const ev of since) if (ev.type === 'instance.changed') this.applyRoute(ev);
    this.setModels(snap.models);
  }

  private setRoutes(list: readonly InstanceRouteWire[]): void {
    const before = [...this.routes.keys()];
    this.routes.clear();
    for (const r of list) this.routes.set(r.instanceId, r);
    // Instances that ended while no event reached us (a resync repairs the table): gone too.
    for (const id of before) if (!this.routes.has(id)) this.instanceRoutes.gone(id);
  }

  private setModels(models: ModelEntry[]): void {
    const json = JSON.stringify(models);
    if (json === this.models) return;
    this.models = json;
    this.target?.gateway.setModels(models);
  }

  private applyRoute(ev: Extract<BusEvent, { type: 'instance.changed' }>): void {
    if (ev.route === undefined) {
      void this.resync('instance changed without its route');
      return;
    }
    if (ev.route === null) {
      this.routes.delete(ev.instanceId);
      this.instanceRoutes.gone(ev.instanceId);
      return;
    }
    // Bus events are not validated on the way in: a route that does not parse is ignored (the next resync repairs it).
    const parsed = instanceRouteSchema.safeParse(ev.route);
    if (!parsed.success || parsed.data.instanceId !== ev.instanceId) {
      this.o.logger.warn('ignoring a malformed instance route event', { instanceId: ev.instanceId });
    } else if (parsed.data.status === 'stopped' || parsed.data.status === 'failed') {
      this.routes.delete(ev.instanceId);
      this.instanceRoutes.gone(ev.instanceId);
    } else {
      this.routes.set(ev.instanceId, parsed.data);
    }
  }

  private onEvent(ev: BusEvent): void {
    if (this.buffered) {
      this.buffered.push(ev);
      // Routes apply at once as well: the replay after the snapshot makes them win over it.
      if (ev.type === 'instance.changed' && ev.route !== undefined) this.applyRoute(ev);
      return;
    }
    if (ev.type === 'instance.changed') this.applyRoute(ev);
    else if (ev.type === 'catalog.changed') void this.resync('catalog changed');
  }

  close(): void {
    this.closed = true;
    this.unsubscribe?.();
    if (this.timer) clearInterval(this.timer);
  }
}
