// The live balance: the ledger minus what the account's running instances have accrued since
// their last written billing period. Usage reaches the ledger once per period (billing.ts), so
// the ledger alone lags by up to a period; GET /api/me and the zero-balance stop both read this
// figure instead, so what a user sees is what decides when the instance stops.
import { toMicros } from '../ledger.js';
import type { Repositories } from '../store.js';
import { accruedMicros } from './billing.js';
import type { BillingRow } from './store.js';

/** Micro-credits an instance accrued up to `now` that no ledger entry holds yet (0 before it bills). */
export function unbilledMicros(r: BillingRow, now: number): number {
  // Must start where UsageBilling.bill() (usage-billing.ts) starts the billing clock: at ready
  // (a launch that never became ready costs nothing).
  if (r.ready_at === null) return 0;
  return Math.max(0, accruedMicros(r.micros_per_hour, now - r.ready_at) - accruedMicros(r.micros_per_hour, r.billed_periods * r.period_ms));
}

/** The account's live balance in micro-credits at `now`. */
export async function liveBalanceMicros(store: Repositories, accountId: number, now = store.clock.now()): Promise<number> {
  let micros = toMicros(await store.ledger.balance(accountId));
  for (const r of await store.instances.activeBilling(accountId)) micros -= unbilledMicros(r, now);
  return micros;
}
