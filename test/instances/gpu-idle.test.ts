// The idle rule sees the GPU (issue 41): an instance whose GPU is busy (utilization averaged over
// the window at or above RC_INSTANCE_GPU_BUSY_PCT) is active with no traffic at all, and is
// stopped as idle once the GPU has been quiet for the idle timeout. A real agent samples an
// nvidia-smi stand-in; the platform runs on a fake clock (the tick is called directly).
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { HostInfo } from '../../agent/types.js';
import { GpuActivity } from '../../control-plane/instances/gpu-activity.js';
import { FakeClock } from '../../lib/clock.js';
import { FOUR_H100, NvidiaSmiStandIn } from '../agent/nvidia-smi-stand-in.js';
import { waitFor } from '../helpers.js';
import { startPlatform, startTestAgent, tempDir, waitStatus } from './harness.js';

const HOUR = 3_600_000;

test('a busy GPU keeps an instance without traffic alive; once it is quiet, the idle timeout stops it', async (t) => {
  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus(FOUR_H100.slice(0, 1));
  smi.setUsage([{ index: 0, utilization: 0, memoryUsedMb: 0 }]);
  const { handle: agent, config } = await startTestAgent(t, { id: 'gpu-host', smi: { command: smi.command, sampleMs: 30 } });
  const token = config.token;
  const clock = new FakeClock();
  const p = await startPlatform(t, {
    agents: [{ id: 'gpu-host', address: agent.address, token }],
    clock,
    settings: { instanceTickMs: 24 * HOUR, instanceIdleTimeoutSec: 600, instanceGpuBusyWindowSec: 300 },
  });
  const svc = p.instances.service;
  const me = await p.account('trainer@example.com', { credits: 100 });
  const tpl = await p.template(me.id);
  const id = (await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).body.instance_id as string;
  await waitStatus(p, me.key, 'ready');
  const gpu = () => svc.agents.get('gpu-host')!.host!.gpus[0]!;
  /** Resolves once the platform has taken a sample taken after this call, with `pct`. */
  const nextSample = async (pct: number) => {
    const after = gpu().usage?.sampledAtMs ?? 0;
    await waitFor(() => {
      const g = gpu();
      return g.instanceId === id && g.usage !== undefined && g.usage.sampledAtMs > after && g.usage.utilizationPct === pct;
    });
  };

  // Training: the GPU at 100 %, no request through the platform.
  smi.setUsage([{ index: 0, utilization: 100, memoryUsedMb: 60_000 }]);
  await nextSample(100);
  // The tenant sees its GPU's figures in the status object.
  const seen = (await p.call('GET', '/api/notebook/status', { key: me.key })).body;
  assert.deepEqual(
    seen.gpus.map((g: { index: number; model: string; utilization_pct: number; memory_used_mb: number }) => [
      g.index,
      g.model,
      g.utilization_pct,
      g.memory_used_mb,
    ]),
    [[0, 'NVIDIA H100 80GB HBM3', 100, 60_000]],
  );
  clock.advance(590_000);
  await nextSample(100);
  await svc.tick();
  clock.advance(20_000); // 610 s after ready with no traffic: idle by traffic alone
  await nextSample(100);
  await svc.tick();
  assert.equal((await svc.instances.get(id))!.state, 'ready', 'a busy GPU is activity');

  // Done training: the GPU goes quiet. Once the busy samples left the window, nothing counts.
  smi.setUsage([{ index: 0, utilization: 0, memoryUsedMb: 2_695 }]);
  await nextSample(0);
  clock.advance(301_000);
  await nextSample(0);
  await svc.tick();
  assert.equal((await svc.instances.get(id))!.state, 'ready', 'the idle timeout runs from the last busy sample');
  clock.advance(300_000); // 601 s after the last busy sample
  await nextSample(0);
  await svc.tick();
  const stopped = await waitStatus(p, me.key, 'stopped');
  assert.equal(stopped.reason, 'idle_timeout');
  assert.equal(stopped.gpus, null, 'an ended instance holds no GPU');
});

test('GpuActivity: the window mean against the threshold; a repeated sample, a new holder and a freed GPU', () => {
  const active: [string, number][] = [];
  const a = new GpuActivity({ busyPct: 1, windowMs: 300_000 }, (id, at) => active.push([id, at]));
  const host = (instanceId: string, utilizationPct: number, sampledAtMs: number): HostInfo => ({
    agentId: 'a',
    hostname: 'h',
    runtime: 'process',
    advertiseHost: '127.0.0.1',
    gpuSource: 'nvidia-smi',
    freeGpus: 0,
    gpus: [{ index: 0, model: 'm', memoryMb: 1, instanceId, usage: { utilizationPct, memoryUsedMb: 0, sampledAtMs } }],
  });
  // A Python-bound decode loop (0-5 %) counts as work; an idle GPU (0 %) does not.
  a.record('h', host('i1', 3, 1), 1_000);
  a.record('h', host('i1', 0, 2), 2_000);
  assert.deepEqual(active, [
    ['i1', 1_000],
    ['i1', 2_000],
  ]);
  a.record('h', host('i1', 0, 2), 3_000); // the same sample again (an assignment change): not counted twice
  a.record('h', host('i1', 0, 3), 400_000); // the 3 % left the window
  assert.equal(active.length, 2);
  // Another instance on that GPU starts from nothing; a freed GPU forgets its history.
  a.record('h', host('i2', 0, 4), 401_000);
  assert.equal(active.length, 2);
  a.record('h', { ...host('', 0, 5), gpus: [{ index: 0, model: 'm', memoryMb: 1, instanceId: '' }] }, 402_000);
  a.record('h', host('i2', 50, 6), 403_000);
  assert.deepEqual(active.at(-1), ['i2', 403_000]);
  // Threshold 0: GPUs never count.
  const off = new GpuActivity({ busyPct: 0, windowMs: 300_000 }, () => assert.fail('no activity with the rule off'));
  off.record('h', host('i1', 100, 1), 1_000);
});
