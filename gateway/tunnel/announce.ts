// What a broker tells the control plane about its tunnels (issue 42: the instance page lists its
// tunnels' public URLs live). The broker is the truth: only it knows which tunnels are connected,
// and with several gateway replicas each holds its own (a tunnel is on every broker its rc-tunnel
// reached, RC_TUNNEL_BROKERS). Over the bus that already carries instance activity to the
// control plane:
//
// - `tunnel.opened` when a tunnel becomes connected here, `tunnel.closed` when it is no longer;
// - `tunnels.live` every `intervalMs` with every tunnel connected here (sent while there are any,
//   and once more after the last one closed), which repairs what a lost event (a Redis outage)
//   left wrong.
//
// Each report holds for `ttlMs` (3 intervals): a broker that dies without a word (SIGKILL, a cut
// network) stops refreshing, and the control plane drops its tunnels when that runs out. The
// broker id is random per broker, so a restarted gateway starts a fresh list.
import { randomUUID } from 'node:crypto';
import type { Bus, BusEvent, TunnelReport } from '../../lib/bus.js';
import type { ConnData } from './connection.js';

/** How often a broker sends its whole list; reports hold for three of these. */
export const ANNOUNCE_INTERVAL_MS = 10_000;

export class TunnelAnnouncer {
  readonly brokerId = randomUUID();
  private timer: NodeJS.Timeout | undefined;
  /** Whether the last `tunnels.live` listed any tunnel (one empty list follows the last one). */
  private listedAny = false;

  constructor(
    private readonly bus: Bus,
    /** The tunnels connected here now. */
    private readonly list: () => TunnelReport[],
    private readonly intervalMs = ANNOUNCE_INTERVAL_MS,
  ) {}

  get ttlMs(): number {
    return 3 * this.intervalMs;
  }

  opened(d: ConnData): void {
    this.send({ type: 'tunnel.opened', brokerId: this.brokerId, ttlMs: this.ttlMs, ...report(d) });
  }

  closed(d: ConnData): void {
    this.send({ type: 'tunnel.closed', brokerId: this.brokerId, instanceId: d.instanceId, tunnelId: d.tunnelId });
  }

  start(): void {
    this.timer = setInterval(() => this.announce(), this.intervalMs);
    this.timer.unref();
  }

  /** Sends the whole list (while there is one, and once after it emptied). */
  announce(): void {
    const tunnels = this.list();
    if (tunnels.length === 0 && !this.listedAny) return;
    this.listedAny = tunnels.length > 0;
    this.send({ type: 'tunnels.live', brokerId: this.brokerId, ttlMs: this.ttlMs, tunnels });
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  private send(ev: BusEvent): void {
    // A failed publish (Redis down) is repaired by the next list that gets through.
    void this.bus.publish(ev).catch(() => {});
  }
}

export function report(d: Pick<ConnData, 'instanceId' | 'tunnelId' | 'port' | 'publicUrl'>): TunnelReport {
  return { instanceId: d.instanceId, tunnelId: d.tunnelId, port: d.port, publicUrl: d.publicUrl };
}
