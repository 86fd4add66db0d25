// The Sql interface (sql.ts) over PostgreSQL, with node-postgres (`pg`): a pool of connections,
// statements written once in the portable SQL the repositories use (`?` or `@name` placeholders,
// turned into `$n` here) and prepared per connection by name. Transactions are SERIALIZABLE and
// retried on a serialization failure, so that every transaction behaves as if it ran alone, as
// it does on SQLite (one writer at a time): the repositories' read-then-write steps stay correct
// without locking rows by hand.
import { createHash } from 'node:crypto';
import pg from 'pg';
import { API_ERRORS } from './errors.js';
import type { RunResult, Sql, Statement } from './sql.js';

/** A statement as PostgreSQL takes it: `$n` placeholders, and the names of `@name` ones in order. */
export interface PgText {
  text: string;
  /** Named parameters in `$n` order; undefined for positional (`?`) statements. */
  names: string[] | undefined;
}

/**
 * `?` becomes `$1`, `$2`...; `@name` becomes `$n` (the same name, the same number). Quoted strings
 * and identifiers are copied as they are.
 */
export function toPgText(sql: string): PgText {
  let out = '';
  let n = 0;
  let names: string[] | undefined;
  for (let i = 0; i < sql.length; i++) {
    const c = sql[i]!;
    if (c === "'" || c === '"') {
      const end = sql.indexOf(c, i + 1);
      const stop = end < 0 ? sql.length : end + 1;
      out += sql.slice(i, stop);
      i = stop - 1;
    } else if (c === '?') {
      out += `$${++n}`;
    } else if (c === '@' && /[A-Za-z_]/.test(sql[i + 1] ?? '')) {
      const name = /^[A-Za-z_][A-Za-z0-9_]*/.exec(sql.slice(i + 1))![0];
      names ??= [];
      let k = names.indexOf(name);
      if (k < 0) k = names.push(name) - 1;
      out += `$${k + 1}`;
      i += name.length;
    } else {
      out += c;
    }
  }
  return { text: out, names };
}

/**
 * int8 (BIGINT: ids, times in ms, micro-credits, counts) and numeric (SUM over int8) as numbers,
 * as better-sqlite3 gives them; a value past 2^53 would lose digits, so it is an error instead.
 */
function toSafeNumber(v: string): number {
  const n = Number(v);
  if (!Number.isSafeInteger(n)) throw new RangeError(`database value ${v} does not fit a number`);
  return n;
}

const INT8_OID = 20;
const NUMERIC_OID = 1700;
const pgTypes = {
  getTypeParser(oid: number, format?: string) {
    if (oid === INT8_OID || oid === NUMERIC_OID) return toSafeNumber;
    return format === 'binary' ? pg.types.getTypeParser(oid, 'binary') : pg.types.getTypeParser(oid, 'text');
  },
} as pg.CustomTypesConfig;

/**
 * A value PostgreSQL refuses where SQLite stores it (a NUL character in text, a number past
 * int8, which JavaScript sends in exponent form): the input's fault, so a 400 like every other
 * bad input, not a 500.
 */
function refusedValue(err: unknown): unknown {
  const code = (err as { code?: string }).code;
  if (code === '22021' || code === '22P05') return API_ERRORS.validation('text must not contain NUL (\\u0000) characters');
  if (code === '22003' || code === '22P02') return API_ERRORS.validation('a number is out of range');
  return err;
}

/** SQLSTATEs worth running a transaction again for: serialization failure, deadlock. */
const RETRYABLE = new Set(['40001', '40P01']);
/** Tries of one transaction before its serialization failure is the caller's. */
const TX_TRIES = 8;

type Queryable = Pick<pg.PoolClient, 'query'>;

class PgStatement<P extends unknown[], R> implements Statement<P, R> {
  private readonly name: string | undefined;
  private readonly pgText: PgText;

  constructor(
    private readonly on: () => Queryable,
    sql: string,
    named: boolean,
  ) {
    this.pgText = toPgText(sql);
    // Prepared once per connection under a name of its text (pg keeps the names it prepared).
    // Unnamed: parsed with each execution, the only kind a pooler in transaction mode that hands
    // each transaction another server connection can relay (PgBouncer before 1.21).
    this.name = named ? `rc_${createHash('sha1').update(this.pgText.text).digest('base64url')}` : undefined;
  }

  private values(params: unknown[]): unknown[] {
    const names = this.pgText.names;
    if (!names) return params;
    const o = (params[0] ?? {}) as Record<string, unknown>;
    return names.map((k) => o[k] ?? null);
  }

  private async query(params: P): Promise<pg.QueryResult> {
    try {
      return await this.on().query({ name: this.name, text: this.pgText.text, values: this.values(params) });
    } catch (err) {
      throw refusedValue(err);
    }
  }

  async get(...params: P): Promise<R | undefined> {
    return (await this.query(params)).rows[0] as R | undefined;
  }

  async all(...params: P): Promise<R[]> {
    return (await this.query(params)).rows as R[];
  }

  async run(...params: P): Promise<RunResult> {
    return { changes: (await this.query(params)).rowCount ?? 0 };
  }
}

/** One open transaction on one pooled connection; nested transactions are savepoints. */
class PgTransaction implements Sql {
  readonly engine = 'postgres' as const;
  ended = false;
  private depth = 0;

  constructor(
    private readonly client: pg.PoolClient,
    private readonly named: boolean,
  ) {}

  private live(): Queryable {
    if (this.ended) throw new Error('statement used after its transaction ended');
    return this.client;
  }

  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
    return new PgStatement<P, R>(() => this.live(), sql, this.named);
  }

  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    const name = `rc_sp${++this.depth}`;
    await this.live().query(`SAVEPOINT ${name}`);
    try {
      const out = await fn(this);
      await this.client.query(`RELEASE SAVEPOINT ${name}`);
      return out;
    } catch (err) {
      await this.client.query(`ROLLBACK TO SAVEPOINT ${name}`);
      throw err;
    } finally {
      this.depth--;
    }
  }
}

export interface PgOptions {
  /** Connections in the pool (default 10). */
  max?: number;
  /** Named prepared statements (default true; RC_DATABASE_NAMED_STATEMENTS). */
  namedStatements?: boolean;
}

/** The database: statements on any pooled connection, transactions on one. */
export class PgSql implements Sql {
  readonly engine = 'postgres' as const;
  readonly pool: pg.Pool;
  private readonly named: boolean;

  constructor(url: string, options: PgOptions = {}) {
    this.named = options.namedStatements ?? true;
    this.pool = new pg.Pool({ connectionString: url, max: options.max ?? 10, types: pgTypes });
    // An idle connection the server closed: the pool drops it; the next query takes another.
    this.pool.on('error', () => {});
  }

  prepare<P extends unknown[] = unknown[], R = unknown>(sql: string): Statement<P, R> {
    return new PgStatement<P, R>(() => this.pool, sql, this.named);
  }

  async transaction<T>(fn: (tx: Sql) => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const client = await this.pool.connect();
      const tx = new PgTransaction(client, this.named);
      let broken: Error | undefined;
      try {
        await client.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        const out = await fn(tx);
        await client.query('COMMIT');
        return out;
      } catch (err) {
        await client.query('ROLLBACK').catch((e: Error) => (broken = e));
        const code = (err as { code?: string }).code;
        if (attempt >= TX_TRIES || !code || !RETRYABLE.has(code)) throw err;
        // Another transaction touched the same rows: this one runs again, on what that one wrote.
        await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
      } finally {
        tx.ended = true;
        client.release(broken);
      }
    }
  }

  private closing: Promise<void> | undefined;

  /** Ends the pool (once: closing twice is closing once). */
  close(): Promise<void> {
    this.closing ??= this.pool.end();
    return this.closing;
  }
}
