// Control planes on one PostgreSQL, as real processes (issue 43): an agent in the process runtime,
// an instance billed every second, launched through both at once (one is refused). The control plane holding the background lease is found by its
// pid in the lease row. SIGKILL it: the other takes the billing over within the lease time. A third
// joins; SIGSTOP the holder past its lease: the third takes over; SIGCONT: the woken one's late run
// writes nothing and it does not get the lease back while the third renews it. At the end the
// ledger holds every period once, in order, with the balance its sum. (A period's ledger entry and
// its mark are one transaction: there is no state between them for a kill to leave behind.)
import assert from 'node:assert/strict';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { Store } from '../../control-plane/store.js';
import { waitFor } from '../helpers.js';
import { freshDatabase, postgresAvailable } from '../postgres.js';
import { simCommand } from '../instances/harness.js';
import { admin, call, controlPlaneEnv, spawnOneGpuAgent, type RcProcess, spawnRc, tempDir } from './harness.js';

const LEASE_MS = 2_000;

test('two control planes on one PostgreSQL: launches through both at once give one instance; SIGKILL the one billing, the other bills on within the lease; SIGSTOP a holder past its lease, SIGCONT: its late run writes nothing; every period once', {
  timeout: 120_000,
}, async (t) => {
  if (!(await postgresAvailable(t))) return;
  const url = await freshDatabase(t);
  const dirs = [tempDir(t, 'rc-failover-a-'), tempDir(t, 'rc-failover-b-'), tempDir(t, 'rc-failover-c-')];
  const env = (dir: string) =>
    controlPlaneEnv(url, dir, {
      RC_INSTANCE_TICK_MS: '200',
      RC_INSTANCE_LEASE_MS: String(LEASE_MS),
      RC_INSTANCE_BILLING_PERIOD_SEC: '1',
      RC_INSTANCE_IDLE_TIMEOUT_SEC: '86400',
    });
  const a = await spawnRc(t, ['control-plane'], env(dirs[0]!));
  // Every control plane on one database shares the seal key (the others refuse to start without it).
  for (const d of dirs.slice(1)) copyFileSync(join(dirs[0]!, 'seal.key'), join(d, 'seal.key'));
  const b = await spawnRc(t, ['control-plane'], env(dirs[1]!));
  const parts: RcProcess[] = [a, b];
  const { agent, token } = await spawnOneGpuAgent(t, 'rc-failover-agent-');
  assert.equal((await admin(a.ready.api, dirs[0]!, 'host.add', { name: 'gpu-1', address: agent.ready.address, token })).status, 200);
  const acct = (await admin(a.ready.api, dirs[0]!, 'account.create', { email: 'failover@example.com', verified: true, credits: 1000 })).body;
  const key = acct.api_token as string;

  const store = await Store.open({ databaseUrl: url, dataDir: dirs[0], seed: false }); // the test's own view of the database
  t.after(() => store.close());
  const holderPid = async () =>
    Number((await store.sql.prepare<[], { holder: string }>("SELECT holder FROM leases WHERE name = 'background'").get())?.holder.split('/')[1]);
  const usage = async () => (await store.ledger.entries(acct.id)).filter((e) => e.kind === 'instance_usage');
  const byPid = (pid: number) => parts.find((p) => p.child.pid === pid)!;

  const template = (
    await call(`${b.ready.api}/api/profile/templates`, {
      key,
      body: { title: 'sim', image: 'vllm/vllm-openai:latest', instance_type: 'vllm', app_port: 8000, start_command: simCommand() },
    })
  ).body;
  // Launched through both at once: one active instance per account holds across control planes (a unique index).
  const launches = await Promise.all([a, b].map((p) => call(`${p.ready.api}/api/templates/${template.id}/launch`, { key, body: {} })));
  assert.deepEqual(launches.map((l) => l.status).sort(), [200, 400], JSON.stringify(launches.map((l) => l.body)));
  assert.equal(launches.find((l) => l.status === 400)!.body.detail, 'Each user can only have one active instance');
  await waitFor(async () => (await call(`${a.ready.api}/api/notebook/status`, { key })).body.status === 'ready', 30_000, 100);
  await waitFor(async () => (await usage()).length >= 2, 15_000, 100);

  // SIGKILL the control plane that bills.
  const first = byPid(await holderPid());
  assert.ok(first, 'the lease names one of the two by its pid');
  first.child.kill('SIGKILL');
  const survivor = parts.find((p) => p !== first)!;
  const atKill = (await usage()).length;
  await waitFor(async () => (await holderPid()) === survivor.child.pid, LEASE_MS + 5_000, 100);
  await waitFor(async () => (await usage()).length >= atKill + 2, 10_000, 100);

  // A third control plane joins; then SIGSTOP the holder past its lease: the third takes over.
  const c = await spawnRc(t, ['control-plane'], env(dirs[2]!));
  parts.push(c);
  survivor.child.kill('SIGSTOP');
  t.after(() => survivor.child.kill('SIGCONT'));
  await waitFor(async () => (await holderPid()) === c.child.pid, LEASE_MS + 5_000, 100);
  const beforeWake = (await usage()).length;
  survivor.child.kill('SIGCONT');
  await waitFor(async () => (await usage()).length >= beforeWake + 3, 10_000, 100);
  assert.equal(await holderPid(), c.child.pid, 'the woken one did not take the lease back');

  // Destroy through the woken one (its agent stream may not have survived the pause: the holder
  // removes what stays stopping); then the ledger: every period once, in order, the balance its sum.
  assert.equal((await call(`${survivor.ready.api}/api/notebook/current`, { method: 'DELETE', key })).status, 200);
  let last: unknown;
  await waitFor(
    async () => {
      last = (await call(`${c.ready.api}/api/notebook/status`, { key })).body;
      return ['stopped', 'none'].includes((last as { status: string }).status);
    },
    30_000,
    100,
  ).catch((err: Error) => {
    throw new Error(`${err.message}: ${JSON.stringify(last)}`);
  });
  const entries = await usage();
  const periods = entries.map((e) => Number(e.idempotencyKey!.split(':')[2])).sort((x, y) => x - y);
  assert.deepEqual(
    periods,
    periods.map((_, i) => i),
    'periods 0..n, each once',
  );
  const spent = entries.reduce((s, e) => s - e.credits, 0);
  assert.ok(Math.abs((await store.ledger.balance(acct.id)) - (1000 - spent)) < 1e-9, 'the balance is the ledger’s sum');
});
