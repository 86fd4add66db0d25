// GPU accounting: concurrent starts never share a GPU; the instance sees its GPUs in CUDA_VISIBLE_DEVICES.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GpuAllocator, parseNvidiaSmi } from '../../agent/gpus.js';
import { waitFor } from '../helpers.js';
import { startTestAgent, waitForState } from './harness.js';

test('concurrent starts on 4 GPUs: no GPU assigned twice, the rest fail with gpus_unavailable, CUDA_VISIBLE_DEVICES matches', async (t) => {
  const { client } = await startTestAgent(t, { stopGraceMs: 500 });
  const counts = [2, 1, 2, 1, 1, 2, 1];
  const started = await Promise.all(
    counts.map((gpuCount, i) => client.start({ instanceId: `g${i}`, gpuCount, startCommand: 'echo "gpus=$CUDA_VISIBLE_DEVICES"; exec sleep 30' })),
  );
  const holding = started.map((s) => s.instance).filter((i) => i.state !== 'failed');
  const refused = started.map((s) => s.instance).filter((i) => i.state === 'failed');
  const assigned = holding.flatMap((i) => i.gpus);
  assert.equal(new Set(assigned).size, assigned.length, 'no GPU assigned twice');
  assert.equal(assigned.length, 4, 'all 4 GPUs are used');
  for (const i of holding) assert.equal(i.gpus.length, i.spec.gpuCount);
  assert.ok(refused.length > 0);
  for (const i of refused) assert.equal(i.reason, 'gpus_unavailable');

  const host = await client.getHost();
  assert.equal(host.freeGpus, 0);
  assert.equal(host.gpuSource, 'configured');
  for (const g of host.gpus) assert.ok(holding.some((i) => i.instanceId === g.instanceId && i.gpus.includes(g.index)));

  for (const i of holding) {
    await waitForState(client, i.instanceId, 'ready');
    const lines = await waitFor(async () => {
      const out: string[] = [];
      for await (const l of client.logs(i.instanceId, { tail: 5 })) out.push(l);
      return out.length ? out : undefined;
    });
    assert.deepEqual(lines, [`gpus=${i.gpus.join(',')}`]);
  }

  // Stopping one frees exactly its GPUs for the next start.
  const victim = holding[0]!;
  await client.stop(victim.instanceId);
  const next = await client.start({ instanceId: 'after', gpuCount: victim.gpus.length, startCommand: 'exec sleep 30' });
  assert.equal(next.instance.state, 'pending');
  assert.deepEqual(next.instance.gpus, victim.gpus);
});

test('nvidia-smi output parsing and the allocator', () => {
  const devices = parseNvidiaSmi('0, GPU-1b2c-3d, NVIDIA H100 80GB HBM3, 81559\n1, GPU-4e5f-6a, NVIDIA H100 80GB HBM3, 81559\n\ngarbage\n');
  assert.deepEqual(devices, [
    { index: 0, uuid: 'GPU-1b2c-3d', model: 'NVIDIA H100 80GB HBM3', memoryMb: 81559 },
    { index: 1, uuid: 'GPU-4e5f-6a', model: 'NVIDIA H100 80GB HBM3', memoryMb: 81559 },
  ]);
  const a = new GpuAllocator({ devices, source: 'nvidia-smi' });
  // Container device requests name GPUs by UUID, and only when they are real (nvidia-smi).
  assert.deepEqual(a.deviceIds([1]), ['GPU-4e5f-6a']);
  assert.equal(new GpuAllocator({ devices: [{ index: 0, model: 'Simulated GPU', memoryMb: 1 }], source: 'configured' }).deviceIds([0]), undefined);
  assert.deepEqual(a.allocate('x', 1), [0]);
  assert.equal(a.allocate('y', 2), undefined);
  assert.deepEqual(a.allocate('z', 0), []);
  a.release('x');
  assert.deepEqual(a.allocate('y', 2), [0, 1]);
  assert.equal(a.free, 0);
});
