// The platform's state: one SQLite database and the typed modules over it. Built once per
// process; every statement is prepared once in the module constructors.
import { randomBytes } from 'node:crypto';
import { systemClock, type Clock } from '../lib/clock.js';
import { Accounts, ApiKeys, Sessions } from './accounts.js';
import { Images, Limits, Models } from './catalogs.js';
import { databasePath, openDatabase, type Db } from './db.js';
import { HostStore } from './instances/host-store.js';
import { LogTails } from './instances/log-tails.js';
import { InstanceStore } from './instances/store.js';
import { Coupons, Ledger } from './ledger.js';
import { AuditLog } from './operator/audit-log.js';
import { ModelUsageDays } from './operator/usage-days.js';
import { sealKey } from './secrets.js';
import { seedOnce } from './seed.js';
import { Templates } from './templates.js';

export interface StoreOptions {
  /** Data dir: the database file and the sealing key live there. */
  dataDir?: string;
  /** An already open database (for example ':memory:'); used instead of the data dir's file. */
  db?: Db;
  /** Key that seals API keys at rest; default: the data dir's seal.key (random per process without a data dir). */
  sealKey?: Buffer;
  clock?: Clock;
  /** Seed the default image catalog and public templates on a fresh database (default true). */
  seed?: boolean;
}

export class Store {
  readonly db: Db;
  readonly clock: Clock;
  readonly accounts: Accounts;
  readonly keys: ApiKeys;
  readonly sessions: Sessions;
  readonly ledger: Ledger;
  readonly coupons: Coupons;
  readonly images: Images;
  readonly models: Models;
  readonly limits: Limits;
  readonly templates: Templates;
  /** Instances, accepted launches and launch verification tokens (instances/store.ts). */
  readonly instances: InstanceStore;
  /** The GPU hosts registered with `rc host add` (instances/host-store.ts). */
  readonly hosts: HostStore;
  /** The last log lines of ended instances (instances/log-tails.ts). */
  readonly logTails: LogTails;
  /** Every operator action (operator/audit-log.ts). */
  readonly audit: AuditLog;
  /** The shared models' usage per day, account and model, copied from the gates (operator/usage-days.ts). */
  readonly modelUsageDays: ModelUsageDays;
  /** The key sealing secrets at rest (API keys, host agent tokens). */
  readonly sealKey: Buffer;

  constructor(options: StoreOptions) {
    if (!options.db && !options.dataDir) throw new TypeError('Store needs dataDir or db');
    this.db = options.db ?? openDatabase(databasePath(options.dataDir!));
    this.clock = options.clock ?? systemClock;
    const seal = (this.sealKey = options.sealKey ?? (options.dataDir ? sealKey(options.dataDir) : randomBytes(32)));
    this.accounts = new Accounts(this.db, this.clock);
    this.keys = new ApiKeys(this.db, this.clock, seal);
    this.sessions = new Sessions(this.db, this.clock);
    this.ledger = new Ledger(this.db, this.clock);
    this.coupons = new Coupons(this.db, this.clock, this.ledger);
    this.images = new Images(this.db, this.clock);
    this.models = new Models(this.db, this.clock);
    this.limits = new Limits(this.db);
    this.templates = new Templates(this.db, this.clock);
    this.instances = new InstanceStore(this.db);
    this.hosts = new HostStore(this.db, seal, this.clock);
    this.logTails = new LogTails(this.db);
    this.audit = new AuditLog(this.db, this.clock);
    this.modelUsageDays = new ModelUsageDays(this.db, this.clock);
    if (options.seed !== false) seedOnce(this);
  }

  /** Runs `fn` in one immediate (write-locking) transaction. */
  transaction<T>(fn: () => T): T {
    return this.db.transaction(fn).immediate();
  }

  close(): void {
    if (this.db.open) this.db.close();
  }
}
