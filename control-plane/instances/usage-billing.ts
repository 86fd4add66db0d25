// Writing instance usage to the ledger. The arithmetic is billing.ts (pure); this writes its
// charges as `instance_usage` entries and advances the instance's period count, in the caller's
// transaction (the `tx` it passes), so a crash or restart never charges twice nor skips time.
import type { Repositories, Store } from '../store.js';
import { MICROS_PER_CREDIT, pendingCharges, usageKey } from './billing.js';
import type { InstanceRow } from './store.js';

export class UsageBilling {
  constructor(private readonly store: Store) {}

  /** Writes the usage charges due up to `until` (all of them with `final`), in one transaction with the row's period count. */
  async bill(tx: Repositories, r: InstanceRow, until: number, final: boolean): Promise<void> {
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
      await tx.ledger.append({
        accountId: r.account_id,
        kind: 'instance_usage',
        credits: -c.micros / MICROS_PER_CREDIT,
        idempotencyKey: usageKey(r.id, c.period),
        ref: r.id,
      });
    }
    await tx.instances.setBilledPeriods(r.id, r.billed_periods, billedPeriods);
  }

  /**
   * Bills the complete periods of a running instance up to `now` (its own transaction, which
   * `guard` may refuse first: the lease check of several control planes); the row as it is afterwards.
   */
  billCompletePeriods(r: InstanceRow, now: number, guard?: (tx: Repositories) => Promise<void>): Promise<InstanceRow> {
    return this.store.transaction(async (tx) => {
      await guard?.(tx);
      await this.bill(tx, r, now, false);
      return (await tx.instances.get(r.id))!;
    });
  }
}
