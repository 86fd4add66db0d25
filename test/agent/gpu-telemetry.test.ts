// GPU telemetry through the agent's gRPC API, with an nvidia-smi stand-in whose answers the test
// sets: one call for every GPU per sample, utilization and memory reported with the host status
// (GetHost and the WatchEvents host items), nothing while nvidia-smi fails, and nothing ever for
// simulated GPUs.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import { parseUsage, USAGE_QUERY } from '../../agent/gpu-telemetry.js';
import type { HostInfo } from '../../agent/types.js';
import { waitFor } from '../helpers.js';
import { collectEvents, startTestAgent, tempDir } from './harness.js';
import { FOUR_H100, NvidiaSmiStandIn } from './nvidia-smi-stand-in.js';

const figures = (h: HostInfo) => h.gpus.map((g) => (g.usage ? [g.usage.utilizationPct, g.usage.memoryUsedMb] : null));

test('real GPUs: every GPU sampled by one nvidia-smi call, reported with the host status; a failing nvidia-smi reports nothing', async (t) => {
  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus(FOUR_H100);
  smi.setUsage([
    { index: 0, utilization: 0, memoryUsedMb: 0 },
    { index: 1, utilization: 3, memoryUsedMb: 2695 },
    { index: 2, utilization: 100, memoryUsedMb: 40960 },
    { index: 3, utilization: 0, memoryUsedMb: 17 },
  ]);
  const { client } = await startTestAgent(t, { gpus: { detect: 'auto', command: smi.command }, gpuSampleMs: 50 });
  const watch = collectEvents(client);
  t.after(() => watch.stop());

  const first = await waitFor(async () => {
    const h = await client.getHost();
    return h.gpus.every((g) => g.usage) ? h : undefined;
  });
  assert.deepEqual(figures(first), [
    [0, 0],
    [3, 2695],
    [100, 40960],
    [0, 17],
  ]);
  assert.ok(first.gpus.every((g) => g.usage!.sampledAtMs > 0));
  // One call for all GPUs each time: the query names no GPU (`-i`), only the fields.
  const usageCalls = smi.calls().filter((c) => c.includes('utilization.gpu'));
  assert.ok(usageCalls.length >= 1);
  for (const c of usageCalls) assert.equal(c, USAGE_QUERY.join(' '));

  // A new sample reaches watchers as a host item, without asking.
  smi.setUsage([
    { index: 0, utilization: 55, memoryUsedMb: 1000 },
    { index: 1, utilization: 3, memoryUsedMb: 2695 },
    { index: 2, utilization: 4, memoryUsedMb: 40960 },
    { index: 3, utilization: 0, memoryUsedMb: 17 },
  ]);
  await waitFor(() => watch.items.some((i) => i.kind === 'host' && i.host.gpus[0]?.usage?.utilizationPct === 55));

  // nvidia-smi fails: the figures are dropped (never shown stale), and come back with it.
  smi.fail('NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver.');
  await waitFor(async () => (await client.getHost()).gpus.every((g) => !g.usage));
  smi.fail(undefined);
  await waitFor(async () => (await client.getHost()).gpus[0]?.usage?.utilizationPct === 55);
});

test('simulated GPUs report no telemetry; sampling off reports none for real GPUs', async (t) => {
  const { client } = await startTestAgent(t, { gpuSampleMs: 50 });
  const host = await client.getHost();
  assert.equal(host.gpuSource, 'configured');
  assert.equal(host.gpus.length, 4);
  assert.ok(host.gpus.every((g) => g.usage === undefined));

  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus(FOUR_H100.slice(0, 1));
  smi.setUsage([{ index: 0, utilization: 90, memoryUsedMb: 100 }]);
  const off = await startTestAgent(t, { gpus: { detect: 'auto', command: smi.command }, gpuSampleMs: 0 });
  assert.equal((await off.client.getHost()).gpuSource, 'nvidia-smi');
  assert.equal((await off.client.getHost()).gpus[0]!.usage, undefined);
  assert.deepEqual(
    smi.calls().filter((c) => c.includes('utilization.gpu')),
    [],
    'nvidia-smi is never asked',
  );
});

test('nvidia-smi usage output parsing: [N/A] and malformed lines left out', () => {
  const u = parseUsage('0, 0, 4915\n1, 100, 81000\n2, [N/A], [N/A]\ngarbage\n3, 7, 12\n4, 101, 5\n');
  assert.deepEqual(
    [...u],
    [
      [0, { utilizationPct: 0, memoryUsedMb: 4915 }],
      [1, { utilizationPct: 100, memoryUsedMb: 81000 }],
      [3, { utilizationPct: 7, memoryUsedMb: 12 }],
    ],
  );
});
