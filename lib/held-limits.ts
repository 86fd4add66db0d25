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
//   per address (control-plane/router.ts).
//
// A place is taken before the work starts and given back exactly once, however the response
// ends (its end, a backend's error, the client going away). Past a bound the request is refused
// (429 with Retry-After, in the route's shape) with a message naming the limit and its setting.
// The counts are per process: what they protect (descriptors, memory) is per process (README,
// "Limits and replicas").

/** One bound: at most `max` held per key, and the setting that sets it. */
export interface HeldBound {
  max: number;
  setting: string;
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

  /** Everything held, all keys together. */
  total(): number {
    let sum = 0;
    for (const v of this.n.values()) sum += v;
    return sum;
  }
}

export interface HeldLimitSettings {
  perAccount: number;
  perAddress: number;
  /** Only where an instance owns what is held (dedicated endpoints); undefined: not counted per instance. */
  perInstance?: number | undefined;
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

  constructor(
    /** What is held, as the refusal names it ("streams", "requests in flight"). */
    readonly what: string,
    settings: HeldLimitSettings,
    names: HeldSettingNames,
    readonly retryAfterSec: number,
  ) {
    this.byAccount = new HeldCounts({ max: settings.perAccount, setting: names.perAccount });
    this.byAddress = new HeldCounts({ max: settings.perAddress, setting: names.perAddress });
    this.byInstance =
      settings.perInstance === undefined || names.perInstance === undefined
        ? undefined
        : new HeldCounts({ max: settings.perInstance, setting: names.perInstance });
  }

  /** Takes a place for `account` from `address` (and `instance`); undefined when taken, else why not. */
  take(account: number, address: string, instance?: string): HeldRefusal | undefined {
    const byInstance = instance === undefined ? undefined : this.byInstance;
    if (byInstance?.full(instance!)) return this.refusal(byInstance.bound, 'for this instance');
    if (this.byAccount.full(account)) return this.refusal(this.byAccount.bound, 'for this account');
    if (this.byAddress.full(address)) return this.refusal(this.byAddress.bound, 'from this address');
    byInstance?.add(instance!);
    this.byAccount.add(account);
    this.byAddress.add(address);
    return undefined;
  }

  /** Gives back a place `take` gave (the same keys). */
  give(account: number, address: string, instance?: string): void {
    if (instance !== undefined) this.byInstance?.remove(instance);
    this.byAccount.remove(account);
    this.byAddress.remove(address);
  }

  /** What is held now (tests, metrics): keys holding something, and the total. */
  held(): { accounts: number; addresses: number; instances: number; total: number } {
    return { accounts: this.byAccount.size, addresses: this.byAddress.size, instances: this.byInstance?.size ?? 0, total: this.byAccount.total() };
  }

  private refusal(bound: HeldBound, owner: string): HeldRefusal {
    return new HeldRefusal(`Too many ${this.what} ${owner}: at most ${bound.max} (${bound.setting}); wait for one to end`, this.retryAfterSec);
  }
}
