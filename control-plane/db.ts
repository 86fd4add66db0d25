// Opening the platform database: one SQLite file, WAL (readers never block the writer, and the
// rc CLI can write while the platform runs), foreign keys on, a busy timeout instead of
// SQLITE_BUSY errors, and the migrations applied in one transaction each.
import Database from 'better-sqlite3';
import { hashKey } from '../lib/keys.js';
import { chmodSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { RcError } from '../lib/errors.js';
import { MIGRATIONS } from './migrations.js';

export type Db = Database.Database;

/** The database file inside a data dir. */
export function databasePath(dataDir: string): string {
  return join(dataDir, 'platform.db');
}

/** The database is newer than this code (a downgrade); refusing to run is safer than guessing. */
export class SchemaTooNewError extends RcError {
  constructor(found: number, known: number) {
    super('RC_ERR_SCHEMA_TOO_NEW', `Database schema version ${found} is newer than this program knows (${known})`, 500);
  }
}

/** Opens (creating when missing) and migrates (unless told not to) the database at `path` (':memory:' for a throwaway one). */
export function openDatabase(path: string, options: { migrate?: boolean } = {}): Db {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new Database(path);
  // Password hashes and sealed keys live here: owner-only (SQLite gives -wal/-shm the same mode).
  if (path !== ':memory:') chmodSync(path, 0o600);
  db.pragma('busy_timeout = 5000');
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  // Migration 3 hashes stored secrets in SQL.
  db.function('rc_sha256', { deterministic: true }, (v: unknown) => hashKey(String(v)));
  if (options.migrate !== false) migrate(db);
  return db;
}

/** Applies the migrations the database has not seen yet. */
export function migrate(db: Db): void {
  const apply = db.transaction(() => {
    // Read the version inside the (immediate) transaction: two processes opening a fresh file at
    // once must not both apply migration 1.
    const version = db.pragma('user_version', { simple: true }) as number;
    if (version > MIGRATIONS.length) throw new SchemaTooNewError(version, MIGRATIONS.length);
    for (let v = version; v < MIGRATIONS.length; v++) db.exec(MIGRATIONS[v]!);
    if (version !== MIGRATIONS.length) db.pragma(`user_version = ${MIGRATIONS.length}`);
  });
  apply.immediate();
}
