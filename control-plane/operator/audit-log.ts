// The operators' audit log (migration 7): every operator action, whoever made it (an operator's
// session, the admin token of the CLI and scripts, or the CLI on the database itself), with what it
// acted on and its input (secrets left out). Append-only: triggers refuse UPDATE and DELETE.
import type { Clock } from '../../lib/clock.js';
import type { Sql } from '../sql.js';

export interface AuditEntry {
  id: number;
  at: string;
  actor: string;
  action: string;
  target: string | null;
  detail: unknown;
}

interface Row {
  id: number;
  at: number;
  actor: string;
  action: string;
  target: string | null;
  detail: string | null;
}

/** Who acted through the admin token (the CLI and scripts against a running platform). */
export const ADMIN_TOKEN_ACTOR = 'admin-token';
/** Who acted when the CLI opened the database itself (no platform running). */
export const CLI_DATABASE_ACTOR = 'cli (database)';

export class AuditLog {
  private readonly insert;
  private readonly pageStmt;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    this.insert = db.prepare<[number, string, string, string | null, string | null]>(
      'INSERT INTO audit_log (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)',
    );
    this.pageStmt = db.prepare<[number, number], Row>('SELECT id, at, actor, action, target, detail FROM audit_log WHERE id < ? ORDER BY id DESC LIMIT ?');
  }

  async record(actor: string, action: string, target: string | null, detail: unknown): Promise<void> {
    await this.insert.run(this.clock.now(), actor, action, target, detail === undefined ? null : JSON.stringify(detail));
  }

  /** Newest first; `before` is the previous page's last id. */
  async page(limit: number, before?: number): Promise<{ entries: AuditEntry[]; next_before: number | null }> {
    const rows = await this.pageStmt.all(before ?? Number.MAX_SAFE_INTEGER, limit + 1);
    const entries = rows.slice(0, limit).map((r) => ({
      id: r.id,
      at: new Date(r.at).toISOString(),
      actor: r.actor,
      action: r.action,
      target: r.target,
      detail: r.detail === null ? null : (JSON.parse(r.detail) as unknown),
    }));
    return { entries, next_before: rows.length > limit ? entries[entries.length - 1]!.id : null };
  }
}
