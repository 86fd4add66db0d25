// The docker runtime's requests as data (always tested); the real engine is tested in
// docker-engine.test.ts.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import * as api from '../../agent/docker-api.js';
import { instanceGpuEnv } from '../../agent/gpus.js';
import { normalizeSpec } from '../../agent/convert.js';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { isolationRuleset, jumpRule, privateNameservers, relayRule } from '../../agent/firewall.js';
import { formatCidr, freeSubnet, hostRoutes, overlaps, parseCidr, subnetAddresses } from '../../agent/subnets.js';

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
    agentEnv: { RC_INSTANCE_ID: 'inst-1', ...instanceGpuEnv('docker', [2, 3], ['GPU-aa', 'GPU-bb']) },
    limits,
    diskQuotaGb: undefined,
    network: 'rc-net-inst-1',
  });
  assert.equal(req.method, 'POST');
  assert.equal(req.path, '/containers/create?name=rc-inst-1');
  const body = req.body as Record<string, any>;
  assert.equal(body.Image, 'vllm/vllm-openai:v0.6.0');
  assert.deepEqual(body.Entrypoint, ['/bin/sh', '-c']);
  assert.deepEqual(body.Cmd, ['vllm serve m --host 0.0.0.0 --port 8000']);
  assert.ok(body.Env.includes('PORT=8000'), 'PORT is the routed port inside the container');
  assert.ok(body.Env.includes('HF_TOKEN=hf'));
  assert.ok(body.Env.includes('NVIDIA_VISIBLE_DEVICES=GPU-aa,GPU-bb'), 'the GPUs the engine request names');
  assert.ok(!body.Env.some((e: string) => e.startsWith('CUDA_VISIBLE_DEVICES=')), 'no host index: CUDA numbers the container GPUs from 0');
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
  assert.equal(hc.NetworkMode, 'rc-net-inst-1', "the instance's own network, never the default bridge");
  assert.deepEqual(hc.CapDrop, ['ALL']);
  assert.deepEqual(hc.CapAdd, ['AUDIT_WRITE', 'CHOWN', 'DAC_OVERRIDE', 'FOWNER', 'FSETID', 'KILL', 'NET_BIND_SERVICE', 'SETGID', 'SETUID', 'SYS_CHROOT']);
  assert.ok(!hc.CapAdd.includes('NET_RAW') && !hc.CapAdd.includes('MKNOD'));
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
    network: 'rc-net-inst-1',
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

test('instance networks: a bridge of 15 characters at most with the prefix, a /29, labels, nothing else joins', () => {
  assert.equal(api.networkName('inst-1'), 'rc-net-inst-1');
  const bridge = api.bridgeName('rc', 'agent_x', 'inst-1');
  assert.match(bridge, /^rc-[0-9a-f]{12}$/);
  assert.notEqual(api.bridgeName('rc', 'agent_y', 'inst-1'), bridge, 'another agent, another bridge');
  assert.match(api.bridgeName('rca12345', 'a', 'b'), /^rca12345-[0-9a-f]{6}$/);
  const req = api.networkCreateRequest({
    name: 'rc-net-inst-1',
    bridge,
    subnet: '10.231.0.8/29',
    gateway: '10.231.0.9',
    agentId: 'agent_x',
    instanceId: 'inst-1',
  });
  assert.equal(req.method, 'POST');
  assert.equal(req.path, '/networks/create');
  const body = req.body as Record<string, any>;
  assert.equal(body.Name, 'rc-net-inst-1');
  assert.equal(body.CheckDuplicate, true);
  assert.equal(body.Driver, 'bridge');
  assert.equal(body.Attachable, false);
  assert.deepEqual(body.IPAM, { Driver: 'default', Config: [{ Subnet: '10.231.0.8/29', Gateway: '10.231.0.9' }] });
  assert.equal(body.Options['com.docker.network.bridge.name'], bridge);
  assert.deepEqual(body.Labels, { 'rc.agent-id': 'agent_x', 'rc.instance-id': 'inst-1' });
  assert.deepEqual(api.networkRemoveRequest('rc-net-inst-1'), { method: 'DELETE', path: '/networks/rc-net-inst-1' });
  const mine = new URL(api.agentNetworksRequest('agent_x').path, 'http://docker');
  assert.deepEqual(JSON.parse(mine.searchParams.get('filters')!), { label: ['rc.agent-id=agent_x'] });
});

test('subnets: /29 blocks of the pool that overlap no network or route in use, from any start, wrapping around', () => {
  const pool = parseCidr('10.231.0.0/16')!;
  assert.deepEqual(parseCidr('10.231.7.9/16'), pool, 'the address is masked');
  assert.equal(parseCidr('10.231.0.0'), undefined);
  assert.equal(parseCidr('300.1.1.1/8'), undefined);
  assert.equal(formatCidr(freeSubnet(pool, [])!), '10.231.0.0/29');
  const taken = ['10.231.0.0/29', '10.231.0.8/30', '10.0.0.0/24'].map((c) => parseCidr(c)!);
  assert.equal(formatCidr(freeSubnet(pool, taken)!), '10.231.0.16/29');
  assert.equal(formatCidr(freeSubnet(pool, taken, 8191)!), '10.231.255.248/29');
  assert.equal(formatCidr(freeSubnet(pool, [parseCidr('10.231.255.248/29')!], 8191)!), '10.231.0.0/29', 'wraps around');
  assert.equal(freeSubnet(pool, [parseCidr('10.0.0.0/8')!]), undefined, 'a full pool');
  assert.equal(freeSubnet(parseCidr('10.1.0.0/30')!, []), undefined, 'a pool smaller than a subnet');
  assert.deepEqual(subnetAddresses(parseCidr('10.231.0.16/29')!), { subnet: '10.231.0.16/29', gateway: '10.231.0.17' });
  assert.ok(overlaps(parseCidr('10.0.0.0/8')!, parseCidr('10.231.0.0/29')!));
  assert.ok(!overlaps(parseCidr('10.231.0.0/29')!, parseCidr('10.231.0.8/29')!));
});

test("the host's routes are read from /proc/net/route (the default route is no conflict)", (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-routes-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'route');
  writeFileSync(
    file,
    [
      'Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT',
      'eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0',
      'docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0',
      'eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0',
    ].join('\n'),
  );
  assert.deepEqual(hostRoutes(file).map(formatCidr), ['172.17.0.0/16', '192.0.2.0/24']);
  assert.deepEqual(hostRoutes(join(dir, 'absent')), []);
});

test('firewall rules: from the bridges to the host only answers, the relay and DNS; forwarded to other bridges and private ranges refused', (t) => {
  const rules = isolationRuleset({ prefix: 'rc', pool: '10.231.0.0/16', blocked: ['198.51.100.0/24'], nameservers: ['10.255.255.53'] }).split('\n');
  const reject = '-j REJECT --reject-with icmp-port-unreachable';
  assert.deepEqual(rules.slice(0, 3), ['*filter', ':rc-isolate-in - [0:0]', ':rc-isolate-fwd - [0:0]']);
  const input = rules.filter((r) => r.startsWith('-A rc-isolate-in '));
  assert.deepEqual(input, [
    '-A rc-isolate-in -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT',
    '-A rc-isolate-in -j rc-isolate-relay',
    '-A rc-isolate-in -d 10.255.255.53/32 -p udp -m udp --dport 53 -j ACCEPT',
    '-A rc-isolate-in -d 10.255.255.53/32 -p tcp -m tcp --dport 53 -j ACCEPT',
    `-A rc-isolate-in ${reject}`,
  ]);
  const fwd = rules.filter((r) => r.startsWith('-A rc-isolate-fwd '));
  assert.equal(fwd[0], '-A rc-isolate-fwd -m conntrack --ctstate RELATED,ESTABLISHED -j RETURN');
  for (const d of [
    '-o rc-+',
    '-o docker0',
    '-d 10.0.0.0/8',
    '-d 172.16.0.0/12',
    '-d 192.168.0.0/16',
    '-d 100.64.0.0/10',
    '-d 169.254.0.0/16',
    '-d 198.51.100.0/24',
  ])
    assert.ok(fwd.includes(`-A rc-isolate-fwd ${d} ${reject}`), d);
  assert.ok(fwd.indexOf('-A rc-isolate-fwd -d 10.255.255.53/32 -p udp -m udp --dport 53 -j RETURN') < fwd.indexOf(`-A rc-isolate-fwd -d 10.0.0.0/8 ${reject}`));
  assert.equal(rules.at(-2), 'COMMIT');
  assert.deepEqual(jumpRule('rc', 'rc-isolate-in'), ['-i', 'rc-+', '-j', 'rc-isolate-in']);
  assert.deepEqual(relayRule('172.17.0.1', 7000, 'agent_x'), [
    '-d',
    '172.17.0.1/32',
    '-p',
    'tcp',
    '-m',
    'tcp',
    '--dport',
    '7000',
    '-m',
    'comment',
    '--comment',
    'rc relay agent_x',
    '-j',
    'ACCEPT',
  ]);

  const dir = mkdtempSync(join(tmpdir(), 'rc-resolv-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'resolv.conf'), 'nameserver 10.0.0.2\nnameserver 1.1.1.1\nnameserver 127.0.0.53\n# nameserver 192.168.1.1\nnameserver 10.0.0.2\n');
  assert.deepEqual(privateNameservers(join(dir, 'resolv.conf')), ['10.0.0.2'], 'private ones only, once');
});
