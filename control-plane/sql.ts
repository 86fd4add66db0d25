// The one interface every repository speaks to its database engine through: prepared statements
// whose get/all/run return promises, and transactions that hand the callback an executor bound to
// the transaction. SQLite (sqlite.ts) runs them synchronously underneath; the promise is only the
// shape that lets another engine sit behind the same repositories.

/** What a write did: how many rows it changed. */
export interface RunResult {
  changes: number;
}

/**
 * A statement prepared once and run many times. Parameters are positional (`?`) or, for
 * statements written with `@name` placeholders, one object of named values.
 */
export interface Statement<P extends unknown[] = unknown[], R = unknown> {
  /** The first row, or undefined when there is none. */
  get(...params: P): Promise<R | undefined>;
  all(...params: P): Promise<R[]>;
  run(...params: P): Promise<RunResult>;
}

export type Engine = 'sqlite' | 'postgres';

/** An executor: the database itself, or one transaction on it. */
export interface Sql {
  readonly engine: Engine;
  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R>;
  /**
   * Runs `fn` in one transaction (a savepoint when this executor is a transaction already) and
   * commits when its promise resolves, rolls back when it rejects. Inside `fn`, use only `tx`:
   * a statement on the database itself waits for the transaction to end (on SQLite, one
   * connection) or runs outside it (on a pool), so it must not be what the transaction waits for.
   */
  transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T>;
}

/** A unique or primary-key constraint refused the write (the same test for every engine). */
export function isUniqueViolation(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || code === '23505';
}
