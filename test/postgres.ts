// PostgreSQL for the tests: the local server (RC_TEST_POSTGRES_URL, default
// postgres://postgres@127.0.0.1:5432/postgres, trust auth), one database per test run
// (`rc_t_<run>`, dropped by scripts/test.mjs after the run) and a schema in it per store, dropped
// after its test. With RC_TEST_DATABASE=postgres the whole store runs on it (test/pg-store-setup.ts).
import { createHash, randomBytes } from 'node:crypto';
import { resolve } from 'node:path';
import type { TestContext } from 'node:test';
import pg from 'pg';

/** The maintenance database of the test server (CREATE and DROP DATABASE run there). */
export const TEST_POSTGRES_URL = process.env.RC_TEST_POSTGRES_URL || 'postgres://postgres@127.0.0.1:5432/postgres';

/** The store suite runs on PostgreSQL (RC_TEST_DATABASE=postgres). */
export const onPostgres = process.env.RC_TEST_DATABASE === 'postgres';

/** This run's database (`rc_t_<run>`): scripts/test.mjs drops it after the run. */
export function testRun(): string {
  return (process.env.RC_TEST_DATABASE_RUN ??= randomBytes(4).toString('hex'));
}

const runDatabase = () => `rc_t_${testRun()}`;

/**
 * The URL of schema `schema` in this run's database: a schema per store, not a database, because
 * dropping a database checkpoints the server (seconds each on a busy machine) and a schema costs
 * nothing to drop; the connection's search_path puts every table, index and function there.
 */
export function schemaUrl(schema: string): string {
  const u = new URL(TEST_POSTGRES_URL);
  u.pathname = `/${runDatabase()}`;
  u.searchParams.set('options', `-c search_path=${schema}`);
  return u.toString();
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>, database = new URL(TEST_POSTGRES_URL).pathname.slice(1)): Promise<T> {
  const u = new URL(TEST_POSTGRES_URL);
  u.pathname = `/${database}`;
  const c = new pg.Client({ connectionString: u.toString(), connectionTimeoutMillis: 3000 });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

let runReady: Promise<void> | undefined;

/** Creates this run's database unless it exists (test processes, and rc processes, may all ask). */
function ensureRunDatabase(): Promise<void> {
  runReady ??= admin(async (c) => {
    try {
      await c.query(`CREATE DATABASE "${runDatabase()}"`);
    } catch (err) {
      // 42P04: it exists; 23505: a concurrent CREATE of the same name won.
      const code = (err as { code?: string }).code;
      if (code !== '42P04' && code !== '23505') throw err;
    }
  });
  return runReady;
}

/** Creates schema `name` in this run's database unless it exists; its URL. */
export async function createSchema(name: string): Promise<string> {
  await ensureRunDatabase();
  await admin((c) => c.query(`CREATE SCHEMA IF NOT EXISTS "${name}"`), runDatabase());
  return schemaUrl(name);
}

/** Drops schema `name` of this run's database, and what it holds. */
export async function dropSchema(name: string): Promise<void> {
  await admin((c) => c.query(`DROP SCHEMA IF EXISTS "${name}" CASCADE`), runDatabase());
}

/** The schema of a data dir in this run: the same dir (a restarted platform, a CLI child) finds the same schema. */
export function schemaNameFor(dataDir: string | undefined): string {
  const id = dataDir === undefined ? randomBytes(8).toString('hex') : createHash('sha256').update(resolve(dataDir)).digest('hex').slice(0, 16);
  return `rc_${id}`;
}

/**
 * True when the test server answers. When it does not: with RC_REQUIRE_POSTGRES=1 (CI) or
 * RC_TEST_DATABASE=postgres the test fails; otherwise it is skipped with a message saying why.
 */
export async function postgresAvailable(t: TestContext): Promise<boolean> {
  try {
    await admin((c) => c.query('SELECT 1'));
    return true;
  } catch (err) {
    if (process.env.RC_REQUIRE_POSTGRES === '1' || onPostgres)
      throw new Error(`PostgreSQL is required but ${TEST_POSTGRES_URL} did not answer: ${(err as Error).message}`);
    t.skip(`PostgreSQL not reachable at ${TEST_POSTGRES_URL}`);
    return false;
  }
}

/** A fresh empty database (a schema of this run's database) for this test, dropped after it. */
export async function freshDatabase(t: TestContext): Promise<string> {
  const name = schemaNameFor(undefined);
  const url = await createSchema(name);
  t.after(() => dropSchema(name));
  return url;
}

/** Drops run `run`'s database (scripts/test.mjs, after the suite); false when there was none. */
export async function dropRun(run: string): Promise<boolean> {
  const r = await admin((c) => c.query('SELECT 1 FROM pg_database WHERE datname = $1', [`rc_t_${run}`]));
  if (!r.rowCount) return false;
  await admin((c) => c.query(`DROP DATABASE IF EXISTS "rc_t_${run}" WITH (FORCE)`));
  return true;
}
