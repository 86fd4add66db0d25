// The tunnels each live instance has open, as the gateways' brokers announce them on the bus
// (gateway/tunnel/announce.ts): the instance page lists their public URLs (issue 42), in the
// status object's `tunnels`, pushed on the status stream as they open and close.
//
// A tunnel may be connected to several brokers at once (one per gateway replica in
// RC_TUNNEL_BROKERS): it is listed while any broker holds it. Every report holds for its `ttlMs`
// (a broker refreshes them with its whole list every few seconds), so a broker that died without
// a word takes its tunnels with it once that runs out; a control plane that starts (or restarts)
// learns every tunnel from the next lists. Bus events come from other processes: each is checked
// before use, and one that does not parse is ignored (the next list repairs what it missed).
import { z } from 'zod';
import type { Bus, BusEvent } from '../../lib/bus.js';
import type { Clock } from '../../lib/clock.js';

/** A tunnel of an instance as the status object lists it. */
export interface TunnelView {
  tunnel_id: string;
  /** The port inside the instance the tunnel forwards to. */
  port: number;
  public_url: string;
}

const report = z.object({
  instanceId: z.string().min(1).max(64),
  tunnelId: z.string().regex(/^t[0-9a-f]{24}$/),
  port: z.number().int().min(1).max(65535),
  publicUrl: z.url({ protocol: /^https?$/ }).max(2048),
});
const brokerId = z.string().min(1).max(64);
const ttlMs = z.number().int().positive().max(3_600_000);
const eventSchema = z.discriminatedUnion('type', [
  report.extend({ type: z.literal('tunnel.opened'), brokerId, ttlMs }),
  z.object({ type: z.literal('tunnel.closed'), brokerId, instanceId: report.shape.instanceId, tunnelId: report.shape.tunnelId }),
  z.object({ type: z.literal('tunnels.live'), brokerId, ttlMs, tunnels: z.array(report).max(1_000_000) }),
]);

interface Entry {
  instanceId: string;
  port: number;
  publicUrl: string;
  /** broker id -> until when its report holds (clock ms). */
  brokers: Map<string, number>;
}

/** How often expired reports are swept (so the page hears that a dead broker's tunnels went). */
const SWEEP_MS = 5_000;

export class LiveTunnels {
  /** tunnel id -> the tunnel and the brokers holding it. */
  private readonly tunnels = new Map<string, Entry>();
  /** instance id -> its tunnel ids. */
  private readonly byInstance = new Map<string, Set<string>>();
  private readonly listeners = new Set<(instanceId: string) => void>();
  private readonly unsubscribe: () => void;
  private readonly sweeper: NodeJS.Timeout;

  constructor(
    bus: Bus,
    private readonly clock: Clock,
  ) {
    this.unsubscribe = bus.subscribe((ev) => this.onEvent(ev));
    this.sweeper = setInterval(() => this.sweep(), SWEEP_MS);
    this.sweeper.unref();
  }

  /** The instance's tunnels, by port; [] when it has none. */
  of(instanceId: string): TunnelView[] {
    const now = this.clock.now();
    const out: TunnelView[] = [];
    for (const id of this.byInstance.get(instanceId) ?? []) {
      const e = this.tunnels.get(id)!;
      if ([...e.brokers.values()].some((until) => until > now)) out.push({ tunnel_id: id, port: e.port, public_url: e.publicUrl });
    }
    return out.sort((a, b) => a.port - b.port || a.tunnel_id.localeCompare(b.tunnel_id));
  }

  /** Calls `listener` with the instance whose list of tunnels changed. Returns the unsubscribe. */
  onChange(listener: (instanceId: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The instance ended: its tunnels are forgotten (their brokers close them too). */
  forget(instanceId: string): void {
    const ids = this.byInstance.get(instanceId);
    if (!ids) return;
    for (const id of ids) this.tunnels.delete(id);
    this.byInstance.delete(instanceId);
    this.notify(instanceId);
  }

  /** Tunnels held in memory (for tests: flat over a long run). */
  get size(): number {
    return this.tunnels.size;
  }

  close(): void {
    this.unsubscribe();
    clearInterval(this.sweeper);
  }

  private onEvent(ev: BusEvent): void {
    if (ev.type === 'instance.changed') {
      if (ev.route === null || (ev.route && ev.route.status !== 'pending' && ev.route.status !== 'ready')) this.forget(ev.instanceId);
      return;
    }
    if (ev.type !== 'tunnel.opened' && ev.type !== 'tunnel.closed' && ev.type !== 'tunnels.live') return;
    const parsed = eventSchema.safeParse(ev);
    if (!parsed.success) return;
    const e = parsed.data;
    const now = this.clock.now();
    if (e.type === 'tunnel.opened') this.hold(e.brokerId, e, now + e.ttlMs);
    else if (e.type === 'tunnel.closed') this.release(e.brokerId, e.tunnelId);
    else this.replace(e.brokerId, e.tunnels, now + e.ttlMs);
  }

  /** `broker` holds the tunnel until `until`. */
  private hold(broker: string, r: z.output<typeof report>, until: number): void {
    let e = this.tunnels.get(r.tunnelId);
    const isNew = !e || e.publicUrl !== r.publicUrl || e.port !== r.port || ![...e.brokers.values()].some((u) => u > this.clock.now());
    if (!e || e.instanceId !== r.instanceId) {
      if (e) this.drop(r.tunnelId, e);
      e = { instanceId: r.instanceId, port: r.port, publicUrl: r.publicUrl, brokers: new Map() };
      this.tunnels.set(r.tunnelId, e);
      const ids = this.byInstance.get(r.instanceId) ?? new Set();
      ids.add(r.tunnelId);
      this.byInstance.set(r.instanceId, ids);
    }
    e.port = r.port;
    e.publicUrl = r.publicUrl;
    e.brokers.set(broker, until);
    if (isNew) this.notify(r.instanceId);
  }

  /** `broker` no longer holds the tunnel; gone once no broker does. */
  private release(broker: string, tunnelId: string): void {
    const e = this.tunnels.get(tunnelId);
    if (!e || !e.brokers.delete(broker)) return;
    if (e.brokers.size === 0) {
      this.drop(tunnelId, e);
      this.notify(e.instanceId);
    }
  }

  /** `broker` holds exactly `list` now. */
  private replace(broker: string, list: z.output<typeof report>[], until: number): void {
    const listed = new Set(list.map((r) => r.tunnelId));
    for (const [id, e] of [...this.tunnels]) if (e.brokers.has(broker) && !listed.has(id)) this.release(broker, id);
    for (const r of list) this.hold(broker, r, until);
  }

  private drop(tunnelId: string, e: Entry): void {
    this.tunnels.delete(tunnelId);
    const ids = this.byInstance.get(e.instanceId);
    ids?.delete(tunnelId);
    if (ids?.size === 0) this.byInstance.delete(e.instanceId);
  }

  /** Reports past their time go; a tunnel no broker holds any more goes with them. */
  private sweep(): void {
    const now = this.clock.now();
    for (const [id, e] of [...this.tunnels]) {
      for (const [broker, until] of [...e.brokers]) if (until <= now) e.brokers.delete(broker);
      if (e.brokers.size === 0) {
        this.drop(id, e);
        this.notify(e.instanceId);
      }
    }
  }

  private notify(instanceId: string): void {
    for (const l of this.listeners) l(instanceId);
  }
}
