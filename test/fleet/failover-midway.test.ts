// Control planes on one PostgreSQL, killed half-way through a launch or a destroy (issue 43), as
// real processes: two `rc control-plane`s A and B and one `rc agent` (process runtime, one GPU).
// A holds the background lease (placement, the tick, billing) and is SIGKILLed:
//   - after it accepted a launch it could not place yet (the GPU busy): B places it once the GPU frees;
//   - after its placing transaction, before its start call (the row written as placement writes it:
//     no signal can aim at that gap): B finds the host lacks it and sends the start;
//   - with its start call on its way (the agent SIGSTOPped meanwhile) and the instance starting;
//   - after its destroy transaction, before the agent was told (the agent SIGSTOPped meanwhile).
// Each ends with the instance ready (and running on the agent, once) or stopped (and no process of
// it left on the agent), billed exactly from ready to its end, every period once, nothing after.
import assert from 'node:assert/strict';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { createAgentClient } from '../../agent/client.js';
import { pendingCharges, MICROS_PER_CREDIT } from '../../control-plane/instances/billing.js';
import { buildSpec } from '../../control-plane/instances/launch-spec.js';
import { snapshotOf, type InstanceRow } from '../../control-plane/instances/store.js';
import { Store } from '../../control-plane/store.js';
import { instanceGroups } from '../agent/harness.js';
import { waitFor } from '../helpers.js';
import { simCommand } from '../instances/harness.js';
import { freshDatabase, postgresAvailable } from '../postgres.js';
import { admin, call, controlPlaneEnv, spawnOneGpuAgent, type RcProcess, spawnRc, tempDir } from './harness.js';

const TICK_MS = 200;
/** Generous bound on anything a live control plane does after the lease changed hands. */
const SETTLE_MS = 30_000;

interface Fleet {
  a: RcProcess;
  b: RcProcess;
  agent: RcProcess;
  store: Store;
  leaseMs: number;
  /** An account with credits, its key, and a template of its own running `startCommand`. */
  account(email: string, startCommand?: string): Promise<{ id: number; key: string; template: number }>;
  /** The pid in the background lease's holder. */
  holderPid(): Promise<number>;
  /** The instance as the agent lists it (undefined when it has none). */
  onAgent(id: string): Promise<{ state: string } | undefined>;
  /** Live process groups of the instance on the agent. */
  groups(id: string): number[];
  /** The account's instance status through `p` (the platform API). */
  status(p: RcProcess, key: string): Promise<{ status: string; reason: string | null; instance_id: string; placed_at: string | null }>;
  row(id: string): Promise<InstanceRow>;
}

/** A (started first, so it holds the background lease), the agent registered through A, then B; both connected to the agent. */
async function startFleet(t: TestContext, leaseMs: number): Promise<Fleet | undefined> {
  if (!(await postgresAvailable(t))) return undefined;
  const url = await freshDatabase(t);
  const dirs = [tempDir(t, 'rc-midway-a-'), tempDir(t, 'rc-midway-b-')];
  const env = (dir: string) =>
    controlPlaneEnv(url, dir, {
      // The same tunnel secret on both (README "Several control planes"): a start resent by B is the spec A would have sent.
      RC_TUNNEL_SECRET: 'midway-tunnel-secret-0123456789',
      RC_INSTANCE_TICK_MS: String(TICK_MS),
      RC_INSTANCE_LEASE_MS: String(leaseMs),
      RC_INSTANCE_BILLING_PERIOD_SEC: '1',
      RC_INSTANCE_IDLE_TIMEOUT_SEC: '86400',
    });
  const a = await spawnRc(t, ['control-plane'], env(dirs[0]!));
  const store = await Store.open({ databaseUrl: url, dataDir: dirs[0], seed: false }); // the test's own view of the database
  t.after(() => store.close());
  const holderPid = async () =>
    Number((await store.sql.prepare<[], { holder: string }>("SELECT holder FROM leases WHERE name = 'background'").get())?.holder.split('/')[1]);
  await waitFor(async () => (await holderPid()) === a.child.pid, SETTLE_MS, 50);

  const { agent, token } = await spawnOneGpuAgent(t, 'rc-midway-agent-');
  t.after(() => agent.child.kill('SIGCONT')); // a test that failed while the agent was stopped
  assert.equal((await admin(a.ready.api, dirs[0]!, 'host.add', { name: 'gpu-1', address: agent.ready.address, token })).status, 200);
  copyFileSync(join(dirs[0]!, 'seal.key'), join(dirs[1]!, 'seal.key'));
  const b = await spawnRc(t, ['control-plane'], env(dirs[1]!));
  const connected = async (p: RcProcess, dir: string) =>
    (await admin(p.ready.api, dir, 'host.list')).body.hosts.find((h: { name: string }) => h.name === 'gpu-1')?.state === 'connected';
  await waitFor(async () => (await connected(a, dirs[0]!)) && (await connected(b, dirs[1]!)), SETTLE_MS, 100);

  const client = createAgentClient({ address: agent.ready.address, token });
  t.after(() => client.close());
  return {
    a,
    b,
    agent,
    store,
    leaseMs,
    holderPid,
    async account(email, startCommand = simCommand()) {
      const acct = (await admin(a.ready.api, dirs[0]!, 'account.create', { email, verified: true, credits: 1000 })).body;
      const key = acct.api_token as string;
      const body = { title: 'sim', image: 'vllm/vllm-openai:latest', instance_type: 'vllm', app_port: 8000, start_command: startCommand };
      const template = (await call(`${a.ready.api}/api/profile/templates`, { key, body })).body;
      assert.ok(template.id, JSON.stringify(template));
      return { id: acct.id as number, key, template: template.id as number };
    },
    async onAgent(id) {
      return (await client.list()).find((i) => i.instanceId === id);
    },
    groups: (id) => instanceGroups(agent.ready.agentId, id),
    async status(p, key) {
      return (await call(`${p.ready.api}/api/notebook/status`, { key })).body;
    },
    async row(id) {
      return (await store.instances.get(id))!;
    },
  };
}

/** Waits until the account's instance (seen through `p`) is in one of `states`; its status. */
async function until(f: Fleet, p: RcProcess, key: string, states: string[]): Promise<Awaited<ReturnType<Fleet['status']>>> {
  let last: Awaited<ReturnType<Fleet['status']>> | undefined;
  await waitFor(
    async () => {
      last = await f.status(p, key);
      return states.includes(last.status);
    },
    SETTLE_MS + f.leaseMs,
    100,
  ).catch((err: Error) => {
    throw new Error(`${err.message}: waiting for ${states.join('|')}, last ${JSON.stringify(last)}; B's log: ${p.stderr().slice(-3000)}`);
  });
  return last!;
}

/** Ready through B and running on the agent as one process group. */
async function assertRunning(f: Fleet, key: string): Promise<string> {
  const s = await until(f, f.b, key, ['ready', 'failed', 'stopped']);
  assert.equal(s.status, 'ready', `the instance ended instead of becoming ready: ${JSON.stringify(s)}`);
  assert.equal((await f.onAgent(s.instance_id))?.state, 'ready', 'the agent runs it');
  assert.equal(f.groups(s.instance_id).length, 1, 'one process group of it on the agent');
  return s.instance_id;
}

/** Stopped through B, nothing of it on the agent: not listed, no process left. */
async function assertGone(f: Fleet, id: string, key: string): Promise<void> {
  await until(f, f.b, key, ['stopped']);
  await waitFor(async () => (await f.onAgent(id)) === undefined && f.groups(id).length === 0, SETTLE_MS, 100).catch(() => {
    throw new Error(`instance ${id} stopped in the database but still on the agent: ${JSON.stringify(f.groups(id))}`);
  });
}

/** B bills it; destroyed through B it stops, nothing of it left, billed from ready to the stop. */
async function assertBilledAndDestroyedThroughB(f: Fleet, acct: { id: number; key: string }, id: string): Promise<void> {
  await waitFor(async () => (await f.row(id)).billed_periods >= 2, SETTLE_MS, 100);
  assert.equal((await call(`${f.b.ready.api}/api/notebook/current`, { method: 'DELETE', key: acct.key })).status, 200);
  await assertGone(f, id, acct.key);
  await assertBilledToTheEnd(f, acct.id, id);
}

/**
 * Billed exactly from ready to its end: the usage entries are the periods billing.ts computes for
 * [ready_at, ended_at], each once, with their amounts; and still that after the lease holder ran
 * three more ticks (its lease renewals move expires_at on), so nothing is billed after the end.
 */
async function assertBilledToTheEnd(f: Fleet, accountId: number, id: string): Promise<void> {
  const usage = async () =>
    (await f.store.ledger.entries(accountId))
      .filter((e) => e.kind === 'instance_usage' && e.ref === id)
      .map((e) => ({ period: Number(e.idempotencyKey.split(':')[2]), micros: Math.round(-e.credits * MICROS_PER_CREDIT) }))
      .sort((x, y) => x.period - y.period);
  const r = await f.row(id);
  assert.ok(r.ready_at !== null && r.ended_at !== null, 'it was ready and has ended');
  const due = pendingCharges({ placedAt: r.ready_at, periodMs: r.period_ms, microsPerHour: r.micros_per_hour, billedPeriods: 0 }, r.ended_at, true);
  assert.ok(due.charges.length >= 2, 'it ran for more than one period');
  assert.deepEqual(await usage(), due.charges, 'every period from ready to the end, once, with its amount');
  const expiresAt = async () =>
    Number((await f.store.sql.prepare<[], { expires_at: number }>("SELECT expires_at FROM leases WHERE name = 'background'").get())!.expires_at);
  const seen = await expiresAt();
  await waitFor(async () => (await expiresAt()) >= seen + 3 * TICK_MS, SETTLE_MS, 100);
  assert.deepEqual(await usage(), due.charges, 'nothing billed after the end');
}

test('SIGKILL the lease holder after it accepted a launch it could not place yet: the other places it once the GPU frees', { timeout: 180_000 }, async (t) => {
  const f = await startFleet(t, 2_000);
  if (!f) return;
  const first = await f.account('first@example.com');
  const second = await f.account('second@example.com');
  assert.equal((await call(`${f.a.ready.api}/api/templates/${first.template}/launch`, { key: first.key, body: {} })).status, 200);
  const firstId = await assertRunning(f, first.key);

  // The one GPU is taken: A accepts the second launch and queues it.
  const queued = await call(`${f.a.ready.api}/api/templates/${second.template}/launch`, { key: second.key, body: {} });
  assert.equal(queued.status, 200, JSON.stringify(queued.body));
  assert.equal(queued.body.status, 'pending');
  assert.equal(queued.body.placed_at, null, 'queued, not placed');
  assert.equal(await f.holderPid(), f.a.child.pid, 'A holds the lease when it is killed');
  f.a.child.kill('SIGKILL');

  // Through B: the first is destroyed (B is connected to the agent, so it removes it at once); once
  // A's lease has expired B holds it, places the second on the freed GPU and starts it.
  assert.equal((await call(`${f.b.ready.api}/api/notebook/current`, { method: 'DELETE', key: first.key })).status, 200);
  await assertGone(f, firstId, first.key);
  const secondId = await assertRunning(f, second.key);
  assert.equal(secondId, queued.body.instance_id);
  assert.equal(await f.holderPid(), f.b.child.pid, 'B took the lease over');
  assert.equal((await f.row(secondId)).agent_id, 'gpu-1');
});

test('SIGKILL the lease holder between its placing transaction and its start call: the other finds the host lacks it and starts it', {
  timeout: 180_000,
}, async (t) => {
  // A longer lease: the test writes A's placement while A's lease still runs (as A would have).
  const f = await startFleet(t, 6_000);
  if (!f) return;
  const acct = await f.account('placed@example.com');
  const holder = (await f.store.sql.prepare<[], { holder: string }>("SELECT holder FROM leases WHERE name = 'background'").get())!.holder;
  assert.equal(Number(holder.split('/')[1]), f.a.child.pid, 'A holds the lease');
  f.a.child.kill('SIGKILL');
  // Launched through B while A's lease runs: B may not place (placement is the lease holder's), so it queues.
  const launched = await call(`${f.b.ready.api}/api/templates/${acct.template}/launch`, { key: acct.key, body: {} });
  assert.equal(launched.status, 200, JSON.stringify(launched.body));
  assert.equal(launched.body.placed_at, null);
  // What A leaves when it dies just after placing: the row placed on gpu-1 with its spec (the
  // columns placement.ts writes), the start never sent. Only while A's lease still runs, as A
  // could only have placed it then; a B that took the lease first would have placed it itself.
  const r = await f.row(launched.body.instance_id);
  const now = Date.now();
  const placed = await f.store.sql
    .prepare(
      "UPDATE instances SET message = 'starting', agent_id = 'gpu-1', spec = ?, placed_at = ?, expires_at = ?, updated_at = ? " +
        "WHERE id = ? AND state = 'pending' AND agent_id IS NULL " +
        "AND EXISTS (SELECT 1 FROM leases WHERE name = 'background' AND holder = ? AND expires_at > ?)",
    )
    .run(JSON.stringify(buildSpec(r, snapshotOf(r))), now, now + 86_400_000, now, r.id, holder, now);
  assert.equal(placed.changes, 1, 'placed as A while its lease ran (B had not taken it yet)');
  assert.equal(await f.onAgent(r.id), undefined, 'the agent never got the start');

  const id = await assertRunning(f, acct.key);
  assert.equal(id, r.id);
  assert.equal(await f.holderPid(), f.b.child.pid, 'B took the lease over');
  await assertBilledAndDestroyedThroughB(f, acct, id);
});

test('SIGKILL the lease holder mid-launch (its start on the way, the instance starting): it ends ready through the other, billed by it, and stops cleanly', {
  timeout: 180_000,
}, async (t) => {
  const f = await startFleet(t, 2_000);
  if (!f) return;
  // Starting for a while on the agent before the simulated server listens.
  const acct = await f.account('midlaunch@example.com', `sleep 2; exec ${simCommand()}`);
  // The agent stopped: A's start call waits in its socket; A dies with it on the way.
  f.agent.child.kill('SIGSTOP');
  const launched = await call(`${f.a.ready.api}/api/templates/${acct.template}/launch`, { key: acct.key, body: {} });
  assert.equal(launched.status, 200, JSON.stringify(launched.body));
  const id = launched.body.instance_id as string;
  await waitFor(async () => (await f.row(id)).agent_id === 'gpu-1', SETTLE_MS, 20); // placed by A
  f.a.child.kill('SIGKILL');
  f.agent.child.kill('SIGCONT');
  const s = await f.status(f.b, acct.key);
  assert.equal(s.status, 'pending', 'not ready when A died');

  // Whether the agent read A's start before A's socket closed or not: ready through B.
  assert.equal(await assertRunning(f, acct.key), id);
  assert.equal(await f.holderPid(), f.b.child.pid, 'B took the lease over');
  await assertBilledAndDestroyedThroughB(f, acct, id);
});

test('SIGKILL the lease holder mid-destroy (stopping, the agent not told yet): the other finishes it, nothing left on the agent, billing stopped at the destroy', {
  timeout: 180_000,
}, async (t) => {
  const f = await startFleet(t, 2_000);
  if (!f) return;
  const acct = await f.account('middestroy@example.com');
  assert.equal((await call(`${f.a.ready.api}/api/templates/${acct.template}/launch`, { key: acct.key, body: {} })).status, 200);
  const id = await assertRunning(f, acct.key);
  await waitFor(async () => (await f.row(id)).billed_periods >= 2, SETTLE_MS, 100); // A bills it

  // The agent stopped: A's destroy commits `stopping` (billed to that instant), then waits on the
  // agent (the log tail it saves first, then the remove); A dies there.
  f.agent.child.kill('SIGSTOP');
  const destroy = call(`${f.a.ready.api}/api/notebook/current`, { method: 'DELETE', key: acct.key }).catch((err: Error) => err);
  await waitFor(async () => (await f.row(id)).state === 'stopping', SETTLE_MS, 20);
  f.a.child.kill('SIGKILL');
  f.agent.child.kill('SIGCONT');
  assert.ok((await destroy) instanceof Error, 'A died before it answered the destroy');

  // B, once it holds the lease, removes what stays stopping.
  await assertGone(f, id, acct.key);
  assert.equal(await f.holderPid(), f.b.child.pid, 'B took the lease over');
  await assertBilledToTheEnd(f, acct.id, id);
});
