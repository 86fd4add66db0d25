// One job's lease as a control plane sees it (the table and its statements: leases.ts, which says why).
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type { Clock } from '../lib/clock.js';
import { RcError } from '../lib/errors.js';
import type { Repositories, Store } from './store.js';

/** The lease was lost (expired and taken by another control plane): the write it guarded did not happen. */
export class LeaseLostError extends RcError {
  constructor(name: string) {
    super('RC_ERR_LEASE_LOST', `this control plane no longer holds the ${name} lease`, 500);
  }
}

/**
 * One job's lease as this process sees it. Until half its time has passed since it was last taken
 * or renewed, the lease is known to be ours without asking the database (no other control plane
 * may take it before it expires; half leaves room for clocks apart and a slow statement), so a
 * tick that renews it every second costs one statement and no more; past that, `guard` and
 * `stillHeld` ask the database, which is what a control plane waking from a pause does.
 */
export class WorkLease {
  /** The token of the current hold; undefined while not held. */
  private token: number | undefined;
  /** When the lease was last taken or renewed (this process's clock). */
  private renewedAt = 0;

  constructor(
    private readonly store: Store,
    readonly name: string,
    private readonly ttlMs: number,
    private readonly clock: Clock,
    /** This process's id among the control planes: host and pid (what an operator looks for), and a random part. */
    readonly holder: string = `${hostname()}/${process.pid}/${randomBytes(4).toString('hex')}`,
  ) {}

  /** Takes or renews the lease before a run; false when another control plane holds it (skip the run). */
  async acquire(): Promise<boolean> {
    const now = this.clock.now();
    this.token = await this.store.leases.take(this.name, this.holder, now, this.ttlMs);
    this.renewedAt = now;
    return this.token !== undefined;
  }

  private surelyOurs(): boolean {
    return this.token !== undefined && this.clock.now() < this.renewedAt + this.ttlMs / 2;
  }

  /** Throws LeaseLostError unless the lease is still ours; call inside the transaction whose writes it guards. */
  async guard(tx: Repositories): Promise<void> {
    if (this.surelyOurs()) return;
    if (this.token === undefined || !(await tx.leases.held(this.name, this.holder, this.token, this.clock.now()))) {
      this.token = undefined;
      throw new LeaseLostError(this.name);
    }
  }

  /** True while the lease is still ours (outside any transaction: between steps of a run). */
  async stillHeld(): Promise<boolean> {
    if (this.surelyOurs()) return true;
    if (this.token === undefined) return false;
    if (await this.store.leases.held(this.name, this.holder, this.token, this.clock.now())) return true;
    this.token = undefined;
    return false;
  }
}
