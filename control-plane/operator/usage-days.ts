// The shared models' usage per UTC day, account and model (migration 8), copied from the gates by
// the roll-up job (usage-rollup.ts) and read by the operator's usage page (usage.ts). The gates
// keep about a week (memory: 8 days, Redis: a week past the day); this table keeps every day.
import type { Clock } from '../../lib/clock.js';
import type { Sql } from '../sql.js';

/** One model's counters of one account's day, as the gates report them (ModelUsage.by_model). */
export interface ModelDayCounters {
  requests: number;
  input_tokens: number;
  output_tokens: number;
  cached_input_tokens: number;
}

const DAY_MS = 86_400_000;

/** The UTC day index (days since 1970-01-01) of a time, ms. */
export const dayIndex = (ms: number) => Math.floor(ms / DAY_MS);
/** A UTC day index as YYYY-MM-DD. */
export const dayString = (day: number) => new Date(day * DAY_MS).toISOString().slice(0, 10);

export interface UsageDayRow {
  day: string;
  model: string;
  requests: number;
  tokens: number;
}

export interface UsageAccountRow {
  account_id: number;
  email: string;
  tokens: number;
  requests: number;
}

export class ModelUsageDays {
  private readonly upsert;
  private readonly byDayStmt;
  private readonly topStmt;
  private readonly accountIdsStmt;

  constructor(
    private readonly db: Sql,
    private readonly clock: Clock,
  ) {
    // Counters only grow within a day; a gate that forgot a day (restarted, expired) reads lower
    // or zero, so a copy keeps the larger value: copies are idempotent and never lose a count.
    const max = db.engine === 'postgres' ? 'GREATEST' : 'max'; // the larger of two values
    this.upsert = db.prepare<[string, number, string, number, number, number, number, number]>(
      `INSERT INTO model_usage_days (day, account_id, model, requests, input_tokens, output_tokens, cached_input_tokens, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, ?, ?)
       ON CONFLICT (day, account_id, model) DO UPDATE SET
         requests = ${max}(model_usage_days.requests, excluded.requests),
         input_tokens = ${max}(model_usage_days.input_tokens, excluded.input_tokens),
         output_tokens = ${max}(model_usage_days.output_tokens, excluded.output_tokens),
         cached_input_tokens = ${max}(model_usage_days.cached_input_tokens, excluded.cached_input_tokens),
         updated_at = excluded.updated_at`,
    );
    this.byDayStmt = db.prepare<[string, string], UsageDayRow>(
      `SELECT day, model, sum(requests) AS requests, sum(input_tokens + output_tokens) AS tokens
       FROM model_usage_days WHERE day >= ? AND day <= ? GROUP BY day, model ORDER BY day, model`,
    );
    this.topStmt = db.prepare<[string, string, number], UsageAccountRow>(
      `SELECT u.account_id, a.email, sum(u.input_tokens + u.output_tokens) AS tokens, sum(u.requests) AS requests
       FROM model_usage_days u JOIN accounts a ON a.id = u.account_id
       WHERE u.day >= ? AND u.day <= ? GROUP BY u.account_id, a.email ORDER BY tokens DESC, u.account_id LIMIT ?`,
    );
    this.accountIdsStmt = db.prepare<[number, number], { id: number }>('SELECT id FROM accounts WHERE id > ? ORDER BY id LIMIT ?');
  }

  /** Stores one account's day (`by_model` of the gates' ModelUsage) in one transaction. */
  async record(day: string, accountId: number, byModel: Record<string, ModelDayCounters>): Promise<void> {
    const now = this.clock.now();
    await this.db.transaction(async (tx) => {
      const upsert = new ModelUsageDays(tx, this.clock).upsert;
      for (const [model, c] of Object.entries(byModel)) {
        if (c.requests === 0 && c.input_tokens === 0 && c.output_tokens === 0) continue;
        await upsert.run(day, accountId, model, c.requests, c.input_tokens, c.output_tokens, c.cached_input_tokens, now);
      }
    });
  }

  /** Per day and model, every account summed, for the days from `from` to `to` (YYYY-MM-DD, inclusive). */
  byDay(from: string, to: string): Promise<UsageDayRow[]> {
    return this.byDayStmt.all(from, to);
  }

  /** The accounts with the most tokens over the days from `from` to `to`, most first. */
  topAccounts(from: string, to: string, limit: number): Promise<UsageAccountRow[]> {
    return this.topStmt.all(from, to, limit);
  }

  /** A page of account ids (ascending, after `afterId`): the job walks every account in batches. */
  async accountIds(afterId: number, limit: number): Promise<number[]> {
    return (await this.accountIdsStmt.all(afterId, limit)).map((r) => r.id);
  }
}
