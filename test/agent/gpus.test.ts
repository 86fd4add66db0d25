// GPU accounting: concurrent starts never share a GPU; the instance sees its GPUs in CUDA_VISIBLE_DEVICES.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GpuAllocator, parseNvidiaSmi } from '../../agent/gpus.js';
import { waitFor } from '../helpers.js';
import { startTestAgent, tempDir, waitForState } from './harness.js';
import { FOUR_H100, NvidiaSmiStandIn } from './nvidia-smi-stand-in.js';
import { join } from 'node:path';
import { instanceGpuEnv } from '../../agent/gpus.js';

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

test('process runtime with GPUs from nvidia-smi: the instance keeps the host indexes (it shares the host numbering)', async (t) => {
  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus(FOUR_H100);
  const { client } = await startTestAgent(t, { stopGraceMs: 500, gpus: { detect: 'auto', command: smi.command } });
  assert.equal((await client.getHost()).gpuSource, 'nvidia-smi');
  const cmd = 'echo "cuda=$CUDA_VISIBLE_DEVICES nvidia=$NVIDIA_VISIBLE_DEVICES"; exec sleep 30';
  await client.start({ instanceId: 'p1', gpuCount: 2, startCommand: cmd });
  const { instance } = await client.start({ instanceId: 'p2', gpuCount: 2, startCommand: cmd });
  assert.deepEqual(instance.gpus, [2, 3]);
  await waitForState(client, 'p2', 'ready');
  const lines = await waitFor(async () => {
    const out: string[] = [];
    for await (const l of client.logs('p2', { tail: 5 })) out.push(l);
    return out.length ? out : undefined;
  });
  assert.deepEqual(lines, ['cuda=2,3 nvidia=2,3']);
});

test('the GPU variables per runtime: host indexes for processes; for containers only the engine request (UUIDs) or void', () => {
  assert.deepEqual(instanceGpuEnv('process', [2, 3], ['GPU-a', 'GPU-b']), { CUDA_VISIBLE_DEVICES: '2,3', NVIDIA_VISIBLE_DEVICES: '2,3' });
  assert.deepEqual(instanceGpuEnv('process', [], undefined), { CUDA_VISIBLE_DEVICES: '', NVIDIA_VISIBLE_DEVICES: 'void' });
  assert.deepEqual(instanceGpuEnv('docker', [2, 3], ['GPU-a', 'GPU-b']), { NVIDIA_VISIBLE_DEVICES: 'GPU-a,GPU-b' });
  assert.deepEqual(instanceGpuEnv('docker', [2, 3], undefined), { NVIDIA_VISIBLE_DEVICES: 'void' }, 'simulated GPUs: no device, no index');
  assert.deepEqual(instanceGpuEnv('docker', [], undefined), { NVIDIA_VISIBLE_DEVICES: 'void' });
});
