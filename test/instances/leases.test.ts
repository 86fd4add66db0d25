// Background work on one control plane at a time (issue 43, control-plane/leases.ts and
// work-lease.ts): a lease with a fencing token, taken or renewed before each run, taken over only
// once expired; a holder that was paused past it writes nothing. On SQLite (the data dir's file,
// two stores on it as two processes would have) and on PostgreSQL (two stores on one schema: two
// replicas' pools), then billing through the real tick with a fake clock.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type TestContext, test } from 'node:test';
import { FakeClock } from '../../lib/clock.js';
import { Store } from '../../control-plane/store.js';
import { LeaseLostError, WorkLease } from '../../control-plane/work-lease.js';
import { freshDatabase, postgresAvailable } from '../postgres.js';
import { startPlatform, startTestAgent, waitStatus } from './harness.js';

const TTL = 10_000;

/** Two stores on one database, as two control planes have. */
async function twoStores(t: TestContext, engine: 'sqlite' | 'postgres', clock: FakeClock): Promise<[Store, Store] | undefined> {
  if (engine === 'postgres') {
    if (!(await postgresAvailable(t))) return undefined;
    const url = await freshDatabase(t);
    const sealKey = randomBytes(32); // replicas share one seal.key
    const stores: [Store, Store] = [await Store.open({ databaseUrl: url, clock, sealKey }), await Store.open({ databaseUrl: url, clock, sealKey })];
    t.after(() => Promise.all(stores.map((s) => s.close())));
    return stores;
  }
  const dir = mkdtempSync(join(tmpdir(), 'rc-lease-'));
  const stores: [Store, Store] = [await Store.open({ dataDir: dir, clock }), await Store.open({ dataDir: dir, clock })];
  t.after(async () => {
    for (const s of stores) await s.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return stores;
}

for (const engine of ['sqlite', 'postgres'] as const) {
  test(`${engine}: one holder at a time; taken over only once expired, with the next token; the paused holder's guarded write is refused`, async (t) => {
    const clock = new FakeClock();
    const stores = await twoStores(t, engine, clock);
    if (!stores) return;
    const a = new WorkLease(stores[0], 'background', TTL, clock, 'replica-a');
    const b = new WorkLease(stores[1], 'background', TTL, clock, 'replica-b');
    assert.equal(await a.acquire(), true);
    assert.equal(await b.acquire(), false, 'held by a');
    clock.advance(TTL - 1);
    assert.equal(await a.acquire(), true, 'a renews before it expires');
    clock.advance(TTL - 1);
    assert.equal(await b.acquire(), false, 'renewed: still a’s');
    // a pauses past its lease; b takes it over.
    clock.advance(2);
    assert.equal(await b.acquire(), true);
    assert.equal(await stores[0].leases.take('background', 'replica-c', clock.now(), TTL), undefined, 'one holder');
    const row = await stores[1].sql.prepare<[], { holder: string; token: number }>("SELECT holder, token FROM leases WHERE name = 'background'").get();
    assert.deepEqual({ ...row }, { holder: 'replica-b', token: 2 });
    // a wakes: what it checks now finds the lease gone, inside a transaction and out of one.
    assert.equal(await a.stillHeld(), false);
    await assert.rejects(
      stores[0].transaction(async (tx) => {
        await a.guard(tx);
        await tx.ledger.append({ accountId: 1, kind: 'grant', credits: 1, idempotencyKey: 'late-write' });
      }),
      LeaseLostError,
    );
    assert.equal(await a.acquire(), false, 'b holds it, unexpired');
    // Leases are per job.
    assert.equal(await new WorkLease(stores[0], 'usage-rollup', TTL, clock, 'replica-a').acquire(), true);
  });
}

test('billing runs on the lease holder only: held elsewhere, nothing is billed; once that lease expires, this control plane bills every period exactly once', async (t) => {
  const HOUR = 3_600_000;
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, {
    agents: [agent.config],
    clock,
    settings: {
      instanceTickMs: 24 * HOUR,
      instanceLeaseMs: 60_000,
      instanceCreditsPerGpuHour: 3,
      instanceBillingPeriodSec: 60,
      instanceIdleTimeoutSec: 86_400,
    },
  });
  const me = await p.account('lease@example.com', { credits: 100 });
  const r = await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: 1 } });
  await waitStatus(p, me.key, 'ready');
  const usage = async () => (await p.store.ledger.entries(me.id)).filter((e) => e.kind === 'instance_usage');

  await p.instances.service.tick(); // this control plane takes the lease (token 1); nothing is due yet
  // This one pauses past its lease; another control plane takes it and renews it.
  clock.advance(60_001);
  assert.equal(await p.store.leases.take('background', 'other-replica', clock.now(), 60_000), 2, 'the next token');
  clock.advance(30 * 60_000 + 500);
  assert.equal(await p.store.leases.take('background', 'other-replica', clock.now(), 60_000), 2, 'renewed: the same token');
  await p.instances.service.tick();
  assert.equal((await usage()).length, 0, 'not this control plane’s to bill');

  // The other control plane is gone: its lease expires, this one takes over and bills every period once.
  clock.advance(60_001);
  await p.instances.service.tick();
  await p.instances.service.tick();
  const entries = await usage();
  const readyAt = (await p.store.instances.get(r.body.instance_id))!.ready_at!;
  assert.equal(entries.length, Math.floor((clock.now() - readyAt) / 60_000), 'every complete period since ready');
  assert.equal(new Set(entries.map((e) => e.idempotencyKey)).size, entries.length, 'each period once');
  assert.ok(entries.every((e) => e.ref === r.body.instance_id));
  assert.ok(Math.abs((await p.store.ledger.balance(me.id)) - (100 - entries.reduce((s, e) => s - e.credits, 0))) < 1e-9);
});

test('placement runs on the lease holder only: a launch where another control plane holds the lease waits in the queue; once that lease expires, this one places it', async (t) => {
  const clock = new FakeClock();
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config], clock, settings: { instanceTickMs: 86_400_000, instanceLeaseMs: 60_000 } });
  const me = await p.account('queue@example.com', { credits: 100 });
  // (This control plane may have taken the lease already, placing when its agent connected: let it lapse.)
  clock.advance(60_001);
  assert.notEqual(await p.store.leases.take('background', 'other-replica', clock.now(), 60_000), undefined, 'another control plane holds it');
  const r = await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: 1 } });
  assert.equal(r.status, 200);
  await new Promise((resolve) => setTimeout(resolve, 300)); // time for a placement that should not happen
  const row = (await p.store.instances.get(r.body.instance_id))!;
  assert.equal(row.agent_id, null, 'not placed by this control plane');
  clock.advance(60_001);
  await p.instances.service.tick();
  await waitStatus(p, me.key, 'ready');
});
