// The docker runtime against the real engine (skipped without one, failed with RC_REQUIRE_DOCKER=1):
// launch to ready, a late listener, a failing start, pull failures, stop and remove of a container
// that ignores SIGTERM, limits and ports in `docker inspect`, the account volume across relaunch,
// logs, what a tenant's container cannot reach, SSH, rc-tunnel, and an agent SIGKILLed at three
// points. Every container, volume and image the tests make carries the test agent's id or an
// rc-test prefix, and is removed afterwards.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import { createAgentClient, type AgentClient } from '../../agent/client.js';
import { ensureLocalImage } from '../../agent/images/local-images.js';
import type { AgentOptions } from '../../agent/server.js';
import { DOCKER_SOCKET, dockerAvailable, localImagesBuildable, tcpConnects, waitFor } from '../helpers.js';
import { engine, removeAgentNetworks, removeTestFirewall, TEST_NET_PREFIX, testIsolation } from './docker-isolation-harness.js';
import { collectEvents, killChild, newToken, spawnAgent, startTestAgent, tempDir, waitForState } from './harness.js';
import { busyboxRoot } from '../../agent/images/rootfs.js';
import { createHash } from 'node:crypto';
import { createServer as createHttpServer } from 'node:http';
import { gzipSync } from 'node:zlib';

const BUSYBOX = 'rc-test/busybox:1';
const SSHD = 'rc-test/sshd:1';
const run = promisify(execFile);

// The firewall chains of this process's prefix go once every agent of the file is closed.
after(removeTestFirewall);

const labelled = (label: string) => `/containers/json?all=true&filters=${encodeURIComponent(JSON.stringify({ label: [label] }))}`;

/** Removes every container and volume labelled with the agent's id. */
async function cleanupAgent(agentId: string): Promise<void> {
  const { json } = await engine('GET', labelled(`rc.agent-id=${agentId}`));
  for (const c of json as { Id: string }[]) await engine('DELETE', `/containers/${c.Id}?force=true`);
  const vols = await engine('GET', `/volumes?filters=${encodeURIComponent(JSON.stringify({ label: [`rc.agent-id=${agentId}`] }))}`);
  for (const v of (vols.json.Volumes ?? []) as { Name: string }[]) await engine('DELETE', `/volumes/${v.Name}`);
  await removeAgentNetworks(agentId);
}

/** A docker-runtime test agent (small limits, no toolbox unless asked), its containers and volumes removed afterwards. */
async function dockerAgent(t: TestContext, options: Partial<AgentOptions> = {}) {
  const a = await startTestAgent(t, {
    runtime: 'docker',
    dockerSocket: DOCKER_SOCKET,
    readyTimeoutMs: 60_000,
    stopGraceMs: 2000,
    ...options,
    docker: { limitsPerGpu: { memoryMb: 256, cpus: 0.5, pids: 200 }, toolbox: false, isolation: testIsolation, ...options.docker },
  });
  t.after(() => cleanupAgent(a.agent.agentId));
  return a;
}

async function logsOf(client: AgentClient, id: string): Promise<string> {
  const out: string[] = [];
  for await (const line of client.logs(id, { tail: 1000 })) out.push(line);
  return out.join('\n');
}

const imagesReady = new Map<string, Promise<boolean>>();
/** The engine answers and `images` (busybox by default) are built, once per file; else the test is skipped (failed in CI). */
async function needEngine(t: TestContext, images: string[] = [BUSYBOX]): Promise<boolean> {
  if (!(await dockerAvailable(t)) || !(await localImagesBuildable(t, ...images))) return false;
  for (const image of images) {
    if (!imagesReady.has(image)) imagesReady.set(image, ensureLocalImage(DOCKER_SOCKET, image));
    await imagesReady.get(image);
  }
  return true;
}

test('launch to ready: API version negotiated, ports on 127.0.0.1 only, limits, init and labels in docker inspect, logs, stop and remove', async (t) => {
  if (!(await needEngine(t))) return;
  const { client, agent } = await dockerAgent(t);
  const id = `dk-ready-${process.pid}`;
  await client.start({
    instanceId: id,
    image: BUSYBOX,
    startCommand: 'echo hello from $RC_INSTANCE_ID; mkdir -p /www; echo page > /www/index.html; exec httpd -f -p $PORT -h /www',
    ports: [8000],
    gpuCount: 2,
  });
  const ready = await waitForState(client, id, 'ready', 60_000);
  const [e] = ready.endpoints;
  assert.equal(e!.host, '127.0.0.1');
  assert.equal(await (await fetch(`http://127.0.0.1:${e!.hostPort}/`)).text(), 'page\n');

  const { json: c } = await engine('GET', `/containers/rc-${id}/json`);
  const hc = c.HostConfig;
  assert.deepEqual(hc.PortBindings['8000/tcp'], [{ HostIp: '127.0.0.1', HostPort: String(e!.hostPort) }], 'never all interfaces');
  assert.ok(!(c.NetworkSettings.Ports['8000/tcp'] as { HostIp: string }[]).some((b) => b.HostIp === '0.0.0.0' || b.HostIp === '::'));
  assert.equal(hc.Init, true);
  assert.equal(hc.Privileged, false);
  assert.equal(hc.NetworkMode, `rc-net-${id}`, 'a network of its own');
  assert.deepEqual(Object.keys(c.NetworkSettings.Networks), [`rc-net-${id}`]);
  const { json: net } = await engine('GET', `/networks/rc-net-${id}`);
  assert.equal(net.Labels['rc.agent-id'], agent.agentId);
  assert.match(net.IPAM.Config[0].Subnet, /^10\.231\.\d+\.\d+\/29$/);
  assert.match(net.Options['com.docker.network.bridge.name'], new RegExp(`^${TEST_NET_PREFIX}-[0-9a-f]+$`));
  assert.deepEqual(hc.CapDrop, ['ALL']);
  assert.deepEqual(hc.SecurityOpt, ['no-new-privileges']);
  assert.equal(hc.Memory, 2 * 256 * 1024 * 1024, 'memory scaled by 2 GPUs');
  assert.equal(hc.NanoCpus, 1e9, 'CPUs scaled by 2 GPUs');
  assert.equal(hc.PidsLimit, 400);
  assert.deepEqual(hc.DeviceRequests ?? [], [], 'simulated GPUs: no device request');
  assert.ok(
    !(hc.Binds ?? []).some((b: string) => b.includes('docker.sock')) && !(hc.Mounts ?? []).some((m: { Source: string }) => m.Source.includes('docker.sock')),
  );
  assert.equal(c.Config.Labels['rc.agent-id'], agent.agentId);
  assert.equal(c.Config.Labels['rc.instance-id'], id);
  assert.ok(!(c.Config.Env as string[]).some((e) => e.startsWith('CUDA_VISIBLE_DEVICES=')), 'containers: no host GPU index (CUDA numbers their GPUs from 0)');
  assert.ok((c.Config.Env as string[]).includes('NVIDIA_VISIBLE_DEVICES=void'), 'simulated GPUs: no device');

  assert.match(await logsOf(client, id), new RegExp(`hello from ${id}`));

  const host = await client.getHost();
  assert.equal(host.freeGpus, 2);
  assert.equal((await client.stop(id, 1000)).state, 'stopped');
  assert.equal((await engine('GET', `/containers/rc-${id}/json`)).status, 404, 'stopped means the container is gone');
  assert.equal((await engine('GET', `/networks/rc-net-${id}`)).status, 404, 'and its network');
  assert.equal((await client.getHost()).freeGpus, 4, 'GPUs are free once the container is gone');
  assert.equal(await client.remove(id), true);
  assert.equal(await client.remove(id), false);
});

test('logs: the tail, then lines as they come (StreamLogs follow)', async (t) => {
  if (!(await needEngine(t))) return;
  const { client } = await dockerAgent(t);
  const id = `dk-logs-${process.pid}`;
  await client.start({ instanceId: id, image: BUSYBOX, startCommand: 'echo first; while true; do sleep 1; echo tick; done' });
  await waitForState(client, id, 'ready');
  const seen: string[] = [];
  const controller = new AbortController();
  const reading = (async () => {
    for await (const line of client.logs(id, { tail: 10, follow: true, signal: controller.signal })) {
      seen.push(line);
      if (seen.filter((l) => l === 'tick').length >= 2) break;
    }
  })().catch(() => undefined);
  await waitFor(() => seen.filter((l) => l === 'tick').length >= 2, 30_000);
  controller.abort();
  await reading;
  assert.equal(seen[0], 'first');
});

test('an app that listens late is pending until it listens (readiness inside the container, not the published port)', async (t) => {
  if (!(await needEngine(t))) return;
  const { client } = await dockerAgent(t);
  const id = `dk-late-${process.pid}`;
  await client.start({ instanceId: id, image: BUSYBOX, startCommand: 'sleep 3; echo LISTENING; exec httpd -f -p $PORT', ports: [7860] });
  // docker-proxy accepts on the published port long before the app listens.
  const waiting = await waitFor(async () => (await client.list()).find((i) => i.instanceId === id && i.message === 'waiting for port'), 30_000);
  const hostPort = waiting.endpoints[0]!.hostPort;
  const proxyAccepts = await tcpConnects('127.0.0.1', hostPort, 2000);
  const firstReady = await waitForState(client, id, 'ready', 60_000);
  assert.equal(firstReady.state, 'ready');
  assert.match(await logsOf(client, id), /LISTENING/, 'ready only after the app printed that it listens');
  t.diagnostic(`published port accepted while the app did not listen yet: ${proxyAccepts}`);
});

test('a failing start: the exit code and the last lines in detail; nothing left running', async (t) => {
  if (!(await needEngine(t))) return;
  const { client } = await dockerAgent(t);
  const id = `dk-fail-${process.pid}`;
  await client.start({ instanceId: id, image: BUSYBOX, startCommand: 'echo something broke >&2; exit 3', ports: [8000] });
  const failed = await waitForState(client, id, 'failed', 60_000);
  assert.equal(failed.reason, 'exited');
  assert.match(failed.detail, /exit status 3/);
  assert.match(failed.detail, /something broke/);
  assert.equal((await engine('GET', `/containers/rc-${id}/json`)).status, 404);
});

test("pull failures: a missing image with pull policy never, and a registry that refuses (the engine's message in detail)", async (t) => {
  if (!(await needEngine(t))) return;
  // A local "registry" that answers 404 to everything.
  const registry = createServer((s) => s.end('HTTP/1.1 404 Not Found\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}'));
  await new Promise<void>((r) => registry.listen(0, '127.0.0.1', r));
  t.after(() => registry.close());
  const port = (registry.address() as { port: number }).port;

  const never = await dockerAgent(t, { docker: { pullPolicy: 'never' } });
  await never.client.start({ instanceId: `dk-never-${process.pid}`, image: 'rc-test/absent:1' });
  const f1 = await waitForState(never.client, `dk-never-${process.pid}`, 'failed');
  assert.equal(f1.reason, 'pull_failed');
  assert.match(f1.detail, /not present.*never/);

  const { client } = await dockerAgent(t);
  await client.start({ instanceId: `dk-pull-${process.pid}`, image: `127.0.0.1:${port}/rc-test/absent:1` });
  const f2 = await waitForState(client, `dk-pull-${process.pid}`, 'failed', 60_000);
  assert.equal(f2.reason, 'pull_failed');
  assert.match(f2.detail, /Pulling 127\.0\.0\.1:\d+\/rc-test\/absent:1 failed: \S+/);
});

/**
 * A minimal registry (Docker Registry HTTP API v2, plain HTTP on loopback, which the engine
 * allows) serving one image: busybox in one gzipped layer, sent slowly so the pull's progress shows.
 */
async function startSlowRegistry(t: TestContext): Promise<{ image: string }> {
  const root = tempDir(t, 'rc-registry-');
  busyboxRoot(join(root, 'fs'));
  const tarball = (await run('tar', ['-C', join(root, 'fs'), '-c', '.'], { encoding: 'buffer', maxBuffer: 64 * 1024 * 1024 })).stdout as Buffer;
  const layer = gzipSync(tarball);
  const sha = (b: Buffer | string) => `sha256:${createHash('sha256').update(b).digest('hex')}`;
  const config = Buffer.from(
    JSON.stringify({
      architecture: 'amd64',
      os: 'linux',
      config: { Env: ['PATH=/bin'], Cmd: ['/bin/sh'] },
      rootfs: { type: 'layers', diff_ids: [sha(tarball)] },
      history: [{ created_by: 'rc test registry' }],
    }),
  );
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: 'application/vnd.docker.distribution.manifest.v2+json',
      config: { mediaType: 'application/vnd.docker.container.image.v1+json', size: config.length, digest: sha(config) },
      layers: [{ mediaType: 'application/vnd.docker.image.rootfs.diff.tar.gzip', size: layer.length, digest: sha(layer) }],
    }),
  );
  const blobs = new Map([
    [sha(config), config],
    [sha(layer), layer],
  ]);
  const server = createHttpServer((req, res) => {
    res.setHeader('docker-distribution-api-version', 'registry/2.0');
    const url = req.url ?? '';
    if (url === '/v2/') return res.end('{}');
    if (/\/manifests\//.test(url)) {
      res.writeHead(200, {
        'content-type': 'application/vnd.docker.distribution.manifest.v2+json',
        'docker-content-digest': sha(manifest),
        'content-length': manifest.length,
      });
      return res.end(req.method === 'HEAD' ? undefined : manifest);
    }
    const blob = blobs.get(url.split('/blobs/')[1] ?? '');
    if (!blob) {
      res.writeHead(404);
      return res.end();
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': blob.length });
    if (req.method === 'HEAD') return res.end();
    let at = 0;
    const timer = setInterval(() => {
      res.write(blob.subarray(at, at + 32 * 1024));
      at += 32 * 1024;
      if (at >= blob.length) {
        clearInterval(timer);
        res.end();
      }
    }, 60);
    res.on('close', () => clearInterval(timer));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  const image = `127.0.0.1:${(server.address() as { port: number }).port}/rc-test/pulled:1`;
  t.after(() => engine('DELETE', `/images/${encodeURIComponent(image)}?force=true`));
  return { image };
}

test('a real pull: layers and bytes in the pending message, then the pulled image runs', async (t) => {
  if (!(await needEngine(t))) return;
  const { image } = await startSlowRegistry(t);
  const { client } = await dockerAgent(t);
  const id = `dk-pulled-${process.pid}`;
  const messages = new Set<string>();
  const watch = collectEvents(client);
  t.after(watch.stop);
  await client.start({ instanceId: id, image, startCommand: 'exec httpd -f -p $PORT', ports: [8000] });
  await waitForState(client, id, 'ready', 90_000);
  for (const e of watch.events()) if (e.instanceId === id) messages.add(e.message);
  const progress = [...messages].filter((m) => m.startsWith('pulling image: '));
  t.diagnostic(progress.join(' | '));
  assert.ok(
    progress.some((m) => /^pulling image: [01]\/1 layers, [\d.]+ [kMG]?B of [\d.]+ [kMG]?B$/.test(m)),
    [...messages].join(' | '),
  );
});

test('stop and remove within the grace period even when PID 1 ignores SIGTERM; the next launch starts', async (t) => {
  if (!(await needEngine(t))) return;
  const { client } = await dockerAgent(t);
  const id = `dk-stubborn-${process.pid}`;
  await client.start({ instanceId: id, image: BUSYBOX, startCommand: 'trap "" TERM; while true; do sleep 1; done', gpuCount: 4 });
  await waitForState(client, id, 'ready');
  assert.equal((await client.stop(id, 2000)).state, 'stopped');
  assert.equal((await engine('GET', `/containers/rc-${id}/json`)).status, 404, 'gone when stop returns');
  const next = await client.start({ instanceId: `${id}-next`, image: BUSYBOX, startCommand: 'exec sleep 60', gpuCount: 4 });
  assert.equal(next.instance.state, 'pending', 'all 4 GPUs were free again');
  await waitForState(client, `${id}-next`, 'ready');
});

test('persistent storage: the account volume survives destroy and relaunch; nothing else does', async (t) => {
  if (!(await needEngine(t))) return;
  const { client, agent } = await dockerAgent(t);
  const volume = `acct-${process.pid}`;
  await client.start({
    instanceId: `dk-vol1-${process.pid}`,
    image: BUSYBOX,
    volume,
    startCommand: 'echo kept > $RC_VOLUME_DIR/note; echo lost > /root/scratch; exec sleep 60',
  });
  await waitForState(client, `dk-vol1-${process.pid}`, 'ready');
  await waitFor(async () => (await engine('GET', `/volumes/rc-vol-${agent.agentId}-${volume}`)).status === 200);
  await client.remove(`dk-vol1-${process.pid}`);
  await client.start({
    instanceId: `dk-vol2-${process.pid}`,
    image: BUSYBOX,
    volume,
    startCommand: 'cat $RC_VOLUME_DIR/note; cat /root/scratch || echo no-scratch; exec sleep 60',
  });
  await waitForState(client, `dk-vol2-${process.pid}`, 'ready');
  const out = await waitFor(async () => {
    const l = await logsOf(client, `dk-vol2-${process.pid}`);
    return l.includes('no-scratch') ? l : undefined;
  }, 20_000);
  assert.match(out, /kept/);
  await client.remove(`dk-vol2-${process.pid}`);
  assert.equal((await engine('GET', `/volumes/rc-vol-${agent.agentId}-${volume}`)).status, 200, 'remove never deletes the volume');
});

test("a tenant container cannot read the data dir or reach the agent's gRPC port", async (t) => {
  if (!(await needEngine(t))) return;
  const { client, agent, dataDir } = await dockerAgent(t);
  const id = `dk-escape-${process.pid}`;
  const tokenFile = join(dataDir, 'state.json');
  const probe = [
    `cat ${tokenFile} && echo READ-STATE`,
    `ls ${dataDir} && echo LIST-DATA`,
    // busybox nc has no -z; -e runs a program once connected.
    `nc -w 2 $(awk '/host.docker.internal/ {print $1; exit}' /etc/hosts) ${agent.port} -e /bin/true && echo REACH-AGENT-GATEWAY`,
    `nc -w 2 127.0.0.1 ${agent.port} -e /bin/true && echo REACH-AGENT-LOOPBACK`,
    'ls /var/run/docker.sock && echo DOCKER-SOCK',
    'echo PROBE-DONE',
  ].join('; ');
  await client.start({ instanceId: id, image: BUSYBOX, startCommand: `${probe}; exec sleep 60` });
  const out = await waitFor(async () => {
    const l = await logsOf(client, id);
    return l.includes('PROBE-DONE') ? l : undefined;
  }, 30_000);
  for (const marker of ['READ-STATE', 'LIST-DATA', 'REACH-AGENT-GATEWAY', 'REACH-AGENT-LOOPBACK', 'DOCKER-SOCK'])
    assert.ok(!out.includes(marker), `${marker} in:\n${out}`);
});

test('SSH: the account key gets a root shell on the routed port 22; another key is refused', async (t) => {
  if (!(await needEngine(t, [SSHD]))) return;
  const { client } = await dockerAgent(t);
  const dir = tempDir(t);
  for (const k of ['good', 'bad']) await run('ssh-keygen', ['-q', '-t', 'ed25519', '-N', '', '-f', join(dir, k)]);
  const id = `dk-ssh-${process.pid}`;
  await client.start({ instanceId: id, image: SSHD, ports: [22], sshPublicKey: readFileSync(join(dir, 'good.pub'), 'utf8').trim() });
  const ready = await waitForState(client, id, 'ready', 60_000);
  const { host, hostPort } = ready.endpoints.find((e) => e.port === 22)!;
  const ssh = (key: string) =>
    run(
      'ssh',
      [
        '-i',
        join(dir, key),
        '-p',
        String(hostPort),
        '-o',
        'StrictHostKeyChecking=no',
        '-o',
        'UserKnownHostsFile=/dev/null',
        '-o',
        'BatchMode=yes',
        '-o',
        'ConnectTimeout=10',
        '-o',
        'IdentitiesOnly=yes',
        `root@${host}`,
        'echo shell-as-$(id -u)',
      ],
      { timeout: 30_000 },
    );
  const ok = await ssh('good');
  assert.match(ok.stdout, /shell-as-0/);
  await assert.rejects(ssh('bad'), /Permission denied/);
});

test('rc-tunnel inside a container: the tool is on PATH, the broker setting names the relay on host.docker.internal, the token stays outside', async (t) => {
  if (!(await needEngine(t))) return;
  // A stand-in broker on the host's loopback (where the embedded gateway listens): it must see
  // nothing but tunnel upgrades (test/dedicated/tunnel-relay.test.ts runs the real one).
  let reached = 0;
  const broker = createServer((s) => {
    reached++;
    s.destroy();
  });
  await new Promise<void>((r) => broker.listen(0, '127.0.0.1', r));
  t.after(() => broker.close());
  const brokerUrl = `http://127.0.0.1:${(broker.address() as { port: number }).port}`;
  const { client } = await dockerAgent(t, { docker: { toolbox: true } });
  const id = `dk-tunnel-${process.pid}`;
  await client.start({
    instanceId: id,
    image: BUSYBOX,
    env: { RC_TUNNEL_BROKER: brokerUrl, RC_TUNNEL_TOKEN: 'rct-secret-of-this-instance' },
    startCommand:
      'echo "broker=$RC_TUNNEL_BROKER relay=$RC_TUNNEL_VIA_RELAY token=$(printenv RC_TUNNEL_TOKEN || echo none)"; wget -q -O - "$RC_TUNNEL_BROKER/" 2>&1; echo; rc-tunnel --help | head -1; echo TUNNEL-DONE; exec sleep 60',
  });
  const out = await waitFor(async () => {
    const l = await logsOf(client, id);
    return l.includes('TUNNEL-DONE') ? l : undefined;
  }, 60_000);
  assert.match(out, /broker=http:\/\/host\.docker\.internal:\d+ relay=1 token=none/);
  assert.match(out, /404/, 'the relay answers a plain request itself');
  assert.equal(reached, 0, 'and does not pass it on');
  assert.match(out, /Usage: rc-tunnel/);
});

test('the agent SIGKILLed mid-pull, mid-start and while running, then restarted: every container adopted or removed', async (t) => {
  if (!(await needEngine(t))) return;
  // A registry that accepts and never answers: a pull hangs there.
  const hanging = createServer(() => {});
  await new Promise<void>((r) => hanging.listen(0, '127.0.0.1', r));
  t.after(() => hanging.close());
  const hangPort = (hanging.address() as { port: number }).port;
  const dataDir = tempDir(t);
  const token = newToken();
  const env = {
    RC_AGENT_RUNTIME: 'docker',
    RC_AGENT_DOCKER_SOCKET: DOCKER_SOCKET,
    RC_AGENT_TOOLBOX: '0',
    RC_AGENT_STOP_GRACE_MS: '2000',
    RC_AGENT_NETWORK_PREFIX: TEST_NET_PREFIX,
  };
  let a = await spawnAgent(t, dataDir, token, env);
  t.after(() => cleanupAgent(a.agentId));
  let client = createAgentClient({ address: a.address, token });
  const pid = process.pid;
  await client.start({ instanceId: `k-run-${pid}`, image: BUSYBOX, startCommand: 'exec httpd -f -p $PORT', ports: [8000] });
  const running = await waitForState(client, `k-run-${pid}`, 'ready', 60_000);
  await client.start({ instanceId: `k-late-${pid}`, image: BUSYBOX, startCommand: 'sleep 6; exec httpd -f -p $PORT', ports: [8000] });
  await waitFor(async () => (await client.list()).find((i) => i.instanceId === `k-late-${pid}`)?.message === 'waiting for port', 30_000);
  await client.start({ instanceId: `k-pull-${pid}`, image: `127.0.0.1:${hangPort}/rc-test/hang:1` });
  await waitFor(async () => (await client.list()).find((i) => i.instanceId === `k-pull-${pid}`)?.message === 'pulling image', 30_000);
  // A container of this agent that no record knows (killed between create and the state write),
  // and one of another agent that must be left alone.
  const orphan = await engine('POST', `/containers/create?name=rc-k-orphan-${pid}`, {
    Image: BUSYBOX,
    Cmd: ['sleep', '60'],
    Labels: { 'rc.agent-id': a.agentId, 'rc.instance-id': `k-orphan-${pid}` },
  });
  await engine('POST', `/containers/${orphan.json.Id}/start`);
  // An instance network without a container (killed between the two creates).
  const orphanNet = await engine('POST', '/networks/create', {
    Name: `rc-net-k-netorphan-${pid}`,
    Labels: { 'rc.agent-id': a.agentId, 'rc.instance-id': `k-netorphan-${pid}` },
  });
  assert.equal(orphanNet.status, 201);
  const foreign = await engine('POST', `/containers/create?name=rc-k-foreign-${pid}`, {
    Image: BUSYBOX,
    Cmd: ['sleep', '60'],
    Labels: { 'rc.agent-id': `other-${pid}`, 'rc.instance-id': 'x' },
  });
  t.after(() => engine('DELETE', `/containers/${foreign.json.Id}?force=true`));
  await engine('POST', `/containers/${foreign.json.Id}/start`);

  client.close();
  await killChild(a.child);
  a = await spawnAgent(t, dataDir, token, env);
  client = createAgentClient({ address: a.address, token });
  t.after(() => client.close());

  const adoptedRunning = await waitForState(client, `k-run-${pid}`, 'ready');
  assert.equal(adoptedRunning.runtimeId, running.runtimeId, 'the running container is adopted, not replaced');
  await waitForState(client, `k-late-${pid}`, 'ready', 60_000);
  const pull = await waitForState(client, `k-pull-${pid}`, 'failed');
  assert.equal(pull.reason, 'lost');
  const { json: mine } = await engine('GET', labelled(`rc.agent-id=${a.agentId}`));
  const byInstance = new Map<string, number>();
  for (const c of mine as { Labels: Record<string, string> }[])
    byInstance.set(c.Labels['rc.instance-id']!, (byInstance.get(c.Labels['rc.instance-id']!) ?? 0) + 1);
  assert.deepEqual(Object.fromEntries(byInstance), { [`k-run-${pid}`]: 1, [`k-late-${pid}`]: 1 }, 'no orphan, no duplicate');
  assert.equal((await engine('GET', `/networks/${orphanNet.json.Id}`)).status, 404, 'the orphan network is removed');
  assert.equal((await engine('GET', `/networks/rc-net-k-orphan-${pid}`)).status, 404);
  assert.equal((await engine('GET', `/networks/rc-net-k-run-${pid}`)).status, 200, "an adopted instance's network stays");
  assert.equal((await engine('GET', `/containers/${foreign.json.Id}/json`)).json.State.Running, true, "another agent's container is untouched");
  await client.reconcile([]);
  await killChild(a.child);
});
