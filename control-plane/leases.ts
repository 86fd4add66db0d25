// Leases on background work (issue 43; the table, and WorkLease in work-lease.ts): however many control planes share one database, each job
// (billing and the stops, placement of the queue, host checks: "background"; the usage roll-up)
// runs on one of them. Before each run the holder renews its lease (`expires_at` = now + its
// time); another control plane takes it only once it has expired, and the fencing token grows each
// time the lease changes hands. A run checks the lease again inside the transactions that write
// (`guard`): a control plane that was stopped past its lease (SIGSTOP, a long GC pause, a lost
// network) and wakes up finds it gone there and writes nothing (on PostgreSQL the check and the
// takeover are SERIALIZABLE transactions on the same row, so one of them fails and retries).
//
// Correctness does not rest on the lease: the ledger's idempotency keys (`usage:<instance>:<k>`)
// and the compare-and-set on an instance's billed periods keep every period billed once even when
// two runs overlap. The lease makes the work happen once, not twice, and keeps a stale control
// plane's decisions (an idle stop read before the pause) from landing. On SQLite (one process) the
// lease is always this process's; the statements are the same.
import type { Sql } from './sql.js';

export class Leases {
  private readonly takeStmt;
  private readonly heldStmt;

  constructor(db: Sql) {
    // Takes the lease when it is free, expired or already ours (renewed); the token it then has.
    this.takeStmt = db.prepare<[string, string, number, number], { token: number }>(
      'INSERT INTO leases (name, holder, token, expires_at) VALUES (?, ?, 1, ?) ' +
        'ON CONFLICT (name) DO UPDATE SET ' +
        'token = CASE WHEN leases.holder = excluded.holder THEN leases.token ELSE leases.token + 1 END, ' +
        'holder = excluded.holder, expires_at = excluded.expires_at ' +
        'WHERE leases.holder = excluded.holder OR leases.expires_at <= ? RETURNING token',
    );
    this.heldStmt = db.prepare<[string, string, number, number], { token: number }>(
      'SELECT token FROM leases WHERE name = ? AND holder = ? AND token = ? AND expires_at > ?',
    );
  }

  /** Takes or renews lease `name` for `holder` until `now + ttlMs`; its token, or undefined when another holds it. */
  async take(name: string, holder: string, now: number, ttlMs: number): Promise<number | undefined> {
    return (await this.takeStmt.get(name, holder, now + ttlMs, now))?.token;
  }

  /** True while `holder` holds `name` with `token`, unexpired at `now`. */
  async held(name: string, holder: string, token: number, now: number): Promise<boolean> {
    return (await this.heldStmt.get(name, holder, token, now)) !== undefined;
  }
}
