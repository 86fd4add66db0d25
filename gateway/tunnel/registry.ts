// The live tunnels of a broker: the current connection of each tunnel id, every open connection
// (a replaced one stays until its socket closes), the origins tunnels get their URLs from, and the
// periodic check of connected tunnels against their instance. Tunnels that connect and close are
// told to the control plane (announce.ts), when the broker has a bus.
//
// An instance's tunnels end as soon as the routes say it is gone (onGone), not at the next check:
// until then they counted against its account's live tunnels (limits.ts), and a client that
// outlives its instance (`rc-tunnel --detach` did in the process runtime: a session of its own)
// kept its place, so a soak that launched and destroyed instances quickly saw a launch refused
// 429 once in ~3,700, and rc-tunnel --detach gave up before printing its URL.
import type { InstanceRoutes } from '../../lib/instance-routes.js';
import { CLOSE_INSTANCE_GONE } from '../../lib/tunnel/protocol.js';
import type { WebSocket } from '../../lib/uws.js';
import { report, type TunnelAnnouncer } from './announce.js';
import type { ConnData, Tunnel } from './connection.js';
import type { TunnelOrigins } from './origins.js';

const INSTANCE_GONE = 'The instance is no longer running';

export interface TunnelInfo {
  tunnelId: string;
  instanceId: string;
  port: number;
  publicUrl: string;
  streams: number;
  /** Response bytes its streams hold for public clients (an upper bound). */
  heldBytes: number;
  /** Streams reset because their public client did not read (per-stream or per-tunnel bound). */
  overflowResets: number;
}

export class TunnelRegistry {
  /** The current connection of each tunnel id. */
  private readonly current = new Map<string, Tunnel>();
  /** Every open connection (a replaced one stays here until its socket closes). */
  private readonly live = new Map<WebSocket<ConnData>, Tunnel>();
  private ticker: NodeJS.Timeout | undefined;
  private readonly unfollowGone: (() => void) | undefined;
  /** Tells the control plane which tunnels are connected here (absent: no bus, nobody is told). */
  announcer: TunnelAnnouncer | undefined;

  constructor(
    readonly routes: InstanceRoutes,
    /** Tunnel origins: from the public URL now, else once the tunnels' listener is started. */
    public origins: TunnelOrigins | undefined,
  ) {
    this.unfollowGone = routes.onGone?.((instanceId) => this.endInstance(instanceId));
  }

  /** Ends the tunnels of an instance that is gone (rc-tunnel stops on this close code). */
  private endInstance(instanceId: string): void {
    for (const t of [...this.current.values()]) if (t.data.instanceId === instanceId) t.end(CLOSE_INSTANCE_GONE, INSTANCE_GONE);
  }

  /** The current connection of `id`, closed or not. */
  get(id: string): Tunnel | undefined {
    return this.current.get(id);
  }

  /** The tunnel of an open socket. */
  of(ws: WebSocket<ConnData>): Tunnel | undefined {
    return this.live.get(ws);
  }

  /** `tunnel` becomes the current connection of its id; returns the one it replaces, if any. */
  add(tunnel: Tunnel): Tunnel | undefined {
    const previous = this.current.get(tunnel.data.tunnelId);
    this.current.set(tunnel.data.tunnelId, tunnel);
    this.live.set(tunnel.ws, tunnel);
    this.announcer?.opened(tunnel.data);
    return previous;
  }

  /** The socket of a tunnel closed: it is no longer live, nor current. */
  remove(ws: WebSocket<ConnData>): Tunnel | undefined {
    const tunnel = this.live.get(ws);
    if (!tunnel) return undefined;
    this.live.delete(ws);
    if (this.current.get(tunnel.data.tunnelId) === tunnel) {
      this.current.delete(tunnel.data.tunnelId);
      this.announcer?.closed(tunnel.data);
    }
    return tunnel;
  }

  /** Whether an instance may hold tunnels: known to the routes and pending or ready. */
  running(instanceId: string): boolean {
    const route = this.routes.get(instanceId);
    return route !== undefined && (route.status === 'pending' || route.status === 'ready');
  }

  /** Every `intervalMs`, connected tunnels report activity, and those whose instance stopped are closed. */
  watch(intervalMs: number): void {
    this.ticker = setInterval(() => {
      for (const t of this.current.values()) {
        if (!this.running(t.data.instanceId)) {
          t.end(CLOSE_INSTANCE_GONE, INSTANCE_GONE);
          continue;
        }
        this.routes.recordActivity(t.data.instanceId);
      }
    }, intervalMs);
    this.ticker.unref();
  }

  info(): TunnelInfo[] {
    return [...this.current.values()].map((t) => ({
      tunnelId: t.data.tunnelId,
      instanceId: t.data.instanceId,
      port: t.data.port,
      publicUrl: t.data.publicUrl,
      streams: t.streams.size,
      heldBytes: t.credit.held,
      overflowResets: t.credit.overflowResets,
    }));
  }

  /** The connected tunnels as the control plane is told of them. */
  reports(): ReturnType<typeof report>[] {
    return [...this.current.values()].map((t) => report(t.data));
  }

  /** Stops the check and closes every open connection with `code`. */
  close(code: number, reason: string): void {
    if (this.ticker) clearInterval(this.ticker);
    this.unfollowGone?.();
    this.announcer?.stop();
    for (const t of [...this.live.values()]) t.end(code, reason);
  }
}
