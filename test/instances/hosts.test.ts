// The hosts registry end to end: real agents (process runtime) registered through the admin API
// while the platform runs, placement across them (pack, FIFO, drain), removal (refused while
// instances run, --force ends and bills them), and hosts dialled again after a restart.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { adminToken } from '../../control-plane/secrets.js';
import { waitFor } from '../helpers.js';
import { instanceGroups, startPlatform, startTestAgent, waitStatus, type Platform } from './harness.js';

/** POST /api/admin/<op> with the data dir's admin token (what `rc host ...` sends). */
async function admin(p: Platform, op: string, body: unknown, token = adminToken(p.dir)) {
  const r = await request(`${p.cp.url}/api/admin/${op}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-rc-admin-token': token },
    body: JSON.stringify(body),
  });
  return { status: r.statusCode, body: (await r.body.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function hostNamed(p: Platform, name: string) {
  return ((await admin(p, 'host.list', {})).body.hosts as { name: string }[]).find((h) => h.name === name) as any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function launch(p: Platform, email: string, gpus: number) {
  const me = await p.account(email, { credits: 50 });
  const r = await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: gpus } });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return { ...me, instanceId: r.body.instance_id as string };
}

test('hosts join while the platform runs; launches that do not fit on one land on the other; drain; remove', async (t) => {
  const a = await startTestAgent(t, { gpus: 2 });
  const b = await startTestAgent(t, { gpus: 4 });
  const p = await startPlatform(t);

  // Bad input and bad credentials: clear 4xx.
  assert.equal((await admin(p, 'host.add', { name: 'a', address: a.config.address, token: a.config.token }, 'wrong')).status, 401);
  for (const bad of [
    { name: 'a b', address: a.config.address, token: a.config.token },
    { name: 'a', address: 'no-port', token: a.config.token },
    { name: 'a', address: '10.0.0.1:70000', token: a.config.token },
    { name: 'a', address: a.config.address, token: 'short' },
    { name: 'a', address: a.config.address },
    { name: 'a', address: a.config.address, token: a.config.token, extra: 1 },
  ])
    assert.equal((await admin(p, 'host.add', bad)).status, 400, JSON.stringify(bad));
  assert.equal((await admin(p, 'host.drain', { name: 'nope' })).status, 404);
  assert.equal((await admin(p, 'host.remove', { name: 'nope' })).status, 404);

  const added = await admin(p, 'host.add', { name: 'a', address: a.config.address, token: a.config.token });
  assert.equal(added.status, 200);
  assert.equal(added.body.name, 'a');
  assert.equal((added.body as object as Record<string, unknown>).token, undefined, 'the token is never shown');
  await admin(p, 'host.add', { name: 'b', address: b.config.address, token: b.config.token });
  const listed = await waitFor(async () => {
    const hosts = (await admin(p, 'host.list', {})).body.hosts as { state: string }[];
    return hosts.length === 2 && hosts.every((h) => h.state === 'connected') ? hosts : undefined;
  });
  assert.deepEqual(
    listed.map((h: any) => [h.name, h.gpus_total, h.gpus_free]),
    [
      ['a', 2, 2],
      ['b', 4, 4],
    ],
  ); // eslint-disable-line @typescript-eslint/no-explicit-any

  // Pack: the first 2-GPU launch fills a (the fullest host that fits); the second does not fit there and lands on b.
  const one = await launch(p, 'one@example.com', 2);
  await waitStatus(p, one.key, 'ready');
  const two = await launch(p, 'two@example.com', 2);
  const twoReady = await waitStatus(p, two.key, 'ready');
  assert.equal((await p.instances.service.instances.get(one.instanceId))!.agent_id, 'a');
  assert.equal(twoReady.host, 'b');
  assert.equal(instanceGroups(b.handle.agentId, two.instanceId).length, 1);
  const hostA = await hostNamed(p, 'a');
  assert.equal(hostA.gpus_free, 0);
  assert.deepEqual(
    hostA.instances.map((i: { instance_id: string }) => i.instance_id),
    [one.instanceId],
  );

  // Drained: b gets no new placements (the launch waits), its instance keeps running; resumed: placed.
  const drained = await admin(p, 'host.drain', { name: 'b' });
  assert.equal(drained.body.state, 'draining');
  const three = await launch(p, 'three@example.com', 1);
  await new Promise((r) => setTimeout(r, 500)); // several ticks: nothing may place it
  const waiting = (await p.call('GET', '/api/notebook/status', { key: three.key })).body;
  assert.equal(waiting.message, 'waiting for capacity (position 1 in the queue)');
  assert.equal((await p.call('GET', '/api/notebook/status', { key: two.key })).body.status, 'ready');
  await admin(p, 'host.resume', { name: 'b' });
  assert.equal((await waitStatus(p, three.key, 'ready')).host, 'b');

  // Removal: refused while instances run there; --force ends them (billed), then the host is gone.
  const refused = await admin(p, 'host.remove', { name: 'a' });
  assert.equal(refused.status, 409);
  assert.match(refused.body.detail, /still has 1 instance/);
  const removed = await admin(p, 'host.remove', { name: 'a', force: true });
  assert.equal(removed.status, 200);
  assert.deepEqual(removed.body.ended_instances, [one.instanceId]);
  const ended = (await p.call('GET', '/api/notebook/status', { key: one.key })).body;
  assert.equal(ended.status, 'failed');
  assert.equal(ended.reason, 'host_removed');
  assert.ok(ended.ended_at);
  await waitFor(() => instanceGroups(a.handle.agentId, one.instanceId).length === 0);
  assert.equal(await hostNamed(p, 'a'), undefined);
  assert.equal(((await p.store.sql.prepare('SELECT COUNT(*) AS n FROM hosts').get()) as { n: number }).n, 1);
});

test('registered hosts are dialled again after a control-plane restart; draining survives it; tokens are sealed at rest', async (t) => {
  const a = await startTestAgent(t, { gpus: 2 });
  const p1 = await startPlatform(t);
  await admin(p1, 'host.add', { name: 'gpu-1', address: a.config.address, token: a.config.token });
  const me = await launch(p1, 'restart@example.com', 1);
  await waitStatus(p1, me.key, 'ready');
  await admin(p1, 'host.drain', { name: 'gpu-1' });
  const row = (await p1.store.sql.prepare('SELECT token_sealed FROM hosts').get()) as { token_sealed: string };
  assert.ok(!row.token_sealed.includes(a.config.token));
  await p1.stop();

  const p2 = await startPlatform(t, { dir: p1.dir });
  const host = await waitFor(async () => {
    const h = await hostNamed(p2, 'gpu-1');
    return h?.connected ? h : undefined;
  });
  assert.equal(host.state, 'draining');
  assert.equal(host.gpus_total, 2);
  assert.equal(host.gpus_free, 1);
  const s = await waitStatus(p2, me.key, 'ready');
  assert.equal(s.instance_id, me.instanceId); // adopted, not restarted
  await p2.call('DELETE', '/api/notebook/current', { key: me.key });
  await waitStatus(p2, me.key, 'stopped');
});

test('a persistent-storage launch prefers the host holding the account volume over the policy choice', async (t) => {
  const a = await startTestAgent(t, { gpus: 2 });
  const b = await startTestAgent(t, { gpus: 4 });
  const p = await startPlatform(t, { settings: { instanceSchedule: 'spread' } });
  await admin(p, 'host.add', { name: 'a', address: a.config.address, token: a.config.token });
  await admin(p, 'host.add', { name: 'b', address: b.config.address, token: b.config.token });
  await waitFor(async () => ((await admin(p, 'host.list', {})).body.hosts as { state: string }[]).every((h) => h.state === 'connected'));

  const owner = await p.account('volume@example.com', { credits: 50 });
  const persistent = await p.template(owner.id, { persistent_storage: true });
  const launchPersistent = async () =>
    (await p.call('POST', `/api/templates/${persistent.id}/launch`, { key: owner.key, body: {} })).body.instance_id as string;
  await launchPersistent();
  assert.equal((await waitStatus(p, owner.key, 'ready')).host, 'b'); // spread: the emptiest host holds the volume now
  await p.call('DELETE', '/api/notebook/current', { key: owner.key });
  await waitStatus(p, owner.key, 'stopped');

  // Another account takes 2 GPUs of b: both hosts have 2 free, and spread alone would pick a (first of equals).
  const other = await launch(p, 'other@example.com', 2);
  assert.equal((await waitStatus(p, other.key, 'ready')).host, 'b');
  await launchPersistent();
  assert.equal((await waitStatus(p, owner.key, 'ready')).host, 'b');
});
