// The roll-up of the shared models' usage (issue 32): copies each account's day from the gates
// (through the ModelUsageReader the control plane is given) into model_usage_days, off the request
// path. At start it backfills the days the gates still keep; then every run (10 minutes) copies
// today, plus the days since the previous run once a UTC day has ended (yesterday finished), plus
// yesterday again during the first hour of a day (requests admitted before midnight and settled
// after). Every account is read, in batches with a turn of the event loop between them; runs never
// overlap; a failed run (Redis unreachable) is logged and repeated by the next one.
import type { Logger } from '../../lib/log.js';
import type { ModelUsageReader } from '../deps.js';
import { WorkLease } from '../work-lease.js';
import type { Store } from '../store.js';
import { dayIndex, dayString, type ModelDayCounters } from './usage-days.js';

/** Days the gates keep (the memory store: 8; Redis: a week past the day): the start's backfill. */
export const GATE_KEEP_DAYS = 8;
export const ROLLUP_EVERY_MS = 10 * 60_000;
/** Accounts read per batch. */
const BATCH = 100;
const HOUR_MS = 3_600_000;

export interface UsageRollupOptions {
  store: Store;
  read: ModelUsageReader;
  logger?: Logger | undefined;
  everyMs?: number;
}

export class UsageRollup {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private stopped = false;
  /** The day of the last run that copied everything; undefined until the backfill succeeded. */
  private lastDay: number | undefined;
  /**
   * Control planes on one database: one of them copies (leases.ts). Renewed by each run, so it
   * lasts two intervals: when its holder goes, another takes over within two.
   */
  private readonly lease: WorkLease;

  constructor(private readonly o: UsageRollupOptions) {
    this.lease = new WorkLease(o.store, 'usage-rollup', 2 * (o.everyMs ?? ROLLUP_EVERY_MS), o.store.clock);
  }

  /** Runs now (the backfill) and then every `everyMs`. */
  start(): this {
    void this.run();
    this.timer = setInterval(() => void this.run(), this.o.everyMs ?? ROLLUP_EVERY_MS).unref();
    return this;
  }

  /** Stops the timer and waits for a run in progress (it ends after its current batch). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.running;
  }

  /** One run (or the one in progress); resolves when it has ended, never rejects. */
  run(): Promise<void> {
    this.running ??= this.copyDue().finally(() => (this.running = undefined));
    return this.running;
  }

  /** The days a run starting at `now` copies, oldest first. */
  daysDue(now: number): number[] {
    const today = dayIndex(now);
    const from =
      this.lastDay === undefined
        ? today - GATE_KEEP_DAYS + 1
        : this.lastDay < today
          ? Math.max(this.lastDay, today - GATE_KEEP_DAYS + 1)
          : now - today * 86_400_000 < HOUR_MS
            ? today - 1
            : today;
    return Array.from({ length: today - from + 1 }, (_, i) => from + i);
  }

  private async copyDue(): Promise<void> {
    const now = this.o.store.clock.now();
    const days = this.daysDue(now);
    try {
      // Another control plane copies (the copy keeps the larger counter, so overlapping runs are harmless, only wasted).
      if (!(await this.lease.acquire())) return;
      if (await this.copy(days.map(dayString))) this.lastDay = dayIndex(now);
    } catch (err) {
      this.o.logger?.warn('shared-model usage roll-up failed; the next run repeats it', { days: days.length, error: String(err) });
    }
  }

  /** Copies `days` of every account; false when stopped before the end. */
  private async copy(days: string[]): Promise<boolean> {
    const table = this.o.store.modelUsageDays;
    let after = 0;
    for (;;) {
      if (this.stopped) return false;
      const ids = await table.accountIds(after, BATCH);
      if (ids.length === 0) return true;
      for (const id of ids) {
        for (const day of days) {
          const u = (await this.o.read(id, day)) as { by_model: Record<string, ModelDayCounters> };
          await table.record(day, id, u.by_model);
        }
      }
      after = ids.at(-1)!;
      await new Promise<void>((resolve) => setImmediate(resolve));
    }
  }
}
