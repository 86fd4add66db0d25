// `rc migrate`: applies the database migrations and exits, so a rollout can migrate once before
// the new control planes start (they would apply them too, one at a time under the migration
// lock; this takes that wait off their start). SQLite: the data dir's file; PostgreSQL:
// RC_DATABASE_URL. Prints {"engine","version","applied"}.
import { parse, printJson, type Command } from '../lib/cli.js';
import { loadConfig } from '../lib/config.js';
import { databasePath, migrate, openDatabase } from './db.js';
import { MIGRATIONS } from './migrations.js';
import { PgSql } from './postgres.js';
import { migratePostgres } from './pg-migrations.js';

const HELP = `Usage: rc migrate [--data-dir DIR]

Applies the pending database migrations and exits: PostgreSQL when RC_DATABASE_URL is set, else
the SQLite file in the data dir (RC_DATA_DIR, or --data-dir). Safe to run while control planes
run and from several places at once: the migrations are applied exactly once, each run in one
transaction. Prints {"engine","version","applied"} as JSON.
`;

export const migrateCommand: Command = {
  summary: 'Apply the database migrations (ahead of a rollout) and exit',
  async run(argv) {
    const { values } = parse(argv, { 'data-dir': { type: 'string' } });
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    const config = loadConfig();
    if (config.databaseUrl) {
      const db = new PgSql(config.databaseUrl, { max: 1 });
      try {
        printJson({ engine: 'postgres', ...(await migratePostgres(db.pool)) });
      } finally {
        await db.close();
      }
      return 0;
    }
    const db = openDatabase(databasePath((values['data-dir'] as string | undefined) ?? config.dataDir), { migrate: false });
    try {
      const before = db.pragma('user_version', { simple: true }) as number;
      migrate(db);
      printJson({ engine: 'sqlite', version: MIGRATIONS.length, applied: MIGRATIONS.length - before });
    } finally {
      db.close();
    }
    return 0;
  },
};
