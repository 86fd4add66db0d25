// Responses held open, bounded per owner (issue 44): a stream, a log follow or a dedicated
// request waiting on its instance holds a client connection (a descriptor) and its buffers for
// as long as it lasts, so one account (or one address, or one instance) holding thousands starved
// everyone else of the process's descriptors and memory. Each part counts what it holds here:
//
// - the model gateway's streams on the shared model routes, per account and per client address
//   (gateway/request/lifecycle.ts);
// - the dedicated endpoints' requests in flight, per instance, per account and per address
//   (gateway/dedicated/relay.ts);
// - the platform API's event streams (instance status, logs, operator events), per account and
//   per address (control-plane/router.ts);
// - the instance proxy's requests in flight and WebSockets, per instance, per account and per
//   address (control-plane/proxy/limits.ts).
//
// A place is taken before the work starts and given back exactly once, however the response
// ends (its end, a backend's error, the client going away). Past a bound the request is refused
// (429 with Retry-After, in the route's shape) with a message naming the limit and its setting.
// The counts are per process: what they protect (descriptors, memory) is per process (README,
// "Limits and replicas").
//
// Reading a client's address costs a string from uWS (an ArrayBuffer, then its text: about 5k
// instructions under callgrind, 5 % of a relayed stream). Where that matters (the model gateway's
// streams) the limits read it lazily (`lazyAddresses`): only while the process holds at least
// half the per-address bound, and from then on each address may open at most the other half.
// Streams opened before were not counted per address, but there are fewer than half the bound of
// them (each was opened while the process held fewer), so no address ever holds more than the
// bound, and a process holding few streams never reads an address.

/** One bound: at most `max` held per key, the setting that sets it, and its value (`limit`, the one refusals name). */
export interface HeldBound {
  max: number;
  setting: string;
  limit: number;
}

/** Why a held response was refused: the message the client gets, and how long it should wait. */
export class HeldRefusal {
  constructor(
    readonly message: string,
    readonly retryAfterSec: number,
  ) {}
}

/** Counts per key that drop their entry at zero (the maps hold only what is held now). */
export class HeldCounts<K> {
  private readonly n = new Map<K, number>();

  constructor(readonly bound: HeldBound) {}

  /** Whether `key` holds its maximum already. */
  full(key: K): boolean {
    const v = this.n.get(key);
    return v !== undefined && v >= this.bound.max;
  }

  add(key: K): void {
    this.n.set(key, (this.n.get(key) ?? 0) + 1);
  }

  remove(key: K): void {
    const v = (this.n.get(key) ?? 0) - 1;
    if (v > 0) this.n.set(key, v);
    else this.n.delete(key);
  }

  /** Keys holding something. */
  get size(): number {
    return this.n.size;
  }
}

export interface HeldLimitSettings {
  perAccount: number;
  perAddress: number;
  /** Only where an instance owns what is held (dedicated endpoints); undefined: not counted per instance. */
  perInstance?: number | undefined;
  /** Read addresses only while the process holds at least half `perAddress` (the head comment). */
  lazyAddresses?: boolean;
}

/** The settings' names, for the refusal messages. */
export interface HeldSettingNames {
  perAccount: string;
  perAddress: string;
  perInstance?: string;
}

/**
 * What one kind of held response counts: per account, per client address and (optionally) per
 * instance. `take` and `give` are a pair: call `give` with the same keys exactly once for every
 * `take` that returned undefined.
 */
export class HeldLimits {
  readonly byAccount: HeldCounts<number>;
  readonly byAddress: HeldCounts<string>;
  readonly byInstance: HeldCounts<string> | undefined;
  /** Held now, all keys together. */
  private count = 0;
  /** The count from which addresses are read (0: always). */
  private readonly addressesFrom: number;

  constructor(
    /** What is held, as the refusal names it ("streams", "requests in flight"). */
    readonly what: string,
    settings: HeldLimitSettings,
    names: HeldSettingNames,
    readonly retryAfterSec: number,
  ) {
    const perAddress = settings.perAddress;
    this.addressesFrom = settings.lazyAddresses ? Math.floor(perAddress / 2) : 0;
    this.byAccount = new HeldCounts({ max: settings.perAccount, setting: names.perAccount, limit: settings.perAccount });
    this.byAddress = new HeldCounts({ max: perAddress - this.addressesFrom, setting: names.perAddress, limit: perAddress });
    this.byInstance =
      settings.perInstance === undefined || names.perInstance === undefined
        ? undefined
        : new HeldCounts({ max: settings.perInstance, setting: names.perInstance, limit: settings.perInstance });
  }

  /** Whether `take` needs the client's address now (always, unless `lazyAddresses`). */
  get needsAddress(): boolean {
    return this.count >= this.addressesFrom;
  }

  /**
   * Takes a place for `account` from `address` (and `instance`); undefined when taken, else why
   * not. `address` undefined: not counted per address (only while `needsAddress` is false).
   */
  take(account: number, address: string | undefined, instance?: string): HeldRefusal | undefined {
    const byInstance = instance === undefined ? undefined : this.byInstance;
    if (byInstance?.full(instance!)) return this.refusal(byInstance.bound, 'for this instance');
    if (this.byAccount.full(account)) return this.refusal(this.byAccount.bound, 'for this account');
    if (address !== undefined && this.byAddress.full(address)) return this.refusal(this.byAddress.bound, 'from this address');
    byInstance?.add(instance!);
    this.byAccount.add(account);
    if (address !== undefined) this.byAddress.add(address);
    this.count++;
    return undefined;
  }

  /** Gives back a place `take` gave (the same keys). */
  give(account: number, address: string | undefined, instance?: string): void {
    if (instance !== undefined) this.byInstance?.remove(instance);
    this.byAccount.remove(account);
    if (address !== undefined) this.byAddress.remove(address);
    this.count--;
  }

  /** What is held now (tests, metrics): keys holding something, and the total. */
  held(): { accounts: number; addresses: number; instances: number; total: number } {
    return { accounts: this.byAccount.size, addresses: this.byAddress.size, instances: this.byInstance?.size ?? 0, total: this.count };
  }

  private refusal(bound: HeldBound, owner: string): HeldRefusal {
    return new HeldRefusal(`Too many ${this.what} ${owner}: at most ${bound.limit} (${bound.setting}); wait for one to end`, this.retryAfterSec);
  }
}
