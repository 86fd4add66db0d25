// Control planes on one database (issue 43): what one of them hands out, another honours. Two
// stores on one database, as two control plane processes have (SQLite: one data dir; PostgreSQL:
// one schema, two pools): a session made through one is found through the other (its CSRF token
// derives from the session token, no per-process key), a hand-over ticket minted on one is
// redeemed on the other exactly once, a proxy cookie MACed by one is accepted by the other; and a
// control plane whose seal key is not the database's refuses to start.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { csrfTokenFor } from '../../control-plane/accounts.js';
import { ProxyCookies, ProxyTickets } from '../../control-plane/proxy/handover.js';
import { SealKeyMismatchError, Store } from '../../control-plane/store.js';
import { hashKey } from '../../lib/keys.js';
import { freshDatabase, postgresAvailable } from '../postgres.js';

interface Replicas {
  a: Store;
  b: Store;
  /** Opens one more store on the same database with `sealKey`. */
  another(sealKey: Buffer): Promise<Store>;
}

async function replicas(t: TestContext, engine: 'sqlite' | 'postgres'): Promise<Replicas | undefined> {
  const opened: Store[] = [];
  t.after(async () => {
    for (const s of opened) await s.close();
  });
  const keep = (s: Store) => {
    opened.push(s);
    return s;
  };
  if (engine === 'postgres') {
    if (!(await postgresAvailable(t))) return undefined;
    const url = await freshDatabase(t);
    const key = randomBytes(32); // every replica's copy of one seal.key
    return {
      a: keep(await Store.open({ databaseUrl: url, sealKey: key })),
      b: keep(await Store.open({ databaseUrl: url, sealKey: Buffer.from(key) })),
      another: async (sealKey) => keep(await Store.open({ databaseUrl: url, sealKey })),
    };
  }
  const dir = mkdtempSync(join(tmpdir(), 'rc-replicas-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return {
    a: keep(await Store.open({ dataDir: dir })),
    b: keep(await Store.open({ dataDir: dir })),
    another: async (sealKey) => keep(await Store.open({ dataDir: dir, sealKey })),
  };
}

for (const engine of ['sqlite', 'postgres'] as const) {
  test(`${engine}: a session, a hand-over ticket and a proxy cookie from one control plane work on another; a ticket works once`, async (t) => {
    const r = await replicas(t, engine);
    if (!r) return;
    const account = await r.a.accounts.create({ email: `replica-${engine}@example.com`, verified: true });
    const session = await r.a.sessions.create(account.id, 3_600_000);
    const found = await r.b.sessions.lookup(session.token);
    assert.equal(found?.accountId, account.id, 'the session, through the other control plane');
    assert.equal(csrfTokenFor(session.token), session.csrfToken, 'CSRF derives from the session: any control plane checks it');

    const ticket = await new ProxyTickets(r.a).mint('inst-a', hashKey(session.token));
    const grant = await new ProxyTickets(r.b).redeem(ticket);
    assert.deepEqual({ instanceId: grant?.instanceId, sessionHash: grant?.sessionHash }, { instanceId: 'inst-a', sessionHash: hashKey(session.token) });
    assert.equal(await new ProxyTickets(r.a).redeem(ticket), undefined, 'once, whichever control plane asks again');
    assert.equal(await new ProxyTickets(r.b).redeem('forged'), undefined);

    const cookie = new ProxyCookies(r.a.sealKey).value('inst-a', hashKey(session.token));
    assert.equal(new ProxyCookies(r.b.sealKey).sessionHashOf('inst-a', cookie), hashKey(session.token));
    assert.equal(new ProxyCookies(r.b.sealKey).sessionHashOf('inst-b', cookie), undefined, 'made for another instance');
    assert.equal(new ProxyCookies(randomBytes(32)).sessionHashOf('inst-a', cookie), undefined, 'another platform’s key');
  });

  test(`${engine}: a control plane whose seal key is not the database's refuses to start, saying which file to copy`, async (t) => {
    const r = await replicas(t, engine);
    if (!r) return;
    await assert.rejects(r.another(randomBytes(32)), (err: unknown) => err instanceof SealKeyMismatchError && /copy seal\.key/.test((err as Error).message));
    assert.ok(await r.another(Buffer.from(r.a.sealKey)), 'the same key opens it');
  });
}
