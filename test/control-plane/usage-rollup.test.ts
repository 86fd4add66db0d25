// The shared models' daily roll-up (issue 32): the job copies the gates' usage per day, account
// and model into model_usage_days; copies are idempotent, survive a restart (a real SQLite file, a
// new gate that forgot everything), and the operator's 30-day view reads days the gates no longer
// keep from the table.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { FakeClock } from '../../lib/clock.js';
import type { LimitGate } from '../../gateway/gates/index.js';
import { openDatabase } from '../../control-plane/db.js';
import { operatorUsage } from '../../control-plane/operator/usage.js';
import { GATE_KEEP_DAYS, UsageRollup } from '../../control-plane/operator/usage-rollup.js';
import { Store } from '../../control-plane/store.js';
import { admitted, makeGate } from '../gateway/gates/fixtures.js';

const DAY_MS = 86_400_000;
const LIMITS = { rpm: 1000, tpm: 1_000_000, daily: 10_000_000 };

async function use(gate: LimitGate, accountId: number, model: string, inputTokens: number, outputTokens: number): Promise<void> {
  const req = { accountId, model, estimatedTokens: inputTokens + outputTokens, inputTokens };
  gate.settle(req, admitted(await gate.admit(req)), { inputTokens, outputTokens });
}

async function memoryGate(t: TestContext, clock: FakeClock): Promise<LimitGate> {
  return (await makeGate(t, 'memory', LIMITS, clock))!.gate;
}

const rollupOf = (store: Store, gate: LimitGate) => new UsageRollup({ store, read: (id, day) => gate.readUsage(id, day) });
const table = (store: Store) =>
  store.sql.prepare('SELECT day, account_id, model, requests, input_tokens, output_tokens FROM model_usage_days ORDER BY day, account_id, model').all();

test('usage roll-up: idempotent copies of two days, kept across a restart, read by the 30-day view', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-usage-rollup-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const clock = new FakeClock(Date.UTC(2026, 0, 1, 12));
  let store = await Store.open({ dataDir: dir, clock });
  const a = (await store.accounts.create({ email: 'a@x.io' })).id;
  const b = (await store.accounts.create({ email: 'b@x.io' })).id;
  let gate = await memoryGate(t, clock);
  await use(gate, a, 'sim-chat', 100, 50);
  clock.advance(DAY_MS);
  await use(gate, a, 'sim-chat', 10, 5);
  await use(gate, b, 'sim-code', 20, 20);

  await rollupOf(store, gate).run(); // the start's backfill: both days
  const expected = [
    { day: '2026-01-01', account_id: a, model: 'sim-chat', requests: 1, input_tokens: 100, output_tokens: 50 },
    { day: '2026-01-02', account_id: a, model: 'sim-chat', requests: 1, input_tokens: 10, output_tokens: 5 },
    { day: '2026-01-02', account_id: b, model: 'sim-code', requests: 1, input_tokens: 20, output_tokens: 20 },
  ];
  assert.deepEqual(await table(store), expected);
  const again = rollupOf(store, gate);
  await again.run();
  await again.run(); // today only
  assert.deepEqual(await table(store), expected, 'copies are idempotent');

  // Restart: the database file stays, the memory gate forgets; its zeros erase nothing.
  await store.close();
  store = await Store.open({ dataDir: dir, clock });
  t.after(() => store.close());
  gate = await memoryGate(t, clock);
  const rollup = rollupOf(store, gate);
  await rollup.run();
  assert.deepEqual(await table(store), expected, 'a gate that forgot its days leaves the table as it was');

  // Ten days later (the gates keep 8): the 30-day view has both days from the table.
  clock.advance(10 * DAY_MS);
  await use(gate, b, 'sim-chat', 1, 1);
  await rollup.run();
  const u = await operatorUsage(store, store.operatorReads, (id, day) => gate.readUsage(id, day));
  const sm = u.shared_models!;
  assert.equal(sm.by_day.length, 30);
  const day = (d: string) => sm.by_day.find((r) => r.day === d);
  assert.deepEqual(day('2026-01-01'), { day: '2026-01-01', tokens: 150, requests: 1, by_model: { 'sim-chat': 150 } });
  assert.deepEqual(day('2026-01-02'), { day: '2026-01-02', tokens: 55, requests: 2, by_model: { 'sim-chat': 15, 'sim-code': 40 } });
  assert.deepEqual(day('2026-01-12'), { day: '2026-01-12', tokens: 2, requests: 1, by_model: { 'sim-chat': 2 } });
  assert.deepEqual(sm.top_accounts, [
    { account_id: a, email: 'a@x.io', tokens: 165, requests: 2 },
    { account_id: b, email: 'b@x.io', tokens: 42, requests: 2 },
  ]);
  assert.equal(sm.today.by_hour[12]!.tokens, 2, "today's hours come from the gates");
});

test('usage roll-up: the days each run copies', async () => {
  const clock = new FakeClock(Date.UTC(2026, 0, 10, 12));
  const store = await Store.open({ db: openDatabase(':memory:'), clock, seed: false });
  const rollup = new UsageRollup({ store, read: () => ({ by_model: {} }) });
  const day = (ms: number) => Math.floor(ms / DAY_MS);
  const jan = (d: number, h = 0, m = 0) => Date.UTC(2026, 0, d, h, m);
  assert.deepEqual(
    rollup.daysDue(clock.now()),
    Array.from({ length: GATE_KEEP_DAYS }, (_, i) => day(jan(3)) + i),
    'the backfill',
  );
  await rollup.run();
  assert.deepEqual(rollup.daysDue(jan(10, 12, 10)), [day(jan(10))], 'today');
  clock.set(jan(11, 0, 5));
  assert.deepEqual(rollup.daysDue(clock.now()), [day(jan(10)), day(jan(11))], 'yesterday finished, and today');
  await rollup.run();
  assert.deepEqual(rollup.daysDue(jan(11, 0, 20)), [day(jan(10)), day(jan(11))], 'yesterday again in the first hour');
  assert.deepEqual(rollup.daysDue(jan(11, 1, 30)), [day(jan(11))]);
  await store.close();
});
