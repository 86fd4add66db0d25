// The docker runtime's requests as data (always tested); the real engine is tested in
// docker-engine.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as api from '../../agent/docker-api.js';
import { normalizeSpec } from '../../agent/convert.js';

const spec = normalizeSpec({
  instanceId: 'inst-1',
  image: 'vllm/vllm-openai:v0.6.0',
  instanceType: 'vllm',
  startCommand: 'vllm serve m --host 0.0.0.0 --port 8000',
  env: { HF_TOKEN: 'hf', PORT: 'spec-value-overridden' },
  ports: [8000, 7860],
  gpuCount: 2,
  diskGb: 150,
  volume: 'data-7',
});

const limits = { memoryBytes: 1024 ** 3, nanoCpus: 2e9, pids: 512 };

test('API version negotiation: the newer of both, never below 1.41', () => {
  assert.equal(api.negotiateApiVersion('1.41'), '1.41');
  assert.equal(api.negotiateApiVersion('1.42'), '1.42');
  assert.equal(api.negotiateApiVersion('1.47'), api.MAX_API_VERSION);
  assert.equal(api.negotiateApiVersion('1.40'), undefined);
  assert.equal(api.negotiateApiVersion(undefined), '1.41');
});

test("the bridge gateway of an implicit IPAM config is the subnet's first address", () => {
  assert.equal(api.firstHostAddress('172.17.0.0/16'), '172.17.0.1');
  assert.equal(api.firstHostAddress('10.213.5.0/24'), '10.213.5.1');
});

test('pull policy: a present image is used as it is unless the policy is always', () => {
  assert.equal(api.shouldPull('if-not-present', true), false);
  assert.equal(api.shouldPull('if-not-present', false), true);
  assert.equal(api.shouldPull('always', true), true);
  assert.equal(api.shouldPull('never', false), false);
});

test("limits scale with the GPU count; CPUs are capped at the host's", () => {
  assert.deepEqual(api.scaleLimits({ memoryMb: 1024, cpus: 2, pids: 100 }, 4, 64), { memoryBytes: 4 * 1024 ** 3, nanoCpus: 8e9, pids: 400 });
  assert.deepEqual(api.scaleLimits({ memoryMb: 1024, cpus: 2, pids: 100 }, 0, 64), { memoryBytes: 1024 ** 3, nanoCpus: 2e9, pids: 100 });
  assert.equal(api.scaleLimits({ memoryMb: 1, cpus: 8, pids: 1 }, 4, 2).nanoCpus, 2e9);
});

test('image references split into fromImage and tag', () => {
  assert.deepEqual(api.parseImage('vllm/vllm-openai:v0.6.0'), { fromImage: 'vllm/vllm-openai', tag: 'v0.6.0' });
  assert.deepEqual(api.parseImage('ubuntu'), { fromImage: 'ubuntu', tag: 'latest' });
  assert.deepEqual(api.parseImage('registry:5000/team/app'), { fromImage: 'registry:5000/team/app', tag: 'latest' });
  assert.deepEqual(api.parseImage('registry:5000/app:1.2'), { fromImage: 'registry:5000/app', tag: '1.2' });
  assert.deepEqual(api.parseImage('app@sha256:abc'), { fromImage: 'app', tag: 'sha256:abc' });
  assert.deepEqual(api.pullRequest('ubuntu:24.04'), { method: 'POST', path: '/images/create?fromImage=ubuntu&tag=24.04' });
});

test('create: GPU device requests by UUID, labels with the instance id, port bindings, volume, env, command, limits, init', () => {
  const req = api.createContainerRequest({
    spec,
    agentId: 'agent_x',
    gpus: [2, 3],
    gpuDeviceIds: ['GPU-aa', 'GPU-bb'],
    hostPorts: new Map([
      [8000, 41000],
      [7860, 41001],
    ]),
    bindIp: '10.0.0.5',
    homeDir: '/data/agent/instances/inst-1/home',
    volume: { type: 'volume', source: 'rc-vol-agent_x-data-7' },
    authorizedKeysFile: undefined,
    toolbox: { dir: '/d/toolbox', dist: '/p/dist', nodeModules: '/p/node_modules' },
    imagePath: '/usr/bin:/bin',
    agentEnv: { RC_INSTANCE_ID: 'inst-1', CUDA_VISIBLE_DEVICES: '2,3' },
    limits,
    diskQuotaGb: undefined,
  });
  assert.equal(req.method, 'POST');
  assert.equal(req.path, '/containers/create?name=rc-inst-1');
  const body = req.body as Record<string, any>;
  assert.equal(body.Image, 'vllm/vllm-openai:v0.6.0');
  assert.deepEqual(body.Entrypoint, ['/bin/sh', '-c']);
  assert.deepEqual(body.Cmd, ['vllm serve m --host 0.0.0.0 --port 8000']);
  assert.ok(body.Env.includes('PORT=8000'), 'PORT is the routed port inside the container');
  assert.ok(body.Env.includes('HF_TOKEN=hf'));
  assert.ok(body.Env.includes('CUDA_VISIBLE_DEVICES=2,3'));
  assert.ok(body.Env.includes('RC_VOLUME_DIR=/workspace'));
  assert.equal(body.Env.filter((e: string) => e.startsWith('PORT=')).length, 1);
  assert.deepEqual(body.Labels, { 'rc.agent-id': 'agent_x', 'rc.instance-id': 'inst-1', 'rc.instance-type': 'vllm', 'rc.disk-gb': '150' });
  assert.deepEqual(body.ExposedPorts, { '8000/tcp': {}, '7860/tcp': {} });
  assert.deepEqual(body.HostConfig.PortBindings, {
    '8000/tcp': [{ HostIp: '10.0.0.5', HostPort: '41000' }],
    '7860/tcp': [{ HostIp: '10.0.0.5', HostPort: '41001' }],
  });
  assert.deepEqual(body.HostConfig.DeviceRequests, [{ Driver: 'nvidia', DeviceIDs: ['GPU-aa', 'GPU-bb'], Capabilities: [['gpu']] }]);
  assert.deepEqual(body.HostConfig.Mounts, [
    { Type: 'bind', Source: '/data/agent/instances/inst-1/home', Target: '/rc' },
    { Type: 'volume', Source: 'rc-vol-agent_x-data-7', Target: '/workspace' },
    { Type: 'bind', Source: '/d/toolbox', Target: '/opt/rc', ReadOnly: true },
    { Type: 'bind', Source: '/p/dist', Target: '/opt/rc/app/dist', ReadOnly: true },
    { Type: 'bind', Source: '/p/node_modules', Target: '/opt/rc/app/node_modules', ReadOnly: true },
  ]);
  assert.ok(body.Env.includes('PATH=/usr/bin:/bin:/opt/rc/bin'), "the toolbox is appended to the image's PATH");
  const hc = body.HostConfig;
  assert.deepEqual(hc.RestartPolicy, { Name: 'no' });
  assert.equal(hc.Init, true);
  assert.equal(hc.Privileged, false);
  assert.equal(hc.NetworkMode, 'bridge');
  assert.deepEqual(hc.SecurityOpt, ['no-new-privileges']);
  assert.equal(hc.Memory, limits.memoryBytes);
  assert.equal(hc.NanoCpus, limits.nanoCpus);
  assert.equal(hc.PidsLimit, limits.pids);
  assert.equal(hc.StorageOpt, undefined);

  // Simulated GPUs: no device request (the engine has no nvidia driver); a host-path volume is a
  // bind mount; no command keeps the image's own; the SSH key is root's authorized_keys; a disk quota where supported.
  const plain = api.createContainerRequest({
    spec: { ...spec, startCommand: '', volume: '/srv/keep', ports: [], env: {} },
    agentId: 'a',
    gpus: [0, 1],
    gpuDeviceIds: undefined,
    hostPorts: new Map(),
    bindIp: '127.0.0.1',
    homeDir: '/h',
    volume: { type: 'bind', source: '/srv/keep' },
    authorizedKeysFile: '/h/.ssh/authorized_keys',
    toolbox: undefined,
    imagePath: undefined,
    agentEnv: {},
    limits,
    diskQuotaGb: 150,
  }).body as Record<string, any>;
  assert.deepEqual(plain.HostConfig.DeviceRequests, []);
  assert.deepEqual(plain.HostConfig.Mounts[2], { Type: 'bind', Source: '/h/.ssh/authorized_keys', Target: '/root/.ssh/authorized_keys', ReadOnly: true });
  assert.deepEqual(plain.HostConfig.StorageOpt, { size: '150G' });
  assert.ok(!plain.Env.some((e: string) => e.startsWith('PATH=')));
  assert.equal(plain.Entrypoint, undefined);
  assert.equal(plain.Cmd, undefined);
  assert.deepEqual(plain.HostConfig.Mounts[1], { Type: 'bind', Source: '/srv/keep', Target: '/workspace' });
  assert.ok(!plain.Env.some((e: string) => e.startsWith('PORT=')));
});

test('start, stop, remove, inspect, list by label and logs requests', () => {
  assert.deepEqual(api.startRequest('abc'), { method: 'POST', path: '/containers/abc/start' });
  assert.deepEqual(api.stopRequest('abc', 2500), { method: 'POST', path: '/containers/abc/stop?t=3' });
  assert.deepEqual(api.removeRequest('abc'), { method: 'DELETE', path: '/containers/abc?force=true&v=false' });
  assert.deepEqual(api.inspectRequest('abc'), { method: 'GET', path: '/containers/abc/json' });
  const list = api.listRequest('agent_x');
  assert.equal(list.method, 'GET');
  const url = new URL(list.path, 'http://docker');
  assert.equal(url.pathname, '/containers/json');
  assert.equal(url.searchParams.get('all'), 'true');
  assert.deepEqual(JSON.parse(url.searchParams.get('filters')!), { label: ['rc.agent-id=agent_x'] });
  const logs = new URL(api.logsRequest('abc', 1700000000).path, 'http://docker');
  assert.equal(logs.searchParams.get('follow'), 'true');
  assert.equal(logs.searchParams.get('since'), '1700000000');
});

test('pull progress becomes a pending message with layers and bytes; an error line is a pull failure', () => {
  const p = new api.PullProgress();
  assert.equal(p.push({ status: 'Pulling from vllm/vllm-openai', id: 'v0.6.0' }), 'pulling image');
  assert.equal(p.push({ status: 'Pulling fs layer', id: 'aaaaaaaaaaaa' }), 'pulling image: 0/1 layers');
  assert.equal(p.push({ status: 'Already exists', id: 'bbbbbbbbbbbb' }), 'pulling image: 1/2 layers');
  assert.equal(
    p.push({ status: 'Downloading', id: 'aaaaaaaaaaaa', progressDetail: { current: 1.2e9, total: 4.8e9 } }),
    'pulling image: 1/2 layers, 1.2 GB of 4.8 GB',
  );
  assert.equal(p.push({ status: 'Pull complete', id: 'aaaaaaaaaaaa' }), 'pulling image: 2/2 layers, 4.8 GB of 4.8 GB');
  assert.deepEqual(p.push({ errorDetail: { message: 'manifest unknown' } }), { error: 'manifest unknown' });
});

test('the multiplexed log stream is split into payloads across chunk boundaries', () => {
  const frame = (stream: number, text: string) => {
    const payload = Buffer.from(text);
    const header = Buffer.alloc(8);
    header[0] = stream;
    header.writeUInt32BE(payload.length, 4);
    return Buffer.concat([header, payload]);
  };
  const all = Buffer.concat([frame(1, 'out line\n'), frame(2, 'err line\n'), frame(1, 'x')]);
  const d = new api.LogDemuxer();
  const out = [...d.push(all.subarray(0, 5)), ...d.push(all.subarray(5, 20)), ...d.push(all.subarray(20))];
  assert.deepEqual(out.map(String), ['out line\n', 'err line\n', 'x']);
});
