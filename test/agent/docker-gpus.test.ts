// GPUs in containers, against the real Docker engine (skipped without one, failed with
// RC_REQUIRE_DOCKER=1), with an nvidia-smi stand-in giving the agent four real-looking GPUs:
// - the create body names the assigned GPUs by UUID and sets no host index (CUDA numbers a
//   container's GPUs from 0), captured by a recording proxy in front of the engine, which strips
//   the device request before passing it on (this engine has no nvidia driver);
// - an engine without the NVIDIA runtime: GPU launches are refused at once with what to install,
//   before any container is created; CPU-only launches still run.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import { createAgentClient } from '../../agent/client.js';
import { engineGpuSupport } from '../../agent/gpu-support.js';
import { ensureLocalImage } from '../../agent/images/local-images.js';
import type { AgentOptions } from '../../agent/server.js';
import { DOCKER_SOCKET, dockerAvailable } from '../helpers.js';
import { engine, removeAgentContainers, removeAgentNetworks, removeTestFirewall, TEST_NET_PREFIX, testIsolation } from './docker-isolation-harness.js';
import { EngineProxy } from './engine-proxy.js';
import { newToken, spawnAgent, startTestAgent, tempDir, waitForState } from './harness.js';
import { FOUR_H100, NvidiaSmiStandIn } from './nvidia-smi-stand-in.js';

const BUSYBOX = 'rc-test/busybox:1';

after(removeTestFirewall);

let imageReady: Promise<void> | undefined;
async function needEngine(t: TestContext): Promise<boolean> {
  if (!(await dockerAvailable(t))) return false;
  imageReady ??= ensureLocalImage(DOCKER_SOCKET, BUSYBOX).then(() => undefined);
  await imageReady;
  return true;
}

async function dockerAgent(t: TestContext, options: Partial<AgentOptions>) {
  const a = await startTestAgent(t, {
    runtime: 'docker',
    readyTimeoutMs: 60_000,
    stopGraceMs: 1000,
    ...options,
    docker: { limitsPerGpu: { memoryMb: 256, cpus: 0.5, pids: 200 }, toolbox: false, isolation: testIsolation },
  });
  t.after(async () => {
    await removeAgentContainers(a.agent.agentId);
    await removeAgentNetworks(a.agent.agentId);
  });
  return a;
}

test('containers: the engine is asked for GPUs 2 and 3 by UUID; no host index in the environment, NVIDIA_VISIBLE_DEVICES pinned to them', async (t) => {
  if (!(await needEngine(t))) return;
  const dir = tempDir(t, 'rc-gpu-test-');
  const smi = new NvidiaSmiStandIn(join(dir, 'smi'));
  smi.setGpus(FOUR_H100);
  const proxy = new EngineProxy({
    engineSocket: DOCKER_SOCKET,
    dir,
    patchInfo: (info) => ({ ...info, Runtimes: { ...info.Runtimes, nvidia: { path: 'nvidia-container-runtime' } } }),
    stripDeviceRequests: true,
  });
  await proxy.start();
  const { client } = await dockerAgent(t, { dockerSocket: proxy.socketPath, gpus: { detect: 'auto', command: smi.command } });
  t.after(() => proxy.close()); // after the agent's close: its engine calls go through the proxy

  const host = await client.getHost();
  assert.equal(host.gpuSource, 'nvidia-smi');
  assert.deepEqual(
    host.gpus.map((g) => g.index),
    [0, 1, 2, 3],
  );
  const first = `gpu-a-${process.pid}`;
  const second = `gpu-b-${process.pid}`;
  // The template asks for every GPU of the host: the agent's value replaces it.
  const common = { image: BUSYBOX, gpuCount: 2, startCommand: 'env | sort; exec sleep 60', env: { NVIDIA_VISIBLE_DEVICES: 'all', HF_HOME: '/workspace/hf' } };
  assert.deepEqual((await client.start({ instanceId: first, ...common })).instance.gpus, [0, 1]);
  assert.deepEqual((await client.start({ instanceId: second, ...common })).instance.gpus, [2, 3]);
  await waitForState(client, second, 'ready', 60_000);

  const body = proxy.creates().get(`rc-${second}`);
  assert.ok(body, 'the create body was captured');
  const uuids = [FOUR_H100[2]!.uuid, FOUR_H100[3]!.uuid];
  assert.deepEqual(body.HostConfig.DeviceRequests, [{ Driver: 'nvidia', DeviceIDs: uuids, Capabilities: [['gpu']] }]);
  const env = body.Env as string[];
  assert.ok(!env.some((e) => e.startsWith('CUDA_VISIBLE_DEVICES=')), `no CUDA_VISIBLE_DEVICES: ${env.join(' ')}`);
  assert.deepEqual(
    env.filter((e) => e.startsWith('NVIDIA_VISIBLE_DEVICES=')),
    [`NVIDIA_VISIBLE_DEVICES=${uuids.join(',')}`],
  );
  assert.ok(!env.some((e) => /=2,3$|=2$|=3$/.test(e)), `no host index in the environment: ${env.join(' ')}`);
  assert.ok(env.includes('HF_HOME=/workspace/hf'));
  // The first instance's body names GPUs 0 and 1 the same way.
  assert.deepEqual(proxy.creates().get(`rc-${first}`).HostConfig.DeviceRequests[0].DeviceIDs, [FOUR_H100[0]!.uuid, FOUR_H100[1]!.uuid]);

  // What the container got (the engine's own view: the device request was stripped on the way).
  const { json: c } = await engine('GET', `/containers/rc-${second}/json`);
  const inside = c.Config.Env as string[];
  assert.ok(!inside.some((e) => e.startsWith('CUDA_VISIBLE_DEVICES=')));
  assert.ok(inside.includes(`NVIDIA_VISIBLE_DEVICES=${uuids.join(',')}`));
  // Nothing left running: the agent writes no state once the test's directories are gone.
  assert.equal(await client.remove(first), true);
  assert.equal(await client.remove(second), true);
});

test('an engine without the NVIDIA runtime: GPU launches fail at once with gpu_runtime_missing and what to install; CPU-only launches run', async (t) => {
  if (!(await needEngine(t))) return;
  const { json: info } = await engine('GET', '/info');
  if (engineGpuSupport(info).ok) {
    t.skip('this engine can run GPU containers (nvidia runtime or hook present)');
    return;
  }
  const dir = tempDir(t, 'rc-gpu-test-');
  const smi = new NvidiaSmiStandIn(join(dir, 'smi'));
  smi.setGpus(FOUR_H100);
  const token = newToken();
  // The stand-in is found on the agent's PATH, as nvidia-smi is on a GPU host.
  const { address, agentId } = await spawnAgent(t, join(dir, 'data'), token, {
    PATH: `${smi.dir}:${process.env.PATH}`,
    RC_AGENT_RUNTIME: 'docker',
    RC_AGENT_GPU_DETECT: 'auto',
    RC_AGENT_DOCKER_SOCKET: DOCKER_SOCKET,
    RC_AGENT_TOOLBOX: 'false',
    RC_AGENT_MEMORY_MB_PER_GPU: '256',
    RC_AGENT_CPUS_PER_GPU: '0.5',
    RC_AGENT_PIDS_PER_GPU: '200',
    RC_AGENT_FIREWALL: 'on',
    RC_AGENT_NETWORK_PREFIX: TEST_NET_PREFIX,
  });
  t.after(async () => {
    await removeAgentContainers(agentId);
    await removeAgentNetworks(agentId);
  });
  const client = createAgentClient({ address, token });
  t.after(() => client.close());
  const host = await client.getHost();
  assert.equal(host.gpuSource, 'nvidia-smi');
  assert.equal(host.gpus[0]!.model, 'NVIDIA H100 80GB HBM3');

  const id = `gpu-refused-${process.pid}`;
  const { instance } = await client.start({ instanceId: id, image: BUSYBOX, gpuCount: 1, startCommand: 'exec sleep 60' });
  assert.equal(instance.state, 'failed', 'refused in StartInstance itself');
  assert.equal(instance.reason, 'gpu_runtime_missing');
  assert.match(instance.detail, /nvidia-container-toolkit/);
  assert.match(instance.detail, /nvidia-ctk runtime configure --runtime=docker/);
  assert.doesNotMatch(instance.detail, /could not select device driver/);
  assert.deepEqual(instance.gpus, []);
  assert.equal((await client.getHost()).freeGpus, 4, 'no GPU is taken');
  assert.equal((await engine('GET', `/containers/rc-${id}/json`)).status, 404, 'no container was created');

  const cpu = `cpu-only-${process.pid}`;
  await client.start({ instanceId: cpu, image: BUSYBOX, gpuCount: 0, startCommand: 'exec sleep 60' });
  await waitForState(client, cpu, 'ready', 60_000);
  await client.remove(cpu);
});

test('engine GPU support from GET /info: an nvidia runtime or the toolkit hook', () => {
  assert.equal(engineGpuSupport({ Runtimes: { runc: { path: 'runc' }, nvidia: { path: 'nvidia-container-runtime' } } }, undefined).ok, true);
  assert.equal(engineGpuSupport({ Runtimes: { runc: {}, 'nvidia-cdi': {} } }, undefined).ok, true);
  assert.equal(engineGpuSupport({ Runtimes: { runc: {} } }, '/usr/bin/nvidia-container-runtime-hook').ok, true, 'the hook serves Driver nvidia');
  const none = engineGpuSupport({ Runtimes: { runc: {}, 'io.containerd.runc.v2': {} } }, undefined);
  assert.equal(none.ok, false);
  assert.match(none.detail, /nvidia-container-toolkit/);
  assert.equal(engineGpuSupport(undefined, undefined).ok, false);
  assert.equal(engineGpuSupport({ Runtimes: 'x' }, undefined).ok, false);
});
