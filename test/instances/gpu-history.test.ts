// GPU telemetry made visible (issue 41): the values an nvidia-smi stand-in answers flow through a
// real agent to the owner's GET /api/notebook/gpus (its GPUs only, with the samples taken while it
// held them), the status stream's `gpus` events, the operator's GET /api/operator/hosts/:name/gpus
// (every GPU, operators only) and the control plane's Prometheus text (a real scrape). The history
// keeps the last RC_INSTANCE_GPU_HISTORY_SAMPLES per GPU and goes with the host. Simulated GPUs say
// "simulated" and carry no figures; tenants never see another account's GPUs.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import type { HostInfo } from '../../agent/types.js';
import { LiveFleet } from '../../control-plane/instances/fleet.js';
import { GpuHistory } from '../../control-plane/instances/gpu-history.js';
import { gpuMetrics } from '../../control-plane/instances/gpu-metrics.js';
import { adminToken } from '../../control-plane/secrets.js';
import { EXPOSITION_TYPE, listenMetrics } from '../../lib/prometheus.js';
import { FOUR_H100, NvidiaSmiStandIn } from '../agent/nvidia-smi-stand-in.js';
import { sessionCookieOf } from '../control-plane/platform.js';
import { waitFor } from '../helpers.js';
import { startPlatform, startTestAgent, tempDir, waitStatus, type Platform } from './harness.js';
import { openSse } from './sse.js';

const MIB = 1024 * 1024;
const PASSWORD = 'operator password 1';
const [GPU0, GPU1] = FOUR_H100 as [(typeof FOUR_H100)[0], (typeof FOUR_H100)[0]];

async function admin(p: Platform, op: string, body: unknown) {
  const r = await request(`${p.cp.url}/api/admin/${op}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-rc-admin-token': adminToken(p.dir) },
    body: JSON.stringify(body),
  });
  return { status: r.statusCode, body: (await r.body.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** A Prometheus text scrape as {name, labels, value} samples; fails on any line the format does not allow. */
function parseExposition(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  const out: { name: string; labels: Record<string, string>; value: number }[] = [];
  const typed = new Set<string>();
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const meta = /^# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+)$/.exec(line);
    if (meta) {
      if (meta[1] === 'TYPE') {
        assert.equal(meta[3], 'gauge', line);
        typed.add(meta[2]!);
      }
      continue;
    }
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*)\} (-?[0-9.e+]+)$/.exec(line);
    assert.ok(m, `not an exposition sample line: ${JSON.stringify(line)}`);
    assert.ok(typed.has(m[1]!), `${m[1]} sampled before its TYPE line`);
    const labels = Object.fromEntries([...m[2]!.matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)].map((l) => [l[1]!, l[2]!]));
    out.push({ name: m[1]!, labels, value: Number(m[3]) });
  }
  assert.ok(text.endsWith('\n'), 'the exposition ends with a line feed');
  return out;
}

test('GPU telemetry from a real agent: the owner sees its GPUs and their history live, operators every GPU, Prometheus the gauges', {
  timeout: 120_000,
}, async (t) => {
  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus([GPU0, GPU1]);
  smi.setUsage([
    { index: 0, utilization: 97, memoryUsedMb: 4915 },
    { index: 1, utilization: 0, memoryUsedMb: 0 },
  ]);
  const { handle: real, config } = await startTestAgent(t, { id: 'gpu-host', smi: { command: smi.command, sampleMs: 40 } });
  const token = config.token;
  const sim = await startTestAgent(t, { id: 'sim-host', gpus: 1 });
  const p = await startPlatform(t, { agents: [sim.config], settings: { instanceGpuHistorySamples: 5 } });
  assert.equal((await admin(p, 'host.add', { name: 'gpu-host', address: real.address, token })).status, 200);
  const svc = p.instances.service;
  const fleet = new LiveFleet(svc);
  await waitFor(() => svc.agents.get('gpu-host')?.host?.gpus[0]?.usage && svc.agents.get('sim-host')?.host);

  // Tenant A lands on the real host (the simulated one drained), on GPU 0.
  await fleet.setDraining('sim-host', true);
  const a = await p.account('a@example.com');
  const launched = await p.call('POST', `/api/templates/${(await p.template(a.id)).id}/launch`, { key: a.key, body: {} });
  const idA = launched.body.instance_id as string;
  await waitStatus(p, a.key, 'ready');
  const events = await openSse(`${p.cp.url}/api/notebook/events`, a.key);
  t.after(() => events.close());

  // The history keeps the last 5 samples, those taken while A held the GPU, oldest first.
  const full = await waitFor(async () => {
    const r = await p.call('GET', '/api/notebook/gpus', { key: a.key });
    return r.body.gpus?.[0]?.history?.sampled_at_ms.length === 5 && svc.gpuHistory.samples('gpu-host', 0).length === 5 ? r : undefined;
  });
  assert.equal(full.status, 200);
  assert.equal(full.body.instance_id, idA);
  assert.equal(full.body.status, 'ready');
  assert.equal(full.body.telemetry, 'sampled');
  assert.equal(full.body.gpus.length, 1, 'its own GPU only');
  const mine = full.body.gpus[0];
  assert.deepEqual([mine.index, mine.uuid, mine.model, mine.memory_mb, mine.utilization_pct, mine.memory_used_mb], [0, GPU0.uuid, GPU0.name, 81559, 97, 4915]);
  const at: number[] = mine.history.sampled_at_ms;
  assert.deepEqual(
    at,
    [...at].sort((x, y) => x - y),
    'oldest first',
  );
  assert.equal(new Set(at).size, 5, 'a sample repeated in a host item is kept once');
  assert.deepEqual(mine.history.utilization_pct, [97, 97, 97, 97, 97]);
  assert.deepEqual(mine.history.memory_used_mb, [4915, 4915, 4915, 4915, 4915]);
  assert.ok(svc.gpuHistory.samples('gpu-host', 0).every((s) => s.instanceId === idA));

  // A new figure reaches the owner's status stream as a `gpus` event, and the history.
  smi.setUsage([
    { index: 0, utilization: 50, memoryUsedMb: 30_000 },
    { index: 1, utilization: 0, memoryUsedMb: 0 },
  ]);
  const pushed = await events.next((e) => e.event === 'gpus' && JSON.parse(e.data).gpus[0]?.utilization_pct === 50);
  const ev = JSON.parse(pushed.data);
  assert.equal(ev.instance_id, idA);
  assert.equal(ev.gpus[0].memory_used_mb, 30_000);
  assert.equal(ev.gpus[0].history, undefined, 'events carry the latest figures only');
  await waitFor(async () => (await p.call('GET', '/api/notebook/gpus', { key: a.key })).body.gpus[0].history.utilization_pct.at(-1) === 50);

  // nvidia-smi fails: no current figures (never stale ones), the history stays.
  smi.fail('NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.');
  const failing = await waitFor(async () => {
    const r = await p.call('GET', '/api/notebook/gpus', { key: a.key });
    return r.body.telemetry === 'unavailable' ? r.body : undefined;
  });
  assert.equal(failing.gpus[0].utilization_pct, null);
  assert.equal(failing.gpus[0].history.sampled_at_ms.length, 5);
  smi.fail(undefined);
  await waitFor(async () => (await p.call('GET', '/api/notebook/gpus', { key: a.key })).body.telemetry === 'sampled');

  // Tenant B: nothing before a launch; on the simulated host, "simulated" and no figure at all.
  const b = await p.account('b@example.com', { password: PASSWORD });
  const none = await p.call('GET', '/api/notebook/gpus', { key: b.key });
  assert.equal(none.status, 404);
  assert.equal(none.body.detail, 'No instance');
  await fleet.setDraining('sim-host', false);
  await fleet.setDraining('gpu-host', true);
  await p.call('POST', `/api/templates/${(await p.template(b.id)).id}/launch`, { key: b.key, body: {} });
  await waitStatus(p, b.key, 'ready');
  const simulated = await waitFor(async () => {
    const r = await p.call('GET', '/api/notebook/gpus', { key: b.key });
    return r.body.gpus?.length === 1 ? r.body : undefined;
  });
  assert.equal(simulated.telemetry, 'simulated');
  assert.deepEqual(simulated.gpus[0], {
    index: 0,
    uuid: null,
    model: 'Simulated GPU',
    memory_mb: 81920,
    utilization_pct: null,
    memory_used_mb: null,
    sampled_at: null,
    history: { sampled_at_ms: [], utilization_pct: [], memory_used_mb: [] },
  });
  assert.doesNotMatch(JSON.stringify(simulated), new RegExp(`${GPU0.uuid}|${idA}`), "never another tenant's GPU");

  // Operators: every GPU of a host, its holder and history; tenants and keys are refused.
  await p.store.accounts.setOperator((await p.account('op@example.com', { password: PASSWORD })).id, true);
  const login = await p.call('POST', '/api/auth/login', { body: { email: 'op@example.com', password: PASSWORD } });
  const op = { cookie: sessionCookieOf(login), csrf: login.body.csrf_token as string };
  const host = (await p.call('GET', '/api/operator/hosts/gpu-host/gpus', op)).body;
  assert.equal(host.host, 'gpu-host');
  assert.equal(host.telemetry, 'sampled');
  assert.deepEqual(
    host.gpus.map((g: { index: number; uuid: string; instance_id: string | null }) => [g.index, g.uuid, g.instance_id]),
    [
      [0, GPU0.uuid, idA],
      [1, GPU1.uuid, null],
    ],
  );
  assert.equal(host.gpus[1].history.sampled_at_ms.length, 5, 'a free GPU is sampled too');
  assert.equal((await p.call('GET', '/api/operator/hosts/sim-host/gpus', op)).body.telemetry, 'simulated');
  const unknown = await p.call('GET', '/api/operator/hosts/nowhere/gpus', op);
  assert.deepEqual([unknown.status, unknown.body.detail], [404, 'No host named nowhere']);
  assert.equal((await p.call('GET', '/api/operator/hosts/gpu-host/gpus', { key: a.key })).status, 403);
  const tenantLogin = await p.call('POST', '/api/auth/login', { body: { email: 'b@example.com', password: PASSWORD } });
  const tenant = { cookie: sessionCookieOf(tenantLogin), csrf: tenantLogin.body.csrf_token as string };
  const refused = await p.call('GET', '/api/operator/hosts/sim-host/gpus', tenant);
  assert.deepEqual([refused.status, refused.body.detail], [403, 'Operator access only'], "a tenant's session: not even its own host");
  assert.equal((await p.call('GET', '/api/operator/hosts/gpu-host/gpus')).status, 401);

  // Prometheus: a real scrape of the control plane's exposition.
  const metrics = await listenMetrics(() => gpuMetrics(svc.agents), '127.0.0.1', 0);
  t.after(() => metrics.close());
  const scrape = await request(`${metrics.url}/metrics`);
  assert.equal(scrape.statusCode, 200);
  assert.equal(scrape.headers['content-type'], EXPOSITION_TYPE);
  const samples = parseExposition(await scrape.body.text());
  const find = (name: string, index: number) => samples.find((s) => s.name === name && s.labels.host === 'gpu-host' && s.labels.index === String(index));
  assert.deepEqual(find('rc_gpu_utilization_percent', 0)?.labels, { host: 'gpu-host', index: '0', uuid: GPU0.uuid, model: GPU0.name, instance_id: idA });
  assert.equal(find('rc_gpu_utilization_percent', 0)?.value, 50);
  assert.equal(find('rc_gpu_memory_used_bytes', 0)?.value, 30_000 * MIB);
  assert.equal(find('rc_gpu_memory_total_bytes', 0)?.value, 81559 * MIB);
  assert.equal(find('rc_gpu_utilization_percent', 1)?.labels.instance_id, undefined, 'a free GPU has no instance_id');
  assert.equal(find('rc_gpu_memory_used_bytes', 1)?.value, 0);
  assert.equal(samples.filter((s) => s.labels.host === 'sim-host').length, 0, 'simulated GPUs: no series');
  assert.equal((await request(`${metrics.url}/other`)).statusCode, 404);

  // A's instance ends: nothing of it is shown; the operator sees the GPU free.
  await p.call('DELETE', '/api/notebook/current', { key: a.key });
  const ended = await waitFor(async () => {
    const r = await p.call('GET', '/api/notebook/gpus', { key: a.key });
    return r.body.status === 'stopped' ? r.body : undefined;
  });
  assert.deepEqual([ended.telemetry, ended.gpus], ['none', []]);
  await waitFor(async () => (await p.call('GET', '/api/operator/hosts/gpu-host/gpus', op)).body.gpus[0].instance_id === null);

  // The host leaves the fleet: its history goes with it.
  assert.equal((await admin(p, 'host.remove', { name: 'gpu-host' })).status, 200);
  assert.deepEqual(svc.gpuHistory.samples('gpu-host', 0), []);
  assert.equal((await p.call('GET', '/api/operator/hosts/gpu-host/gpus', op)).status, 404);
});

test('GpuHistory: bounded rings, the holder of each sample, repeats skipped, GPUs and hosts forgotten', () => {
  const host = (gpus: { index: number; instanceId: string; pct?: number; at?: number }[]): HostInfo => ({
    agentId: 'a',
    hostname: 'h',
    runtime: 'process',
    advertiseHost: '127.0.0.1',
    gpuSource: 'nvidia-smi',
    freeGpus: 0,
    gpus: gpus.map((g) => ({
      index: g.index,
      model: 'm',
      memoryMb: 80,
      instanceId: g.instanceId,
      ...(g.at === undefined ? {} : { usage: { utilizationPct: g.pct ?? 0, memoryUsedMb: 1, sampledAtMs: g.at } }),
    })),
  });
  const h = new GpuHistory(3);
  assert.deepEqual([...h.record('h', host([{ index: 0, instanceId: 'i1', pct: 10, at: 1 }]))], ['i1']);
  assert.deepEqual([...h.record('h', host([{ index: 0, instanceId: 'i2', pct: 10, at: 1 }]))], [], 'the same sample, a new holder: not recorded twice');
  for (const [pct, at] of [
    [20, 2],
    [30, 3],
    [40, 4],
  ] as const)
    h.record('h', host([{ index: 0, instanceId: at < 4 ? 'i1' : 'i2', pct, at }]));
  assert.deepEqual(
    h.samples('h', 0).map((s) => [s.utilizationPct, s.atMs, s.instanceId]),
    [
      [20, 2, 'i1'],
      [30, 3, 'i1'],
      [40, 4, 'i2'],
    ],
    'the last 3, oldest first',
  );
  assert.deepEqual(
    h.samples('h', 0, 'i2').map((s) => s.utilizationPct),
    [40],
    "an instance's history is its own time on the GPU",
  );
  h.record('h', host([{ index: 0, instanceId: '' }]));
  assert.equal(h.samples('h', 0).length, 3, 'a sample missing (nvidia-smi failed): a gap, the history stays');
  h.record('h', host([{ index: 1, instanceId: '', at: 5 }]));
  assert.deepEqual(h.samples('h', 0), [], 'GPU 0 no longer reported: its history goes');
  assert.equal(h.samples('h', 1).length, 1);
  h.forget('h');
  assert.deepEqual(h.samples('h', 1), []);
  const off = new GpuHistory(0);
  assert.deepEqual([...off.record('h', host([{ index: 0, instanceId: 'i', at: 1 }]))], ['i'], 'capacity 0: a new sample is still told (the live figures)');
  assert.deepEqual([...off.record('h', host([{ index: 0, instanceId: 'i', at: 1 }]))], [], 'once');
  assert.deepEqual(off.samples('h', 0), [], 'capacity 0: no history');
});

test('gpuMetrics: label values escaped; a host not reachable keeps only the memory size', () => {
  const conn = (connected: boolean, model: string) =>
    ({
      connected,
      host: {
        gpuSource: 'nvidia-smi',
        gpus: [{ index: 3, model, memoryMb: 10, instanceId: '', uuid: 'GPU-1', usage: { utilizationPct: 7, memoryUsedMb: 2, sampledAtMs: 1 } }],
      },
    }) as never;
  const text = gpuMetrics(
    new Map([
      ['a', conn(true, 'Odd "GPU" \\ model\nline two')],
      ['b', conn(false, 'm')],
    ]),
  );
  const samples = parseExposition(text);
  assert.equal(samples.find((s) => s.name === 'rc_gpu_utilization_percent' && s.labels.host === 'a')?.labels.model, 'Odd \\"GPU\\" \\\\ model\\nline two');
  assert.deepEqual(
    samples.filter((s) => s.labels.host === 'b').map((s) => s.name),
    ['rc_gpu_memory_total_bytes'],
  );
});
