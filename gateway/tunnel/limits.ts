// Bounds on what one instance, one account or one client address may hold of the broker (issue
// 44): a start command that opened tunnels in a loop (a new port each time) got ~6,650 of them in
// 20 s, 3 descriptors each, and the platform process hit its descriptor limit. Now:
//
// - live tunnels per instance and per account: distinct tunnel ids connected or being upgraded
//   (a reconnect of a tunnel that is connected, which replaces it or gets 409, adds none);
// - connections per client address: every open or upgrading tunnel socket from that address (in
//   the docker runtime every container connects through its agent's relay, so the address is the
//   agent's and the relay bounds each container itself: agent/broker-relay.ts);
// - connection attempts per instance and per client address within a window: every upgrade
//   request counts, refused ones too, so a loop cannot probe the broker at full speed.
//
// A refusal is 429 `{detail}` with Retry-After, naming the limit and its setting; rc-tunnel shows
// the detail in its log and `rc-tunnel status` and waits at least Retry-After before it retries.

export interface TunnelLimitSettings {
  /** Live tunnels per instance (RC_TUNNEL_MAX_PER_INSTANCE). */
  perInstance: number;
  /** Live tunnels per account, all its instances together (RC_TUNNEL_MAX_PER_ACCOUNT). */
  perAccount: number;
  /** Open or upgrading tunnel connections per client address (RC_TUNNEL_MAX_PER_ADDRESS). */
  perAddress: number;
  /** Connection attempts per instance per window (RC_TUNNEL_CONNECTS_PER_MINUTE). */
  connectsPerInstance: number;
  /** Connection attempts per client address per window (RC_TUNNEL_ADDRESS_CONNECTS_PER_MINUTE). */
  connectsPerAddress: number;
  /** The attempts' window (60 s; tests shorten it). */
  windowMs: number;
}

export const DEFAULT_TUNNEL_LIMITS: TunnelLimitSettings = {
  perInstance: 16,
  perAccount: 32,
  perAddress: 1024,
  connectsPerInstance: 60,
  connectsPerAddress: 600,
  windowMs: 60_000,
};

/** A refusal: the detail the tunnel client shows, and how long it should wait. */
export interface TunnelRefusal {
  detail: string;
  retryAfterSec: number;
}

/** Attempts counted per key in fixed windows; a key's entry goes when its window is over. */
class AttemptWindows {
  private readonly counts = new Map<string, number>();
  private windowStart = 0;

  constructor(private readonly windowMs: number) {}

  /** Counts one attempt of `key`; returns the count within the current window. */
  hit(key: string, now: number): number {
    if (now - this.windowStart >= this.windowMs) {
      // One map for the whole window: clearing it is the sweep (memory: the keys of one window).
      this.counts.clear();
      this.windowStart = now;
    }
    const n = (this.counts.get(key) ?? 0) + 1;
    this.counts.set(key, n);
    return n;
  }

  /** Whole seconds until the current window ends (at least 1). */
  retryAfterSec(now: number): number {
    return Math.max(1, Math.ceil((this.windowStart + this.windowMs - now) / 1000));
  }
}

/** Counts per key that drop their entry at zero (so the maps hold only what is live). */
class Counts {
  private readonly n = new Map<string, number>();

  get(key: string): number {
    return this.n.get(key) ?? 0;
  }

  add(key: string, delta: number): void {
    const v = (this.n.get(key) ?? 0) + delta;
    if (v > 0) this.n.set(key, v);
    else this.n.delete(key);
  }

  get size(): number {
    return this.n.size;
  }
}

/** What one connection holds against the limits, from its admission to its close. */
export interface TunnelSlot {
  instanceId: string;
  accountId: number;
  address: string;
  tunnelId: string;
  /** Whether it holds a tunnel id of its instance and account (false: it replaces a connected one). */
  holdsTunnel: boolean;
  released: boolean;
}

export class TunnelLimits {
  private readonly instanceAttempts: AttemptWindows;
  private readonly addressAttempts: AttemptWindows;
  /** Connections (open or upgrading) per address. */
  private readonly byAddress = new Counts();
  /** Tunnel ids held (open or upgrading) per instance and per account; a tunnel id is held once. */
  private readonly byInstance = new Counts();
  private readonly byAccount = new Counts();
  private readonly heldIds = new Map<string, number>();

  constructor(
    readonly settings: TunnelLimitSettings,
    private readonly now: () => number = Date.now,
  ) {
    this.instanceAttempts = new AttemptWindows(settings.windowMs);
    this.addressAttempts = new AttemptWindows(settings.windowMs);
  }

  /** Counts an upgrade attempt from `address` (before anything else is checked). */
  attemptFromAddress(address: string): TunnelRefusal | undefined {
    const now = this.now();
    const s = this.settings;
    if (this.addressAttempts.hit(address, now) > s.connectsPerAddress) {
      return {
        detail: `Too many tunnel connection attempts from this address: at most ${s.connectsPerAddress} per ${windowText(s.windowMs)} (RC_TUNNEL_ADDRESS_CONNECTS_PER_MINUTE)`,
        retryAfterSec: this.addressAttempts.retryAfterSec(now),
      };
    }
    if (this.byAddress.get(address) >= s.perAddress) {
      return {
        detail: `Too many tunnel connections from this address: ${s.perAddress} are open (RC_TUNNEL_MAX_PER_ADDRESS)`,
        retryAfterSec: 30,
      };
    }
    return undefined;
  }

  /**
   * Counts an attempt of an instance and takes a slot for its connection, or refuses. `replaces`:
   * the tunnel id has a live connection already (this one replaces it, or is refused with 409).
   */
  admit(instanceId: string, accountId: number, address: string, tunnelId: string): TunnelSlot | TunnelRefusal {
    const now = this.now();
    const s = this.settings;
    if (this.instanceAttempts.hit(instanceId, now) > s.connectsPerInstance) {
      return {
        detail: `Too many tunnel connection attempts for this instance: at most ${s.connectsPerInstance} per ${windowText(s.windowMs)} (RC_TUNNEL_CONNECTS_PER_MINUTE); wait, or stop the loop that reconnects`,
        retryAfterSec: this.instanceAttempts.retryAfterSec(now),
      };
    }
    const holdsTunnel = !this.heldIds.has(tunnelId);
    if (holdsTunnel && this.byInstance.get(instanceId) >= s.perInstance) {
      return {
        detail: `Too many tunnels for this instance: ${s.perInstance} are connected (RC_TUNNEL_MAX_PER_INSTANCE); stop one (rc-tunnel status) first`,
        retryAfterSec: 30,
      };
    }
    const account = String(accountId);
    if (holdsTunnel && this.byAccount.get(account) >= s.perAccount) {
      return {
        detail: `Too many tunnels for this account: ${s.perAccount} are connected across its instances (RC_TUNNEL_MAX_PER_ACCOUNT); stop one first`,
        retryAfterSec: 30,
      };
    }
    this.byAddress.add(address, 1);
    if (holdsTunnel) {
      this.heldIds.set(tunnelId, 1);
      this.byInstance.add(instanceId, 1);
      this.byAccount.add(account, 1);
    } else this.heldIds.set(tunnelId, (this.heldIds.get(tunnelId) ?? 0) + 1);
    return { instanceId, accountId, address, tunnelId, holdsTunnel, released: false };
  }

  /** The connection closed, or its upgrade did not happen: what it held is free again. Idempotent. */
  release(slot: TunnelSlot): void {
    if (slot.released) return;
    slot.released = true;
    this.byAddress.add(slot.address, -1);
    const left = (this.heldIds.get(slot.tunnelId) ?? 1) - 1;
    if (left > 0) {
      this.heldIds.set(slot.tunnelId, left);
      return;
    }
    this.heldIds.delete(slot.tunnelId);
    // The last connection of this tunnel id: the id is no longer held by its instance and account
    // (whichever connection took it first, a replacement keeps it until the last one closes).
    this.byInstance.add(slot.instanceId, -1);
    this.byAccount.add(String(slot.accountId), -1);
  }

  /** Entries held (tests: everything is released when the connections are gone). */
  held(): { addresses: number; instances: number; accounts: number; tunnelIds: number } {
    return { addresses: this.byAddress.size, instances: this.byInstance.size, accounts: this.byAccount.size, tunnelIds: this.heldIds.size };
  }
}

export function isRefusal(x: TunnelSlot | TunnelRefusal): x is TunnelRefusal {
  return 'detail' in x;
}

function windowText(ms: number): string {
  return ms === 60_000 ? 'minute' : `${Math.round(ms / 1000)} s`;
}
