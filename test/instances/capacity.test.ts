// Launches against the fleet's capacity, through the platform API with real agents (process
// runtime): a gpu_count no host can ever hold (by total GPUs, drained hosts left out) is refused at
// once with a 400 naming the largest that fits; one that fits some host but not now waits, its
// status message giving its queue position; a queued instance whose only host was drained ends
// (`no_host_fits`) instead of blocking the queue behind it.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { adminToken } from '../../control-plane/secrets.js';
import { waitFor } from '../helpers.js';
import { startPlatform, startTestAgent, waitStatus, type Platform } from './harness.js';

async function admin(p: Platform, op: string, body: unknown) {
  const r = await request(`${p.cp.url}/api/admin/${op}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-rc-admin-token': adminToken(p.dir) },
    body: JSON.stringify(body),
  });
  return { status: r.statusCode, body: (await r.body.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

async function launch(p: Platform, email: string, gpus: number) {
  const me = await p.account(email, { credits: 50 });
  const r = await p.call('POST', `/api/templates/${p.template(me.id).id}/launch`, { key: me.key, body: { gpu_count: gpus } });
  return { ...me, r };
}

const queued = (n: number) => `waiting for capacity (position ${n} in the queue)`;

test('a gpu_count no host can ever hold: 400 at once naming the largest that fits; drained hosts do not count', async (t) => {
  const small = await startTestAgent(t, { gpus: 1 });
  const big = await startTestAgent(t, { gpus: 4 });
  const p = await startPlatform(t);
  assert.equal((await admin(p, 'host.add', { name: 'small', address: small.config.address, token: small.config.token })).status, 200);
  await waitFor(async () => ((await admin(p, 'host.list', {})).body.hosts as { state: string }[])[0]?.state === 'connected');

  // Only the 1-GPU host: 2 and 4 GPUs can never fit.
  const two = await launch(p, 'two@example.com', 2);
  assert.equal(two.r.status, 400);
  assert.deepEqual(two.r.body, { detail: 'No host can hold 2 GPUs; the largest launch that fits is 1 GPU' });
  assert.equal((await p.call('GET', '/api/notebook/status', { key: two.key })).status, 404, 'nothing was created');
  const four = await launch(p, 'four@example.com', 4);
  assert.equal(four.r.status, 400);
  assert.match(four.r.body.detail, /No host can hold 4 GPUs; the largest launch that fits is 1 GPU$/);

  // A 4-GPU host joins: 4 fits it. Drained, it no longer counts (the largest is the 1-GPU host).
  await admin(p, 'host.add', { name: 'big', address: big.config.address, token: big.config.token });
  await waitFor(async () => ((await admin(p, 'host.list', {})).body.hosts as { state: string }[]).every((h) => h.state === 'connected'));
  const fits = await launch(p, 'fits@example.com', 4);
  assert.equal(fits.r.status, 200, JSON.stringify(fits.r.body));
  await waitStatus(p, fits.key, 'ready');
  await admin(p, 'host.drain', { name: 'big' });
  const drained = await launch(p, 'drained@example.com', 2);
  assert.equal(drained.r.status, 400);
  assert.equal(drained.r.body.detail, 'No host can hold 2 GPUs; the largest launch that fits is 1 GPU');
  await admin(p, 'host.resume', { name: 'big' });
  const resumed = await launch(p, 'resumed@example.com', 2);
  assert.equal(resumed.r.status, 200, 'fits the 4-GPU host once it takes placements again (full now: it waits)');
  assert.equal(resumed.r.body.message, queued(1));
});

test('fits some host but not now: waits with its queue position; a queued launch whose host was drained ends (no_host_fits) and the queue moves', async (t) => {
  const small = await startTestAgent(t, { id: 'small', gpus: 1 });
  const big = await startTestAgent(t, { id: 'big', gpus: 4 });
  const p = await startPlatform(t);
  await admin(p, 'host.add', { name: 'small', address: small.config.address, token: small.config.token });
  await admin(p, 'host.add', { name: 'big', address: big.config.address, token: big.config.token });
  await waitFor(async () => {
    const hosts = (await admin(p, 'host.list', {})).body.hosts as { state: string }[];
    return hosts.length === 2 && hosts.every((h) => h.state === 'connected');
  });

  const x = await launch(p, 'x@example.com', 4);
  await waitStatus(p, x.key, 'ready');
  // y (4 GPUs) fits the big host, not now; z (1 GPU) would fit the small one but waits behind y (first come first served).
  const y = await launch(p, 'y@example.com', 4);
  assert.equal(y.r.status, 200);
  assert.equal(y.r.body.status, 'pending');
  assert.equal(y.r.body.message, queued(1));
  const z = await launch(p, 'z@example.com', 1);
  assert.equal(z.r.body.message, queued(2));
  await p.instances.service.tick();
  assert.equal((await p.call('GET', '/api/notebook/status', { key: z.key })).body.message, queued(2));

  // The big host is drained: y can never be placed. It ends, so z moves up and is placed.
  await admin(p, 'host.drain', { name: 'big' });
  const ended = await waitStatus(p, y.key, 'failed');
  assert.equal(ended.reason, 'no_host_fits');
  assert.match(ended.detail, /No host of the fleet has 4 GPUs \(the largest has 1\)/);
  assert.equal(ended.credits_spent, 0);
  assert.equal((await waitStatus(p, z.key, 'ready')).host, 'small');
  assert.equal((await p.call('GET', '/api/notebook/status', { key: x.key })).body.status, 'ready', 'the drained host keeps its instance');
});

test('a host that has not reported its inventory may hold the launch: it waits; once that host is removed, it ends (no_host_fits)', async (t) => {
  const small = await startTestAgent(t, { gpus: 1 });
  const p = await startPlatform(t);
  await admin(p, 'host.add', { name: 'small', address: small.config.address, token: small.config.token });
  // Registered, never answering (as a host still booting, or down since the control plane started).
  await admin(p, 'host.add', { name: 'silent', address: '127.0.0.1:1', token: 'x'.repeat(24) });
  await waitFor(
    async () => ((await admin(p, 'host.list', {})).body.hosts as { name: string; state: string }[]).find((h) => h.name === 'small')?.state === 'connected',
  );
  const two = await launch(p, 'two@example.com', 2);
  assert.equal(two.r.status, 200, JSON.stringify(two.r.body));
  assert.equal(two.r.body.message, queued(1));
  await p.instances.service.tick();
  assert.equal((await p.call('GET', '/api/notebook/status', { key: two.key })).body.status, 'pending');

  assert.equal((await admin(p, 'host.remove', { name: 'silent' })).status, 200);
  const ended = await waitStatus(p, two.key, 'failed');
  assert.equal(ended.reason, 'no_host_fits');
  assert.equal((await launch(p, 'later@example.com', 2)).r.status, 400, 'and the next such launch is refused at once');
});
