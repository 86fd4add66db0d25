// The docker runtime: request building (pure, always tested) and, when a Docker engine answers,
// a real start/stop/remove through the agent.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { request } from 'node:http';
import { test } from 'node:test';
import * as api from '../../agent/docker-api.js';
import { normalizeSpec } from '../../agent/convert.js';
import { startTestAgent, waitForState } from './harness.js';

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

test('image references split into fromImage and tag', () => {
  assert.deepEqual(api.parseImage('vllm/vllm-openai:v0.6.0'), { fromImage: 'vllm/vllm-openai', tag: 'v0.6.0' });
  assert.deepEqual(api.parseImage('ubuntu'), { fromImage: 'ubuntu', tag: 'latest' });
  assert.deepEqual(api.parseImage('registry:5000/team/app'), { fromImage: 'registry:5000/team/app', tag: 'latest' });
  assert.deepEqual(api.parseImage('registry:5000/app:1.2'), { fromImage: 'registry:5000/app', tag: '1.2' });
  assert.deepEqual(api.parseImage('app@sha256:abc'), { fromImage: 'app', tag: 'sha256:abc' });
  assert.deepEqual(api.pullRequest('ubuntu:24.04'), { method: 'POST', path: '/v1.43/images/create?fromImage=ubuntu&tag=24.04' });
});

test('create: GPU device requests, labels with the instance id, port bindings, volume, env, command', () => {
  const req = api.createContainerRequest({
    spec, agentId: 'agent_x', gpus: [2, 3], hostPorts: new Map([[8000, 41000], [7860, 41001]]), bindIp: '0.0.0.0',
    homeDir: '/data/agent/instances/inst-1/home', volumePath: undefined, agentEnv: { RC_INSTANCE_ID: 'inst-1', CUDA_VISIBLE_DEVICES: '2,3' },
  });
  assert.equal(req.method, 'POST');
  assert.equal(req.path, '/v1.43/containers/create?name=rc-inst-1');
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
    '8000/tcp': [{ HostIp: '0.0.0.0', HostPort: '41000' }],
    '7860/tcp': [{ HostIp: '0.0.0.0', HostPort: '41001' }],
  });
  assert.deepEqual(body.HostConfig.DeviceRequests, [{ Driver: 'nvidia', DeviceIDs: ['2', '3'], Capabilities: [['gpu']] }]);
  assert.deepEqual(body.HostConfig.Mounts, [
    { Type: 'bind', Source: '/data/agent/instances/inst-1/home', Target: '/rc' },
    { Type: 'volume', Source: 'rc-vol-data-7', Target: '/workspace' },
  ]);
  assert.deepEqual(body.HostConfig.RestartPolicy, { Name: 'no' });

  // No GPUs: no device request; a host-path volume is a bind mount; no command keeps the image's own.
  const plain = api.createContainerRequest({
    spec: { ...spec, startCommand: '', volume: '/srv/keep', gpuCount: 0, ports: [], env: {} }, agentId: 'a', gpus: [], hostPorts: new Map(), bindIp: '127.0.0.1',
    homeDir: '/h', volumePath: '/srv/keep', agentEnv: {},
  }).body as Record<string, any>;
  assert.deepEqual(plain.HostConfig.DeviceRequests, []);
  assert.equal(plain.Entrypoint, undefined);
  assert.equal(plain.Cmd, undefined);
  assert.deepEqual(plain.HostConfig.Mounts[1], { Type: 'bind', Source: '/srv/keep', Target: '/workspace' });
  assert.ok(!plain.Env.some((e: string) => e.startsWith('PORT=')));
});

test('start, stop, remove, inspect, list by label and logs requests', () => {
  assert.deepEqual(api.startRequest('abc'), { method: 'POST', path: '/v1.43/containers/abc/start' });
  assert.deepEqual(api.stopRequest('abc', 2500), { method: 'POST', path: '/v1.43/containers/abc/stop?t=3' });
  assert.deepEqual(api.removeRequest('abc'), { method: 'DELETE', path: '/v1.43/containers/abc?force=true&v=false' });
  assert.deepEqual(api.inspectRequest('abc'), { method: 'GET', path: '/v1.43/containers/abc/json' });
  const list = api.listRequest('agent_x');
  assert.equal(list.method, 'GET');
  const url = new URL(list.path, 'http://docker');
  assert.equal(url.pathname, '/v1.43/containers/json');
  assert.equal(url.searchParams.get('all'), 'true');
  assert.deepEqual(JSON.parse(url.searchParams.get('filters')!), { label: ['rc.agent-id=agent_x'] });
  const logs = new URL(api.logsRequest('abc', 1700000000).path, 'http://docker');
  assert.equal(logs.searchParams.get('follow'), 'true');
  assert.equal(logs.searchParams.get('since'), '1700000000');
});

test('pull progress becomes a pending message; an error line is a pull failure', () => {
  const layers = new Map<string, string>();
  assert.equal(api.pullProgress({ status: 'Pulling from vllm/vllm-openai', id: 'v0.6.0' }, layers), 'pulling image (0/1 layers)');
  layers.clear();
  assert.equal(api.pullProgress({ status: 'Downloading', id: 'l1' }, layers), 'pulling image (0/1 layers)');
  assert.equal(api.pullProgress({ status: 'Already exists', id: 'l2' }, layers), 'pulling image (1/2 layers)');
  assert.equal(api.pullProgress({ status: 'Pull complete', id: 'l1' }, layers), 'pulling image (2/2 layers)');
  assert.deepEqual(api.pullProgress({ error: 'manifest unknown' }, layers), { error: 'manifest unknown' });
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

/** The Docker socket to test against, or undefined (with the reason) when no engine answers. */
async function dockerSocket(): Promise<{ socket?: string; why: string }> {
  const host = process.env.DOCKER_HOST;
  const socket = host?.startsWith('unix://') ? host.slice('unix://'.length) : host ? undefined : '/var/run/docker.sock';
  if (!socket) return { why: `DOCKER_HOST=${host} is not a unix socket` };
  if (!existsSync(socket)) return { why: `no Docker engine: ${socket} does not exist` };
  const ok = await new Promise<boolean>((resolve) => {
    const req = request({ socketPath: socket, path: '/_ping', timeout: 2000 }, (res) => { res.resume(); resolve(res.statusCode === 200); });
    req.on('error', () => resolve(false));
    req.on('timeout', () => { req.destroy(); resolve(false); });
    req.end();
  });
  return ok ? { socket, why: '' } : { why: `no Docker engine answers on ${socket}` };
}

test('docker runtime against a real engine: pull, start, ready, stop, remove', async (t) => {
  const { socket, why } = await dockerSocket();
  if (!socket) {
    t.skip(`skipped: ${why}`);
    return;
  }
  const { client } = await startTestAgent(t, { runtime: 'docker', dockerSocket: socket, readyTimeoutMs: 120_000 });
  await client.start({
    instanceId: `dock-${process.pid}`, image: 'python:3-alpine', startCommand: 'python -m http.server $PORT', ports: [8000],
  });
  const ready = await waitForState(client, `dock-${process.pid}`, 'ready', 180_000);
  const [e] = ready.endpoints;
  assert.equal((await fetch(`http://127.0.0.1:${e!.hostPort}/`)).status, 200);
  assert.equal((await client.stop(ready.instanceId, 1000)).state, 'stopped');
  assert.equal(await client.remove(ready.instanceId), true);
  assert.equal(await client.remove(ready.instanceId), false);
});
