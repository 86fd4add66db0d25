// The last log lines of ended instances. A host agent forgets an instance's logs when the
// control plane removes it, so just before removal the service copies the tail here; GET
// /api/notebook/logs serves it once the host no longer has the instance.
import type { AgentClient } from '../../agent/client.js';
import type { Sql } from '../sql.js';

/** Lines kept per ended instance. */
export const LOG_TAIL_LINES = 200;
/** Longest wait for the host's tail: removal (and the destroy reply) must not hang on it. */
const SAVE_TIMEOUT_MS = 5_000;

export class LogTails {
  private readonly upsert;
  private readonly getStmt;

  constructor(db: Sql) {
    this.upsert = db.prepare<[string, string, number]>(
      'INSERT INTO instance_log_tails (instance_id, lines, saved_at) VALUES (?, ?, ?) ON CONFLICT (instance_id) DO UPDATE SET lines = excluded.lines, saved_at = excluded.saved_at',
    );
    this.getStmt = db.prepare<[string], { lines: string }>('SELECT lines FROM instance_log_tails WHERE instance_id = ?');
  }

  /** The saved tail (oldest first), or undefined when none was saved. */
  async get(instanceId: string): Promise<string[] | undefined> {
    const row = await this.getStmt.get(instanceId);
    return row ? (JSON.parse(row.lines) as string[]) : undefined;
  }

  /**
   * Copies the instance's last lines from its host before the host removes it. Best effort: a
   * host that cannot answer leaves the previous copy (if any) in place.
   */
  async save(client: AgentClient, instanceId: string, now: number): Promise<void> {
    const lines: string[] = [];
    try {
      for await (const line of client.logs(instanceId, { tail: LOG_TAIL_LINES, signal: AbortSignal.timeout(SAVE_TIMEOUT_MS) })) lines.push(line);
    } catch {
      if (!lines.length) return;
    }
    await this.upsert.run(instanceId, JSON.stringify(lines.slice(-LOG_TAIL_LINES)), now);
  }
}
