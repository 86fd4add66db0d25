// Runs the node:test suite from the compiled tree. Extra arguments are passed on
// (for example a single file: `npm test -- dist/test/sim/sim.test.js`).
//
// RC_TEST_DATABASE=postgres runs the store on PostgreSQL (RC_TEST_POSTGRES_URL, default the local
// server): every test process, and every rc process the tests start, loads
// dist/test/pg-store-setup.js, which gives each data dir a schema of its own in the run's
// database (rc_t_<run>), dropped at the end (the PostgreSQL tests of a SQLite run use it too).
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';

const files = process.argv.slice(2);
const args = ['--test', '--test-concurrency=2', '--test-timeout=300000', ...(files.length ? files : ['dist/test/'])];
const env = { ...process.env, RC_LOG_LEVEL: process.env.RC_LOG_LEVEL ?? 'silent' };
const onPostgres = env.RC_TEST_DATABASE === 'postgres';
// The run's PostgreSQL database (test/postgres.ts): made by the first test that needs it.
env.RC_TEST_DATABASE_RUN ??= randomBytes(4).toString('hex');
if (onPostgres) {
  const setup = fileURLToPath(new URL('../dist/test/pg-store-setup.js', import.meta.url));
  env.NODE_OPTIONS = `${env.NODE_OPTIONS ?? ''} --import=${setup}`.trim();
}
const r = spawnSync(process.execPath, args, { stdio: 'inherit', env });
const { dropRun } = await import('../dist/test/postgres.js');
const dropped = await dropRun(env.RC_TEST_DATABASE_RUN).catch((err) => {
  if (onPostgres || env.RC_REQUIRE_POSTGRES === '1') throw err;
  return false; // no PostgreSQL here: its tests skipped
});
if (dropped) console.log(`# PostgreSQL: dropped the run's database rc_t_${env.RC_TEST_DATABASE_RUN}`);
process.exit(r.status ?? 1);
