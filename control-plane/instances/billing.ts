// Instance billing arithmetic, pure. An instance accrues `microsPerHour` (GPU count included)
// per second from the moment it became ready to its end (`placedAt` below is that moment); a started second counts. Usage is written to the
// ledger per period (index k covers [placed + kP, placed + (k+1)P)) under the idempotency key
// `usage:<instance>:<k>`, so a retried or replayed write is recorded once. Each period's amount
// is the difference of the cumulative charge at its two ends, so the periods always add up to
// exactly the cumulative charge: no rounding drift, nothing skipped, nothing counted twice.

export const MICROS_PER_CREDIT = 1_000_000;

/** Micro-credits accrued over `ms` of existence. */
export function accruedMicros(microsPerHour: number, ms: number): number {
  if (ms <= 0) return 0;
  return Math.round((microsPerHour * Math.ceil(ms / 1000)) / 3600);
}

export interface BillingClock {
  placedAt: number;
  periodMs: number;
  microsPerHour: number;
  /** Periods already written. */
  billedPeriods: number;
}

export interface PeriodCharge {
  period: number;
  micros: number;
}

/**
 * The charges still to write up to `until`: every complete period, and with `final` (the
 * instance ended at `until`) the last partial one. Zero amounts are left out.
 */
export function pendingCharges(b: BillingClock, until: number, final: boolean): { charges: PeriodCharge[]; billedPeriods: number } {
  const out: PeriodCharge[] = [];
  const at = (k: number) => accruedMicros(b.microsPerHour, k * b.periodMs);
  let k = b.billedPeriods;
  for (; b.placedAt + (k + 1) * b.periodMs <= until; k++) {
    const micros = at(k + 1) - at(k);
    if (micros > 0) out.push({ period: k, micros });
  }
  if (final && b.placedAt + k * b.periodMs < until) {
    const micros = accruedMicros(b.microsPerHour, until - b.placedAt) - at(k);
    if (micros > 0) out.push({ period: k, micros });
    k++;
  }
  return { charges: out, billedPeriods: k };
}

/** The idempotency key of one period's ledger entry. */
export const usageKey = (instanceId: string, period: number) => `usage:${instanceId}:${period}`;
