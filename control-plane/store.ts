// The platform's state: one database (SQLite by default, PostgreSQL with RC_DATABASE_URL) and the
// typed repositories over it. The Store is opened once per process (Store.open: migrations, then
// the first-start seed); `store.transaction(async (tx) => ...)` runs a change in one transaction,
// with `tx` holding the same repositories bound to it.
import { createHmac, randomBytes } from 'node:crypto';
import { systemClock, type Clock } from '../lib/clock.js';
import { Accounts, ApiKeys, Sessions } from './accounts.js';
import { EmailVerifications } from './auth/email-verification.js';
import { Images, Limits, Models } from './catalogs.js';
import { databasePath, openDatabase, type Db } from './db.js';
import { HostStore } from './instances/host-store.js';
import { LogTails } from './instances/log-tails.js';
import { InstanceStore } from './instances/store.js';
import { Leases } from './leases.js';
import { Coupons, Ledger } from './ledger.js';
import { AuditLog } from './operator/audit-log.js';
import { OperatorReads } from './operator/reads.js';
import { ModelUsageDays } from './operator/usage-days.js';
import { PgSql } from './postgres.js';
import { migratePostgres } from './pg-migrations.js';
import { sealKey } from './secrets.js';
import { seedOnce } from './seed.js';
import type { Sql } from './sql.js';
import { SqliteSql } from './sqlite.js';
import { Templates } from './templates.js';
import { RcError } from '../lib/errors.js';

export interface StoreOptions {
  /** Data dir: the database file (SQLite) and the sealing key live there. */
  dataDir?: string;
  /** `postgres://...` (RC_DATABASE_URL): the state on PostgreSQL instead of the data dir's SQLite file. */
  databaseUrl?: string;
  /** PostgreSQL: named prepared statements (RC_DATABASE_NAMED_STATEMENTS; default true). */
  namedStatements?: boolean;
  /** An already open database (for example ':memory:'); used instead of the data dir's file. */
  db?: Db;
  /** Key that seals API keys at rest; default: the data dir's seal.key (random per process without a data dir). */
  sealKey?: Buffer;
  clock?: Clock;
  /** Seed the default image catalog and public templates on a fresh database (default true). */
  seed?: boolean;
}

/**
 * The repositories over one executor: the database itself (Store) or one transaction. Each is
 * made on first use, so a transaction pays only for the repositories it touches.
 */
export class Repositories {
  private _accounts?: Accounts;
  private _keys?: ApiKeys;
  private _sessions?: Sessions;
  private _ledger?: Ledger;
  private _coupons?: Coupons;
  private _images?: Images;
  private _models?: Models;
  private _limits?: Limits;
  private _templates?: Templates;
  private _instances?: InstanceStore;
  private _hosts?: HostStore;
  private _logTails?: LogTails;
  private _audit?: AuditLog;
  private _modelUsageDays?: ModelUsageDays;
  private _emailVerifications?: EmailVerifications;
  private _operatorReads?: OperatorReads;
  private _leases?: Leases;

  constructor(
    /** The executor these repositories run their statements on. */
    readonly sql: Sql,
    readonly clock: Clock,
    /** The key sealing secrets at rest (API keys, host agent tokens). */
    readonly sealKey: Buffer,
  ) {}

  get accounts(): Accounts {
    return (this._accounts ??= new Accounts(this.sql, this.clock));
  }
  get keys(): ApiKeys {
    return (this._keys ??= new ApiKeys(this.sql, this.clock, this.sealKey));
  }
  get sessions(): Sessions {
    return (this._sessions ??= new Sessions(this.sql, this.clock));
  }
  get leases(): Leases {
    return (this._leases ??= new Leases(this.sql));
  }
  get ledger(): Ledger {
    return (this._ledger ??= new Ledger(this.sql, this.clock));
  }
  get coupons(): Coupons {
    return (this._coupons ??= new Coupons(this.sql, this.clock, this.ledger));
  }
  get images(): Images {
    return (this._images ??= new Images(this.sql, this.clock));
  }
  get models(): Models {
    return (this._models ??= new Models(this.sql, this.clock));
  }
  get limits(): Limits {
    return (this._limits ??= new Limits(this.sql));
  }
  get templates(): Templates {
    return (this._templates ??= new Templates(this.sql, this.clock));
  }
  /** Instances, accepted launches and launch verification tokens (instances/store.ts). */
  get instances(): InstanceStore {
    return (this._instances ??= new InstanceStore(this.sql));
  }
  /** The GPU hosts registered with `rc host add` (instances/host-store.ts). */
  get hosts(): HostStore {
    return (this._hosts ??= new HostStore(this.sql, this.sealKey, this.clock));
  }
  /** The last log lines of ended instances (instances/log-tails.ts). */
  get logTails(): LogTails {
    return (this._logTails ??= new LogTails(this.sql));
  }
  /** Every operator action (operator/audit-log.ts). */
  get audit(): AuditLog {
    return (this._audit ??= new AuditLog(this.sql, this.clock));
  }
  /** The shared models' usage per day, account and model, copied from the gates (operator/usage-days.ts). */
  get modelUsageDays(): ModelUsageDays {
    return (this._modelUsageDays ??= new ModelUsageDays(this.sql, this.clock));
  }
  /** E-mail verification links (auth/email-verification.ts). */
  get emailVerifications(): EmailVerifications {
    return (this._emailVerifications ??= new EmailVerifications(this.sql, this.clock));
  }
  /** The operator pages' read-only queries (operator/reads.ts). */
  get operatorReads(): OperatorReads {
    return (this._operatorReads ??= new OperatorReads(this.sql));
  }

  /** Runs `fn` in one transaction (write-locking at once on SQLite); use only `tx` inside it (sql.ts). */
  transaction<T>(fn: (tx: Repositories) => Promise<T>): Promise<T> {
    return this.sql.transaction((q) => fn(q === this.sql ? this : new Repositories(q, this.clock, this.sealKey)));
  }
}

export class Store extends Repositories {
  private constructor(
    private readonly database: SqliteSql | PgSql,
    clock: Clock,
    seal: Buffer,
  ) {
    super(database, clock, seal);
  }

  /** Opens (creating and migrating when needed) the database, then seeds a fresh one. */
  static async open(options: StoreOptions): Promise<Store> {
    if (!options.db && !options.dataDir && !options.databaseUrl) throw new TypeError('Store needs dataDir, databaseUrl or db');
    const database = options.databaseUrl
      ? await openPostgres(options.databaseUrl, options.namedStatements)
      : new SqliteSql(options.db ?? openDatabase(databasePath(options.dataDir!)));
    const seal = options.sealKey ?? (options.dataDir ? sealKey(options.dataDir) : randomBytes(32));
    const store = new Store(database, options.clock ?? systemClock, seal);
    try {
      await checkSealKey(store);
      if (options.seed !== false) await seedOnce(store);
    } catch (err) {
      await store.close();
      throw err;
    }
    return store;
  }

  async close(): Promise<void> {
    await this.database.close();
  }
}

/** The database was sealed with another key than this control plane's: its API keys and host tokens would not open. */
export class SealKeyMismatchError extends RcError {
  constructor() {
    super(
      'RC_ERR_SEAL_KEY_MISMATCH',
      "this database's secrets were sealed with another seal.key: every control plane on one database needs the same one " +
        '(copy seal.key from the data dir of the first, or point RC_DATA_DIR at a copy of it); refusing to start',
      500,
    );
  }
}

/**
 * Control planes on one database must share the key that seals API keys and host tokens at rest
 * (the data dir's seal.key). The first to open the database records a check value (an HMAC of a
 * constant under the key, which says nothing of the key); one with another key refuses to start
 * rather than answer 401 to every key it cannot unseal.
 */
async function checkSealKey(store: Store): Promise<void> {
  const check = createHmac('sha256', store.sealKey).update('rc-seal-check').digest('hex');
  await store.sql.prepare<[string]>("INSERT INTO meta (key, value) VALUES ('seal_check', ?) ON CONFLICT (key) DO NOTHING").run(check);
  const stored = await store.sql.prepare<[], { value: string }>("SELECT value FROM meta WHERE key = 'seal_check'").get();
  if (stored?.value !== check) throw new SealKeyMismatchError();
}

/** A pool on the PostgreSQL database at `url`, migrated (a failure closes the pool). */
async function openPostgres(url: string, namedStatements?: boolean): Promise<PgSql> {
  const db = new PgSql(url, { namedStatements });
  try {
    await migratePostgres(db.pool);
    return db;
  } catch (err) {
    await db.close();
    throw err;
  }
}
