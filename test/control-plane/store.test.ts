// The store without HTTP: migrations, the ledger, coupons, SSH key validation, passwords, sealing.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { databasePath, openDatabase, SchemaTooNewError } from '../../control-plane/db.js';
import { MIGRATIONS } from '../../control-plane/migrations.js';
import { Store } from '../../control-plane/store.js';
import { checkSshPublicKey, SSH_KEY_MAX_LENGTH } from '../../control-plane/ssh-key.js';
import { hashPassword, verifyPassword } from '../../control-plane/passwords.js';
import { seal, unseal } from '../../control-plane/secrets.js';
import { API_ERRORS, ApiError } from '../../control-plane/errors.js';
import { mergedCatalog, storeKeySource } from '../../control-plane/sources.js';
import { modelEntrySchema } from '../../lib/config.js';
import { hashKey } from '../../lib/keys.js';
import { randomBytes } from 'node:crypto';
import { sshKey } from './platform.js';

const COUPON_INVALID = API_ERRORS.couponInvalid.message;
const COUPON_REDEEMED = API_ERRORS.couponRedeemed.message;

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), 'rc-store-test-'));
}

test('migrations: fresh file gets every migration, WAL, foreign keys; reopening is a no-op; a newer schema is refused', () => {
  const dir = tempDir();
  try {
    const path = databasePath(dir);
    const db = openDatabase(path);
    assert.equal(db.pragma('user_version', { simple: true }), MIGRATIONS.length);
    assert.equal(db.pragma('journal_mode', { simple: true }), 'wal');
    assert.equal(db.pragma('foreign_keys', { simple: true }), 1);
    assert.equal(statSync(path).mode & 0o777, 0o600);
    db.close();
    openDatabase(path).close();
    const raw = new Database(path);
    raw.pragma(`user_version = ${MIGRATIONS.length + 1}`);
    raw.close();
    assert.throws(() => openDatabase(path), SchemaTooNewError);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('seed runs once: the catalog and public templates survive an operator disabling an image', async () => {
  const dir = tempDir();
  try {
    const s1 = await Store.open({ dataDir: dir });
    const images = (await s1.images.list()).length;
    assert.ok(images >= 4);
    assert.ok((await s1.templates.listPublic()).length >= 2);
    const vllm = (await s1.templates.listPublic()).find((t) => t.instance_type === 'vllm')!;
    assert.equal(vllm.start_command, 'rc sim --host 0.0.0.0 --port $PORT --model demo');
    await s1.images.disable('rc/gradio:latest');
    await s1.close();
    const s2 = await Store.open({ dataDir: dir });
    assert.equal((await s2.images.list()).length, images);
    assert.equal(await s2.images.isEnabled('rc/gradio:latest'), false);
    await s2.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("image catalog's ssh: a new image serves none unless said; re-adding without saying keeps it; set-ssh changes it (on either engine)", async () => {
  const dir = tempDir();
  // A data dir, not ':memory:': with RC_TEST_DATABASE=postgres this store is on PostgreSQL, whose
  // upsert must name the table's column (`ssh` alone is ambiguous next to excluded.ssh there).
  const store = await Store.open({ dataDir: dir, seed: false });
  try {
    assert.deepEqual(await store.images.add('Plain', 'rc/plain:1'), { name: 'Plain', image: 'rc/plain:1', enabled: true, ssh: false });
    assert.equal((await store.images.add('Shell', 'rc/shell:1', true)).ssh, true);
    await store.images.disable('rc/shell:1');
    // Renamed and re-enabled; ssh left out keeps what the catalog said.
    assert.deepEqual(await store.images.add('Shell 2', 'rc/shell:1'), { name: 'Shell 2', image: 'rc/shell:1', enabled: true, ssh: true });
    assert.equal((await store.images.add('Shell 2', 'rc/shell:1', false)).ssh, false);
    assert.equal(await store.images.setSsh('rc/plain:1', true), true);
    assert.equal(await store.images.setSsh('rc/missing:1', true), false);
    assert.deepEqual(
      (await store.images.enabled()).map((i) => [i.image, i.ssh]),
      [
        ['rc/plain:1', true],
        ['rc/shell:1', false],
      ],
    );
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('ledger: idempotent entries, derived balance, append-only', async () => {
  const store = await Store.open({ db: openDatabase(':memory:'), seed: false });
  const a = await store.accounts.create({ email: 'l@x.io' });
  assert.deepEqual(await store.ledger.append({ accountId: a.id, kind: 'grant', credits: 10, idempotencyKey: 'g1' }), { applied: true, credits: 10 });
  assert.deepEqual(await store.ledger.append({ accountId: a.id, kind: 'grant', credits: 10, idempotencyKey: 'g1' }), { applied: false, credits: 10 });
  // Many small usage charges sum exactly (integer micro-credits).
  for (let i = 0; i < 10; i++) await store.ledger.append({ accountId: a.id, kind: 'instance_usage', credits: -0.1, idempotencyKey: `usage:i1:${i}` });
  assert.equal(await store.ledger.balance(a.id), 9);
  assert.equal((await store.ledger.entries(a.id)).length, 11);
  await assert.rejects(store.sql.prepare('UPDATE ledger SET amount_micros = 0').run(), /append-only/);
  await assert.rejects(store.sql.prepare('DELETE FROM ledger').run(), /append-only/);
  await assert.rejects(
    store.sql.prepare("INSERT INTO ledger (account_id, kind, amount_micros, idempotency_key, created_at) VALUES (?, 'bogus', 1, 'k', 0)").run(a.id),
    /CHECK|check constraint/,
  );
  await assert.rejects(store.ledger.append({ accountId: 999, kind: 'grant', credits: 1, idempotencyKey: 'fk' }), /FOREIGN KEY|foreign key/);
  await store.close();
});

test("coupons: redeem once; unknown, another account's and someone else's redeemed code are the same 400; the redeemer hears it was redeemed", async () => {
  const store = await Store.open({ db: openDatabase(':memory:'), seed: false });
  const a = await store.accounts.create({ email: 'a@x.io' });
  const b = await store.accounts.create({ email: 'b@x.io' });
  const open = await store.coupons.create(5);
  const forB = await store.coupons.create(2.5, b.id);
  const reject = (p: Promise<unknown>, message: string) => assert.rejects(p, (e: unknown) => e instanceof ApiError && e.status === 400 && e.detail === message);
  await reject(store.coupons.redeem(a.id, 'RC-NOPE'), COUPON_INVALID);
  await reject(store.coupons.redeem(a.id, forB.code), COUPON_INVALID);
  assert.deepEqual(await store.coupons.redeem(a.id, open.code), { credits_added: 5, credits: 5 });
  await reject(store.coupons.redeem(a.id, open.code), COUPON_REDEEMED);
  await reject(store.coupons.redeem(b.id, open.code), COUPON_INVALID);
  assert.deepEqual(await store.coupons.redeem(b.id, forB.code), { credits_added: 2.5, credits: 2.5 });
  await assert.rejects(store.coupons.create(1, null, open.code), (e: unknown) => e instanceof ApiError && e.status === 400);
  await store.close();
});

test('keys: one per account, rotation replaces the hash; sealed clear key readable only with the right key', async () => {
  const store = await Store.open({ db: openDatabase(':memory:'), seed: false });
  const a = await store.accounts.create({ email: 'k@x.io', verified: true });
  const k1 = await store.keys.issue(a.id);
  assert.equal(k1.revokedHash, undefined);
  const k2 = await store.keys.issue(a.id);
  assert.equal(k2.revokedHash, k1.keyHash);
  assert.equal(await store.keys.accountIdFor(hashKey(k1.key)), undefined);
  assert.equal(await store.keys.accountIdFor(hashKey(k2.key)), a.id);
  assert.equal(await store.keys.current(a.id), k2.key);
  assert.deepEqual([...(await storeKeySource(store).load())], [{ keyHash: k2.keyHash, accountId: a.id }]);
  // Nothing in the database holds the clear key.
  const dump = JSON.stringify(await store.sql.prepare('SELECT * FROM api_keys').all());
  assert.ok(!dump.includes(k2.key));
  const key = randomBytes(32);
  assert.equal(unseal(key, seal(key, 'secret')), 'secret');
  assert.equal(unseal(randomBytes(32), seal(key, 'secret')), undefined);
  await store.close();
});

test('model catalog: database entries merge over configured ones (same name: database wins)', async () => {
  const store = await Store.open({ db: openDatabase(':memory:'), seed: false });
  const configured = [modelEntrySchema.parse({ name: 'a' }), modelEntrySchema.parse({ name: 'b' })];
  await store.models.put(modelEntrySchema.parse({ name: 'b', upstreams: ['http://127.0.0.1:1/'] }));
  await store.models.put(modelEntrySchema.parse({ name: 'c' }));
  const merged = await mergedCatalog(configured, store);
  assert.deepEqual(
    merged.map((m) => m.name),
    ['a', 'b', 'c'],
  );
  assert.deepEqual(merged.find((m) => m.name === 'b')!.upstreams, ['http://127.0.0.1:1/']);
  assert.equal(await store.models.remove('c'), true);
  assert.equal(await store.models.remove('c'), false);
  await store.close();
});

test('passwords: scrypt hash verifies the right password only', async () => {
  const h = await hashPassword('correct horse');
  assert.match(h, /^scrypt\$16384\$8\$1\$/);
  assert.equal(await verifyPassword('correct horse', h), true);
  assert.equal(await verifyPassword('wrong horse!', h), false);
  assert.equal(await verifyPassword('correct horse', 'garbage'), false);
});

const ED = sshKey('ssh-ed25519');
const SSH_CASES: [string, string, boolean][] = [
  ['ed25519', ED, true],
  ['ed25519 without comment', sshKey('ssh-ed25519', ''), true],
  ['rsa', sshKey('ssh-rsa'), true],
  ['dss', sshKey('ssh-dss'), true],
  ['ecdsa p256', sshKey('ecdsa-sha2-nistp256'), true],
  ['ecdsa p521', sshKey('ecdsa-sha2-nistp521'), true],
  ['sk ed25519', sshKey('sk-ssh-ed25519@openssh.com'), true],
  ['sk ecdsa', sshKey('sk-ecdsa-sha2-nistp256@openssh.com'), true],
  ['one trailing newline (pasted from a .pub file)', ED + '\n', true],
  ['comment with spaces', sshKey('ssh-ed25519', 'my work laptop'), true],
  ['unknown type', sshKey('ssh-foo'), false],
  ['options prefix', `command="rm -rf /" ${ED}`, false],
  ['two lines', `${ED}\n${ED}`, false],
  ['embedded newline in comment', ED.replace('me@laptop', 'me\n@laptop'), false],
  ['type mismatch between declared and embedded', sshKey('ssh-rsa', 'x', 'ssh-ed25519'), false],
  ['body not base64', 'ssh-ed25519 AAAA$$$$ me', false],
  ['body with bad padding length', 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me', false],
  ['body holds only the type', `ssh-ed25519 ${Buffer.concat([Buffer.from([0, 0, 0, 11]), Buffer.from('ssh-ed25519')]).toString('base64')}`, false],
  ['type only', 'ssh-ed25519', false],
  ['control character', ED + '\u0007', false],
  ['too long', sshKey('ssh-ed25519', 'c'.repeat(SSH_KEY_MAX_LENGTH)), false],
  ['leading space', ' ' + ED, false],
];

for (const [name, key, ok] of SSH_CASES) {
  test(`ssh key: ${name} -> ${ok ? 'accepted' : 'rejected'}`, () => {
    const r = checkSshPublicKey(key);
    assert.equal(r.ok, ok, JSON.stringify(r));
    if (r.ok) assert.ok(!/[\r\n]/.test(r.key));
  });
}
