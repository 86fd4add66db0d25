// The Sql interface (sql.ts) over better-sqlite3. Statements still run synchronously; each call
// returns an already settled promise. One connection serves the whole process, so a transaction
// owns it from BEGIN to COMMIT: while one is open (its callback awaiting), statements and
// transactions from elsewhere wait for it, else they would run inside it and commit or roll back
// with it. Outside a transaction nothing waits: the cost over better-sqlite3 is one promise.
import type { Database, Statement as BetterStatement } from 'better-sqlite3';
import type { RunResult, Sql, Statement } from './sql.js';

/** A statement or savepoint of a transaction that has committed or rolled back (a callback that outlived it). */
export class TransactionEndedError extends Error {
  constructor() {
    super('statement used after its transaction ended');
  }
}

/** The connection and who holds it. */
class Connection {
  private readonly statements = new Map<string, BetterStatement>();
  /** The open transaction, if any. */
  holder: SqliteTransaction | undefined;
  private release: (() => void) | undefined;
  /** Settles when the holder ends its transaction. */
  released: Promise<void> = Promise.resolve();

  constructor(readonly db: Database) {}

  /** The statement for `sql`, prepared once per connection. */
  statement(sql: string): BetterStatement {
    let s = this.statements.get(sql);
    if (!s) this.statements.set(sql, (s = this.db.prepare(sql)));
    return s;
  }

  hold(tx: SqliteTransaction): void {
    this.holder = tx;
    this.released = new Promise((resolve) => (this.release = resolve));
  }

  free(): void {
    this.holder = undefined;
    this.release?.();
  }
}

class SqliteStatement<P extends unknown[], R> implements Statement<P, R> {
  constructor(
    private readonly conn: Connection,
    private readonly stmt: BetterStatement,
    /** The transaction this statement belongs to; undefined: the database itself. */
    private readonly tx: SqliteTransaction | undefined,
  ) {}

  // Each method checks the holder again right before it runs (no await in between): a transaction
  // may have begun while it waited.
  async get(...params: P): Promise<R | undefined> {
    if (this.tx?.ended) throw new TransactionEndedError();
    while (this.conn.holder !== undefined && this.conn.holder !== this.tx) await this.conn.released;
    return this.stmt.get(...params) as R | undefined;
  }

  async all(...params: P): Promise<R[]> {
    if (this.tx?.ended) throw new TransactionEndedError();
    while (this.conn.holder !== undefined && this.conn.holder !== this.tx) await this.conn.released;
    return this.stmt.all(...params) as R[];
  }

  async run(...params: P): Promise<RunResult> {
    if (this.tx?.ended) throw new TransactionEndedError();
    while (this.conn.holder !== undefined && this.conn.holder !== this.tx) await this.conn.released;
    return { changes: this.stmt.run(...params).changes };
  }
}

/** One open transaction: its statements run without waiting; nested transactions are savepoints. */
class SqliteTransaction implements Sql {
  readonly engine = 'sqlite' as const;
  ended = false;
  private depth = 0;

  constructor(private readonly conn: Connection) {}

  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
    return new SqliteStatement<P, R>(this.conn, this.conn.statement(sql), this);
  }

  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    if (this.ended) throw new TransactionEndedError();
    const name = `rc_sp${++this.depth}`;
    this.conn.db.exec(`SAVEPOINT ${name}`);
    try {
      const out = await fn(this);
      this.conn.db.exec(`RELEASE ${name}`);
      return out;
    } catch (err) {
      this.conn.db.exec(`ROLLBACK TO ${name}`);
      this.conn.db.exec(`RELEASE ${name}`);
      throw err;
    } finally {
      this.depth--;
    }
  }
}

/** The database: statements outside transactions, and transactions (BEGIN IMMEDIATE: the write lock at once). */
export class SqliteSql implements Sql {
  readonly engine = 'sqlite' as const;
  private readonly conn: Connection;

  constructor(readonly db: Database) {
    this.conn = new Connection(db);
  }

  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
    return new SqliteStatement<P, R>(this.conn, this.conn.statement(sql), undefined);
  }

  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    // Checked and taken with no await in between: two transactions never both see it free.
    while (this.conn.holder !== undefined) await this.conn.released;
    const tx = new SqliteTransaction(this.conn);
    this.conn.hold(tx);
    try {
      this.conn.db.exec('BEGIN IMMEDIATE');
      try {
        const out = await fn(tx);
        this.conn.db.exec('COMMIT');
        return out;
      } catch (err) {
        if (this.conn.db.inTransaction) this.conn.db.exec('ROLLBACK');
        throw err;
      }
    } finally {
      tx.ended = true;
      this.conn.free();
    }
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
