// Launches against the fleet's capacity, through the platform API with real agents (process
// runtime): a gpu_count no host can ever hold (by total GPUs, drained hosts left out) is refused at
// once with a 400 naming the largest that fits; one that fits some host but not now waits, its
// status message giving its queue position; a queued instance whose only host was drained ends
// (`no_host_fits`) instead of blocking the queue behind it. And the operator's host list shows
// every GPU with its telemetry.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { request } from 'undici';
import { adminToken } from '../../control-plane/secrets.js';
import { waitFor } from '../helpers.js';
import { join } from 'node:path';
import { startAgent } from '../../agent/server.js';
import { createLogger } from '../../lib/log.js';
import { FOUR_H100, NvidiaSmiStandIn } from '../agent/nvidia-smi-stand-in.js';
import { newToken, startPlatform, startTestAgent, tempDir, waitStatus, type Platform } from './harness.js';

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
  const r = await p.call('POST', `/api/templates/${(await p.template(me.id)).id}/launch`, { key: me.key, body: { gpu_count: gpus } });
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
  assert.equal((await waitStatus(p, x.key, 'ready')).gpus, null, 'simulated GPUs: no figures in the status object');
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

test('host.list shows every GPU of a host with its holder and its telemetry (from the agent, nvidia-smi stand-in); simulated GPUs have none', async (t) => {
  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus(FOUR_H100.slice(0, 2));
  smi.setUsage([
    { index: 0, utilization: 97, memoryUsedMb: 4915 },
    { index: 1, utilization: 0, memoryUsedMb: 0 },
  ]);
  const token = newToken();
  const real = await startAgent({
    host: '127.0.0.1',
    port: 0,
    token,
    dataDir: tempDir(t, 'rc-inst-agent-'),
    gpus: { detect: 'auto', command: smi.command },
    gpuSampleMs: 50,
    lostControlPlaneGraceMs: 0,
    heartbeatMs: 200,
    logger: createLogger('silent'),
  });
  t.after(() => real.close());
  const sim = await startTestAgent(t, { gpus: 1 });
  const p = await startPlatform(t);
  await admin(p, 'host.add', { name: 'real', address: real.address, token });
  await admin(p, 'host.add', { name: 'sim', address: sim.config.address, token: sim.config.token });
  const hosts = await waitFor(async () => {
    const list = (await admin(p, 'host.list', {})).body.hosts as any[]; // eslint-disable-line @typescript-eslint/no-explicit-any
    return list.length === 2 && list[0].gpus?.[0]?.utilization_pct === 97 && list[1].gpus ? list : undefined;
  });
  const [r, s] = hosts;
  assert.deepEqual(
    r.gpus.map((g: any) => [g.index, g.model, g.memory_mb, g.instance_id, g.utilization_pct, g.memory_used_mb]), // eslint-disable-line @typescript-eslint/no-explicit-any
    [
      [0, 'NVIDIA H100 80GB HBM3', 81559, null, 97, 4915],
      [1, 'NVIDIA H100 80GB HBM3', 81559, null, 0, 0],
    ],
  );
  assert.ok(!Number.isNaN(Date.parse(r.gpus[0].sampled_at)));
  assert.deepEqual(
    r.gpus.map((g: { uuid: string }) => g.uuid),
    [FOUR_H100[0]!.uuid, FOUR_H100[1]!.uuid],
    "nvidia-smi's UUID of each GPU",
  );
  assert.deepEqual(s.gpus, [
    { index: 0, uuid: null, model: 'Simulated GPU', memory_mb: 81920, instance_id: null, utilization_pct: null, memory_used_mb: null, sampled_at: null },
  ]);
});
