// The store behind PgBouncer in transaction mode (issue 43: poolers break what rests on one
// server connection: session advisory locks, named prepared statements). A real pgbouncer
// (Debian's, 1.18 here) pools two server connections in transaction mode in front of the test
// server; with RC_DATABASE_NAMED_STATEMENTS=0 (namedStatements: false) two stores on it, as two
// control planes, migrate, write accounts and the ledger from many connections at once, take the
// background lease one at a time and run SERIALIZABLE transactions. Named statements, the default,
// fail there before PgBouncer 1.21 (a statement prepared on one server connection is executed on
// another, or prepared twice on one): shown too, so the setting is what makes the difference.
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import pg from 'pg';
import { Store } from '../../control-plane/store.js';
import { freePort } from '../fleet/harness.js';
import { waitFor } from '../helpers.js';
import { postgresAvailable, TEST_POSTGRES_URL } from '../postgres.js';

const PGBOUNCER = '/usr/sbin/pgbouncer';

/** pgbouncer's version as [major, minor]. */
function pgbouncerVersion(): [number, number] {
  const m = /PgBouncer (\d+)\.(\d+)/.exec(execFileSync(PGBOUNCER, ['--version']).toString())!;
  return [Number(m[1]), Number(m[2])];
}

/** A database of its own (PgBouncer does not relay the `options` that give the other tests a schema each). */
async function ownDatabase(t: TestContext): Promise<string> {
  const name = `rc_pgb_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: TEST_POSTGRES_URL });
  await admin.connect();
  await admin.query(`CREATE DATABASE "${name}"`);
  await admin.end();
  t.after(async () => {
    const c = new pg.Client({ connectionString: TEST_POSTGRES_URL });
    await c.connect();
    await c.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await c.end();
  });
  return name;
}

/** pgbouncer in transaction mode with two server connections per database, on a free port. */
async function startPgbouncer(t: TestContext): Promise<number> {
  const server = new URL(TEST_POSTGRES_URL);
  const dir = mkdtempSync(join(tmpdir(), 'rc-pgbouncer-'));
  chmodSync(dir, 0o755); // pgbouncer drops to the postgres user (it refuses to run as root)
  const port = await freePort();
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      `* = host=${server.hostname} port=${server.port || 5432} user=${server.username || 'postgres'}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = any',
      'pool_mode = transaction',
      'default_pool_size = 2',
      'max_client_conn = 100',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const asRoot = process.getuid?.() === 0;
  const child: ChildProcess = spawn(PGBOUNCER, [...(asRoot ? ['-u', 'postgres'] : []), join(dir, 'pgbouncer.ini')], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = ''; // pgbouncer logs to stderr
  child.stderr!.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-4000)));
  t.after(async () => {
    child.kill('SIGTERM');
    if (child.exitCode === null) await new Promise((r) => child.once('exit', r));
    rmSync(dir, { recursive: true, force: true });
  });
  await waitFor(
    () =>
      new Promise<boolean>((resolve) => {
        const s = connect(port, '127.0.0.1', () => {
          s.end();
          resolve(true);
        }).on('error', () => resolve(false));
      }),
    10_000,
    50,
  ).catch((err: Error) => {
    throw new Error(`${err.message}: pgbouncer did not listen: ${log}`);
  });
  return port;
}

test('the store behind PgBouncer in transaction mode: two control planes migrate, write from many connections, take the lease one at a time; named statements are what breaks there', async (t) => {
  if (!(await postgresAvailable(t))) return;
  if (!existsSync(PGBOUNCER)) {
    if (process.env.RC_REQUIRE_POSTGRES === '1') throw new Error(`${PGBOUNCER} is required with RC_REQUIRE_POSTGRES=1 (apt-get install pgbouncer)`);
    t.skip(`no ${PGBOUNCER} (apt-get install pgbouncer)`);
    return;
  }
  const db = await ownDatabase(t);
  const port = await startPgbouncer(t);
  const url = `postgres://postgres@127.0.0.1:${port}/${db}`;
  const sealKey = randomBytes(32);
  const open = (namedStatements: boolean) => Store.open({ databaseUrl: url, sealKey, namedStatements, seed: false });
  // Started together: the migrations run once (a transaction-scoped advisory lock holds through the pooler).
  const [a, b] = await Promise.all([open(false), open(false)]);
  t.after(() => Promise.all([a.close(), b.close()]));

  const accounts = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 ? a : b).accounts.create({ email: `pgb${i}@example.com` })));
  await Promise.all(
    accounts.flatMap((acct, i) =>
      [1, 2, 3].map((k) => (i % 2 ? b : a).ledger.append({ accountId: acct.id, kind: 'grant', credits: k, idempotencyKey: `pgb:${acct.id}:${k}` })),
    ),
  );
  // The same idempotency key again, through the other store: nothing new.
  assert.equal((await a.ledger.append({ accountId: accounts[0]!.id, kind: 'grant', credits: 1, idempotencyKey: `pgb:${accounts[0]!.id}:1` })).applied, false);
  for (const acct of accounts) assert.equal(await b.ledger.balance(acct.id), 6);

  // The background lease: one holder at a time through the pooler.
  const now = Date.now();
  const takes = await Promise.all([a, b, a, b].map((s, i) => s.leases.take('background', `replica-${i}`, now, 60_000)));
  assert.equal(takes.filter((x) => x !== undefined).length, 1, JSON.stringify(takes));
  // A SERIALIZABLE transaction (what billing runs in) on each store at once.
  await Promise.all(
    [a, b].map((s, i) =>
      s.transaction(async (tx) => {
        await tx.ledger.append({ accountId: accounts[1]!.id, kind: 'grant', credits: 10, idempotencyKey: `pgb:tx:${i}` });
        return tx.ledger.balance(accounts[1]!.id);
      }),
    ),
  );
  assert.equal(await a.ledger.balance(accounts[1]!.id), 26);

  // Named statements, the default: before PgBouncer 1.21 a statement prepared on one server
  // connection is executed on another, and fails.
  const [major, minor] = pgbouncerVersion();
  if (major > 1 || minor >= 21) return t.diagnostic(`PgBouncer ${major}.${minor} keeps prepared statements: not shown here`);
  const named = await open(true);
  t.after(() => named.close());
  const errors: string[] = [];
  for (let round = 0; round < 20 && errors.length === 0; round++) {
    const results = await Promise.allSettled(accounts.map((acct) => named.ledger.balance(acct.id)));
    for (const r of results) if (r.status === 'rejected') errors.push(String(r.reason));
  }
  assert.ok(errors.length > 0, 'named statements went through a pooler in transaction mode');
  assert.match(errors[0]!, /prepared statement "rc_[^"]+" (does not exist|already exists)/);
});
