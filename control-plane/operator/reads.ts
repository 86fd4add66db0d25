// The operator's read-only queries that no other part needs: the review queue, account search,
// consumption by day and the top spenders. Statements are prepared once, on the platform's database.
import type { Sql } from '../sql.js';

export interface ReviewRow {
  id: number;
  email: string;
  created_at: number;
  email_verified: number;
  provider: string;
}

export interface DailyCredits {
  /** UTC day index (ms / 86 400 000). */
  day: number;
  micros: number;
}

export interface GpuSpan {
  gpu_count: number;
  ready_at: number;
  ended_at: number | null;
}

const DAY_MS = 86_400_000;

export class OperatorReads {
  private readonly reviewStmt;
  private readonly searchStmt;
  private readonly creditsByDayStmt;
  private readonly topSpendersStmt;
  private readonly gpuSpansStmt;

  constructor(db: Sql) {
    // Waiting for review: not verified and not rejected (disabled), newest first.
    this.reviewStmt = db.prepare<[], ReviewRow>(
      'SELECT id, email, created_at, email_verified, provider FROM accounts WHERE verified = 0 AND disabled = 0 ORDER BY created_at DESC, id DESC',
    );
    this.searchStmt = db.prepare<[string, number], { id: number }>("SELECT id FROM accounts WHERE email LIKE ? ESCAPE '\\' ORDER BY id DESC LIMIT ?");
    this.creditsByDayStmt = db.prepare<[number], DailyCredits>(
      `SELECT created_at / ${DAY_MS} AS day, -SUM(amount_micros) AS micros FROM ledger
       WHERE kind = 'instance_usage' AND created_at >= ? GROUP BY day ORDER BY day`,
    );
    this.topSpendersStmt = db.prepare<[number, number], { account_id: number; email: string; micros: number }>(
      `SELECT l.account_id, a.email, -SUM(l.amount_micros) AS micros FROM ledger l JOIN accounts a ON a.id = l.account_id
       WHERE l.kind = 'instance_usage' AND l.created_at >= ? GROUP BY l.account_id, a.email ORDER BY micros DESC LIMIT ?`,
    );
    this.gpuSpansStmt = db.prepare<[number], GpuSpan>(
      'SELECT gpu_count, ready_at, ended_at FROM instances WHERE ready_at IS NOT NULL AND (ended_at IS NULL OR ended_at >= ?)',
    );
  }

  reviewQueue(): Promise<ReviewRow[]> {
    return this.reviewStmt.all();
  }

  /** Account ids whose e-mail contains `text` (case-insensitive; `%` and `_` match themselves), newest first. */
  async search(text: string, limit: number): Promise<number[]> {
    // E-mails are stored lower case (LIKE ignores case on SQLite only).
    const pattern = `%${text.toLowerCase().replace(/[\\%_]/g, (c) => `\\${c}`)}%`;
    return (await this.searchStmt.all(pattern, limit)).map((r) => r.id);
  }

  /** Credits written for instance usage per UTC day since `from`. */
  creditsByDay(from: number): Promise<DailyCredits[]> {
    return this.creditsByDayStmt.all(from);
  }

  topSpenders(from: number, limit: number) {
    return this.topSpendersStmt.all(from, limit);
  }

  /** Instances that were ready at some point since `from` (their GPU time is summed by day in usage.ts). */
  gpuSpans(from: number): Promise<GpuSpan[]> {
    return this.gpuSpansStmt.all(from);
  }
}
