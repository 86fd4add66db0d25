// Issue 14, "smaller": bearer secrets are stored hashed. Attack: someone who reads the database
// (a backup, a copied file) finds no coupon code to redeem and no CSRF token to use; the codes of
// an existing database are hashed by the migration and still redeem.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import Database from 'better-sqlite3';
import { databasePath } from '../../control-plane/db.js';
import { MIGRATIONS } from '../../control-plane/migrations.js';
import { Store, type StoreOptions } from '../../control-plane/store.js';
import { migratePostgres, PG_MIGRATIONS } from '../../control-plane/pg-migrations.js';
import { PgSql } from '../../control-plane/postgres.js';
import { freshDatabase, onPostgres } from '../postgres.js';
import { startPlatform } from './platform.js';

/** Every text value of every row of every table, read through the store's own connection (either engine). */
async function everyStoredText(store: Store): Promise<string> {
  const list =
    store.sql.engine === 'postgres'
      ? 'SELECT table_name AS name FROM information_schema.tables WHERE table_schema = current_schema()'
      : "SELECT name FROM sqlite_master WHERE type = 'table'";
  const tables = await store.sql.prepare<[], { name: string }>(list).all();
  const rows = await Promise.all(tables.map((t) => store.sql.prepare(`SELECT * FROM "${t.name}"`).all()));
  return rows.map((r) => JSON.stringify(r)).join('\n');
}

/** Rows as they were before migration 3 (clear coupon codes and CSRF tokens), in migrations 1-2's schema. */
const OLD_ROWS = [
  "INSERT INTO accounts (email, created_at) VALUES ('old@example.com', 0)",
  "INSERT INTO coupons (code, credits_micros, created_at) VALUES ('RC-OLD-CODE-1', 2000000, 0)",
  "INSERT INTO sessions (token_hash, account_id, csrf_token, created_at, expires_at) VALUES ('h', 1, 'clear-csrf', 0, 9999999999999)",
];

/** A database at schema version 2 holding OLD_ROWS: the data dir's SQLite file, or a PostgreSQL database (RC_TEST_DATABASE). */
async function versionTwoDatabase(t: TestContext, dir: string): Promise<StoreOptions> {
  if (!onPostgres) {
    const raw = new Database(databasePath(dir));
    for (const m of MIGRATIONS.slice(0, 2)) raw.exec(m);
    raw.pragma('user_version = 2');
    for (const row of OLD_ROWS) raw.prepare(row).run();
    raw.close();
    return { dataDir: dir };
  }
  const databaseUrl = await freshDatabase(t);
  const db = new PgSql(databaseUrl);
  try {
    await migratePostgres(db.pool, PG_MIGRATIONS.slice(0, 2));
    for (const row of OLD_ROWS) await db.prepare(row).run();
  } finally {
    await db.close();
  }
  return { dataDir: dir, databaseUrl };
}

test('attack: the database alone reveals no coupon code and no CSRF token', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  await p.account('reader@example.com', { verified: true, password: 'correct horse battery' });
  const coupon = await p.cp.store.coupons.create(5);
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'reader@example.com', password: 'correct horse battery' } });
  const cookie = String(login.headers['set-cookie']).split(';')[0]!;
  const csrf = login.body.csrf_token as string;

  const stored = await everyStoredText(p.cp.store);
  assert.ok(!stored.includes(coupon.code), 'the coupon code is stored');
  assert.ok(!stored.includes(csrf), 'the CSRF token is stored');
  assert.ok(!stored.includes(cookie.split('=')[1]!), 'the session token is stored');
  assert.ok(!(await p.cp.store.coupons.list()).some((c) => JSON.stringify(c).includes(coupon.code)), 'rc coupon list shows the code');

  // The session still hands its CSRF token to its pages, and writes check it.
  const session = await p.call('GET', '/api/auth/session', { cookie });
  assert.equal(session.body.csrf_token, csrf);
  assert.equal((await p.call('POST', '/api/credits/redeem', { cookie, csrf: 'wrong', body: { coupon: coupon.code } })).status, 403);
  const redeemed = await p.call('POST', '/api/credits/redeem', { cookie, csrf, body: { coupon: coupon.code } });
  assert.equal(redeemed.status, 200, JSON.stringify(redeemed.body));
  assert.equal(redeemed.body.credits_added, 5);
  assert.ok(!(await everyStoredText(p.cp.store)).includes(coupon.code), 'the ledger keeps no code either');
});

test('the migration hashes the coupon codes of an existing database; they still redeem once', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-migrate-secrets-'));
  try {
    const store = await Store.open(await versionTwoDatabase(t, dir));
    try {
      const text = await everyStoredText(store);
      assert.ok(!text.includes('RC-OLD-CODE-1'));
      assert.ok(!text.includes('clear-csrf'), 'sessions with a clear CSRF token are ended');
      assert.deepEqual(await store.coupons.redeem(1, 'RC-OLD-CODE-1'), { credits_added: 2, credits: 2 });
      await assert.rejects(store.coupons.redeem(1, 'RC-OLD-CODE-1'), /already been redeemed/);
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
