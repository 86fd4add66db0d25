// Loaded with --import into every test process (and, through NODE_OPTIONS, into the rc processes
// the tests start) when RC_TEST_DATABASE=postgres (scripts/test.mjs sets both): each data dir's
// state goes to a PostgreSQL schema of its own in the run's database (test/postgres.ts), created
// on first use, so a test that restarts a platform or runs `rc` on its data dir finds the same
// state, and tests never share one.
// - In test processes, Store.open maps its data dir to that database; a store opened on a given
//   SQLite database (':memory:') gets a fresh one instead.
// - An rc process gets RC_DATABASE_URL for its RC_DATA_DIR, as an operator would set it.
import { Store, type StoreOptions } from '../control-plane/store.js';
import { createSchema, onPostgres, schemaNameFor, schemaUrl } from './postgres.js';

if (onPostgres) {
  const open = Store.open.bind(Store);
  Store.open = async (options: StoreOptions): Promise<Store> => {
    if (options.databaseUrl) {
      // A schema of this run named by RC_DATABASE_URL (below) may not exist yet.
      const schema = /search_path=(rc_[0-9a-f]{16})$/.exec(new URL(options.databaseUrl).searchParams.get('options') ?? '')?.[1];
      if (schema) await createSchema(schema);
      return open(options);
    }
    options.db?.close();
    const url = await createSchema(schemaNameFor(options.db ? undefined : options.dataDir));
    return open({ ...options, db: undefined, databaseUrl: url });
  };
  const dataDir = process.env.RC_DATA_DIR;
  if (process.argv[1]?.endsWith('/bin/rc.js') && dataDir && !process.env.RC_DATABASE_URL) process.env.RC_DATABASE_URL = schemaUrl(schemaNameFor(dataDir));
}
