// The rc CLI end to end: spawned `rc account|coupon|image|model` against a running platform
// (admin API; its events reach the platform's bus) and against the database alone.
import { onPostgres } from '../postgres.js';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, existsSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { busChannel, RedisBus, type BusEvent } from '../../lib/bus.js';
import { hashKey } from '../../lib/keys.js';
import { Store } from '../../control-plane/store.js';
import { RUNTIME_FILE } from '../../control-plane/server.js';
import { redisAvailable, REDIS_URL, runRcCli, waitFor } from '../helpers.js';
import { startPlatform } from './platform.js';

const rc = runRcCli;

test('rc against a running platform: accounts, coupons, images, models go through the admin API and publish events', async () => {
  const p = await startPlatform();
  try {
    assert.ok(existsSync(join(p.dir, RUNTIME_FILE)));
    assert.equal(statSync(join(p.dir, 'admin.token')).mode & 0o777, 0o600);

    const created = await rc(p.dir, ['account', 'create', '--email', 'cli@x.io', '--credits', '12.5', '--verified', '--password', 'cli-password']);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.json.email, 'cli@x.io');
    assert.equal(created.json.credits, 12.5);
    assert.match(created.json.api_token, /^rc-/);
    // The running platform knows the key at once, and gateways heard key.issued on its bus.
    const me = await p.call('GET', '/api/me', { key: created.json.api_token });
    assert.equal(me.status, 200);
    assert.ok(p.events.some((e) => e.type === 'key.issued' && e.keyHash === hashKey(created.json.api_token)));
    assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'cli@x.io', password: 'cli-password' } })).status, 200);

    const unverified = await rc(p.dir, ['account', 'create', '--email', 'review@x.io']);
    assert.equal(unverified.json.api_token, null);
    assert.equal(unverified.json.verified, false);
    const verified = await rc(p.dir, ['account', 'verify', '--email', 'review@x.io']);
    assert.equal(verified.json.verified, true);
    assert.match(verified.json.api_token, /^rc-/);

    const coupon = await rc(p.dir, ['coupon', 'create', '--credits', '5', '--email', 'cli@x.io']);
    assert.equal(coupon.code, 0, coupon.stderr);
    assert.equal(coupon.json.credits, 5);
    const redeemed = await p.call('POST', '/api/credits/redeem', { key: created.json.api_token, body: { coupon: coupon.json.code } });
    assert.deepEqual(redeemed.body, { credits_added: 5, credits: 17.5 });
    const grant = await rc(p.dir, ['account', 'grant-credits', '--email', 'cli@x.io', '--credits', '2.5', '--idempotency-key', 'once']);
    assert.equal(grant.json.credits, 20);
    const again = await rc(p.dir, ['account', 'grant-credits', '--email', 'cli@x.io', '--credits', '2.5', '--idempotency-key', 'once']);
    assert.deepEqual([again.json.applied, again.json.credits], [false, 20]);

    const limits = await rc(p.dir, ['account', 'set-limits', '--email', 'cli@x.io', '--rpm', '10', '--daily-tokens', '5000']);
    assert.deepEqual(limits.json.limits, { rpm: 10, tpm: null, daily_tokens: 5000 });
    const changed = p.events.find((e): e is Extract<BusEvent, { type: 'account.changed' }> => e.type === 'account.changed' && e.accountId === created.json.id);
    assert.deepEqual(changed?.limits, { rpm: 10, tpm: null, dailyTokens: 5000 });

    const img = await rc(p.dir, ['image', 'add', '--name', 'Custom', '--image', 'me/custom:1']);
    assert.deepEqual(img.json, { name: 'Custom', image: 'me/custom:1', enabled: true, ssh: false });
    // Whether it serves SSH: --ssh on add, `rc image ssh` after; a re-add without --ssh keeps it.
    assert.equal((await rc(p.dir, ['image', 'ssh', '--image', 'me/custom:1'])).json.ssh, true);
    assert.equal((await rc(p.dir, ['image', 'add', '--name', 'Custom', '--image', 'me/custom:1'])).json.ssh, true);
    assert.equal((await rc(p.dir, ['image', 'ssh', '--image', 'me/custom:1', '--off'])).json.ssh, false);
    assert.equal((await rc(p.dir, ['image', 'add', '--name', 'Custom', '--image', 'me/custom:1', '--ssh'])).json.ssh, true);
    const unknownImage = await rc(p.dir, ['image', 'ssh', '--image', 'no/such:1']);
    assert.notEqual(unknownImage.code, 0);
    assert.match(unknownImage.stderr, /No image no\/such:1/);
    const tpl = await p.call('POST', '/api/profile/templates', { key: created.json.api_token, body: { title: 'c', image: 'me/custom:1' } });
    assert.equal(tpl.status, 200);
    assert.equal((await rc(p.dir, ['image', 'disable', '--image', 'me/custom:1'])).json.enabled, false);
    const tpl2 = await p.call('POST', '/api/profile/templates', { key: created.json.api_token, body: { title: 'c', image: 'me/custom:1' } });
    assert.equal(tpl2.status, 400);
    const images = await rc(p.dir, ['image', 'list']);
    assert.ok(images.json.images.some((i: { image: string; enabled: boolean }) => i.image === 'me/custom:1' && !i.enabled));

    const before = p.events.filter((e) => e.type === 'catalog.changed').length;
    const args = ['model', 'add', '--name', 'llama', '--upstream', 'http://127.0.0.1:9', '--upstream', 'http://127.0.0.1:9001', '--reasoning'];
    // Nothing answers there: the check refuses to save, saying what failed; --unchecked saves anyway.
    const refused = await rc(p.dir, args);
    assert.notEqual(refused.code, 0);
    assert.match(refused.stderr, /2 of 2 upstreams failed the check for “llama”\. http:\/\/127\.0\.0\.1:9 could not be reached \(connection refused\)/);
    assert.match(refused.stderr, /Not saved/);
    // rc model check says the same, prints the whole result, and exits 1: a script sees the failure.
    const check = await rc(p.dir, ['model', 'check', '--name', 'llama', '--upstream', 'http://127.0.0.1:9']);
    assert.equal(check.code, 1, check.stderr);
    assert.equal(check.json.ok, false);
    assert.match(check.stderr, /^rc model check: 1 of 1 upstream failed the check for “llama”\. http:\/\/127\.0\.0\.1:9 could not be reached/);
    const model = await rc(p.dir, [...args, '--unchecked']);
    assert.equal(model.code, 0, model.stderr);
    assert.deepEqual(model.json.upstreams, ['http://127.0.0.1:9', 'http://127.0.0.1:9001']);
    const list = await rc(p.dir, ['model', 'list']);
    assert.equal(list.json.models.find((m: { name: string }) => m.name === 'llama').source, 'database');
    assert.equal((await rc(p.dir, ['model', 'remove', '--name', 'llama'])).code, 0);
    assert.equal(p.events.filter((e) => e.type === 'catalog.changed').length, before + 2);

    const accounts = await rc(p.dir, ['account', 'list']);
    assert.deepEqual(
      accounts.json.accounts.map((a: { email: string }) => a.email),
      ['cli@x.io', 'review@x.io'],
    );
  } finally {
    await p.close();
  }
});

test('rc bad input: clear message on stderr, non-zero exit, nothing printed on stdout', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-cli-bad-'));
  try {
    // A data dir with no platform is refused, and left without a database (the key it would print
    // would work nowhere); --init makes one. On PostgreSQL the platform is the database
    // RC_DATABASE_URL names, not a file the data dir may lack.
    if (!onPostgres) {
      const none = await rc(dir, ['account', 'create', '--email', 'x@x.io']);
      assert.equal(none.code, 1, none.stderr);
      assert.match(none.stderr, /no platform at .*--init/);
      assert.equal(existsSync(join(dir, 'platform.db')), false);
    }
    assert.equal((await rc(dir, ['account', 'list', '--init'])).code, 0);
    const cases: [string[], number, RegExp][] = [
      [['account', 'create'], 2, /--email is required/],
      [['account', 'create', '--email', 'x@x.io', '--credits', 'ten'], 2, /--credits must be a number/],
      [['account', 'create', '--email', 'not-an-email'], 2, /must be an e-mail address/],
      [['account', 'create', '--email', 'x@x.io', '--bogus'], 2, /Unknown option '--bogus'/],
      [['account', 'frobnicate'], 2, /unknown subcommand "frobnicate"/],
      [['account', 'verify', '--email', 'ghost@x.io'], 1, /No account with e-mail ghost@x.io/],
      [['coupon', 'create', '--credits=-3'], 2, /--credits must be positive/],
      [['coupon', 'create', '--credits', '0'], 2, /--credits must be positive/],
      [['image', 'disable', '--image', 'nope:1'], 1, /No image nope:1/],
      [['model', 'add', '--name', 'm'], 2, /--upstream is required/],
      [['model', 'add', '--name', 'm', '--upstream', 'ftp://x'], 2, /upstreams/],
      [['account', 'set-limits', '--email', 'x@x.io'], 2, /at least one of/],
    ];
    for (const [args, code, stderr] of cases) {
      const r = await rc(dir, args);
      assert.equal(r.code, code, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, stderr, args.join(' '));
      assert.equal(r.stdout, '', args.join(' '));
    }
    for (const args of [
      ['account', '--help'],
      ['account', 'create', '--help'],
      ['coupon', '--help'],
      ['image', 'add', '--help'],
      ['model', 'list', '--help'],
    ]) {
      const r = await rc(dir, args);
      assert.equal(r.code, 0, args.join(' '));
      assert.match(r.stdout, /^Usage: rc /, args.join(' '));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('rc --help names every subcommand of every operator group, as each group lists them', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-cli-help-'));
  try {
    const top = await rc(dir, ['--help']);
    assert.equal(top.code, 0, top.stderr);
    for (const group of ['account', 'coupon', 'image', 'model', 'host']) {
      const help = await rc(dir, [group, '--help']);
      const subs = [...help.stdout.split('Subcommands:\n')[1]!.matchAll(/^ {2}(\S+)/gm)].map((m) => m[1]!);
      assert.ok(subs.length >= 2, help.stdout);
      const line = top.stdout.split('\n').find((l) => l.startsWith(`  ${group} `));
      assert.ok(line, `rc --help lists ${group}:\n${top.stdout}`);
      for (const sub of subs) assert.match(line, new RegExp(`[(, ]${sub}[,)]`), `rc --help names ${group} ${sub}`);
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('rc with no platform running writes the database directly (and ignores a stale runtime file)', async () => {
  const p = await startPlatform();
  const dir = p.dir;
  const runtime = join(dir, RUNTIME_FILE);
  const stale = (await import('node:fs')).readFileSync(runtime, 'utf8');
  await p.cp.close(); // the platform stops; leave a stale runtime file behind as a crash would
  (await import('node:fs')).writeFileSync(runtime, stale);
  try {
    const r = await rc(dir, ['account', 'create', '--email', 'offline@x.io', '--verified']);
    assert.equal(r.code, 0, r.stderr);
    const store = await Store.open({ dataDir: dir });
    try {
      assert.equal((await store.accounts.byEmail('offline@x.io'))?.verified, true);
      assert.equal(await store.keys.current(r.json.id), r.json.api_token);
    } finally {
      await store.close();
    }
    // A platform started later on the same data dir accepts that key.
    const again = await startPlatform({ dataDir: dir });
    try {
      assert.equal((await again.call('GET', '/api/me', { key: r.json.api_token })).status, 200);
    } finally {
      await again.cp.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('rc without a platform but with REDIS_URL: key events reach gateways over Redis, on its prefix only', async (t) => {
  if (!(await redisAvailable(t))) return;
  const dir = mkdtempSync(join(tmpdir(), 'rc-cli-redis-'));
  const prefix = `rc-test-cli-${randomBytes(4).toString('hex')}:`;
  // This platform's gateways listen on its prefix's channel; another platform on the same Redis
  // under another prefix must hear nothing of it.
  const bus = new RedisBus(REDIS_URL, busChannel(prefix));
  const other = new RedisBus(REDIS_URL, busChannel(`${prefix}other:`));
  const events: BusEvent[] = [];
  const heardByOther: BusEvent[] = [];
  bus.subscribe((e) => events.push(e));
  other.subscribe((e) => heardByOther.push(e));
  try {
    await Promise.all([bus.whenReady(), other.whenReady()]);
    const email = `redis-${process.pid}-${Date.now()}@x.io`;
    const r = await rc(dir, ['account', 'create', '--email', email, '--verified', '--init'], { REDIS_URL, RC_GATE_KEY_PREFIX: prefix });
    assert.equal(r.code, 0, r.stderr);
    const hash = hashKey(r.json.api_token);
    await waitFor(() => events.some((e) => e.type === 'key.issued' && e.keyHash === hash));
    // Both subscriptions read from one Redis: once the other prefix hears its own marker, published
    // after the key's event, it would have heard the key's too.
    await other.publish({ type: 'catalog.changed' });
    await waitFor(() => heardByOther.length > 0);
    assert.deepEqual(heardByOther, [{ type: 'catalog.changed' }]);
  } finally {
    await Promise.all([bus.close(), other.close()]);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('rc operator accounts: create --operator, set-operator, reject, disable; audited as the admin token or the CLI on the database', async () => {
  const p = await startPlatform();
  try {
    const op = await rc(p.dir, ['account', 'create', '--email', 'op@x.io', '--verified', '--operator', '--password', 'op-password']);
    assert.equal(op.code, 0, op.stderr);
    const login = await p.call('POST', '/api/auth/login', { body: { email: 'op@x.io', password: 'op-password' } });
    assert.equal(login.body.operator, true);
    await rc(p.dir, ['account', 'create', '--email', 'two@x.io', '--verified', '--password', 'two-password']);
    const set = await rc(p.dir, ['account', 'set-operator', '--email', 'two@x.io']);
    assert.equal(set.json.is_operator, true);
    assert.equal((await rc(p.dir, ['account', 'set-operator', '--email', 'two@x.io', '--off'])).json.is_operator, false);
    await rc(p.dir, ['account', 'create', '--email', 'new@x.io', '--password', 'new-password']);
    assert.equal((await rc(p.dir, ['account', 'reject', '--email', 'new@x.io'])).json.disabled, true);
    assert.equal((await p.call('POST', '/api/auth/login', { body: { email: 'new@x.io', password: 'new-password' } })).status, 403);
    assert.equal((await rc(p.dir, ['account', 'disable', '--email', 'new@x.io', '--enable'])).json.disabled, false);
    assert.equal((await rc(p.dir, ['account', 'set-operator'])).code, 2);
    const audit = (await p.cp.store.audit.page(10)).entries.map((e) => [e.actor, e.action, e.target]);
    assert.deepEqual(audit[0], ['admin-token', 'account.disable', 'new@x.io']);
    assert.ok(audit.some(([, action, target]) => action === 'account.set-operator' && target === 'two@x.io'));
  } finally {
    await p.close();
  }
  // Without a running platform the CLI writes the database itself: audited as such.
  const dir = mkdtempSync(join(tmpdir(), 'rc-cli-operator-'));
  try {
    assert.equal((await rc(dir, ['account', 'create', '--email', 'db@x.io', '--operator', '--init'])).json.email, 'db@x.io');
    const store = await Store.open({ dataDir: dir });
    try {
      assert.equal((await store.accounts.byEmail('db@x.io'))!.isOperator, true);
      assert.deepEqual(
        (await store.audit.page(1)).entries.map((e) => [e.actor, e.action]),
        [['cli (database)', 'account.create']],
      );
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
