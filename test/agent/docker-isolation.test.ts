// Isolation of tenants' containers against the real engine (issue #27; skipped without an engine,
// failed with RC_REQUIRE_DOCKER=1): instance A cannot open a connection to instance B by any
// address (B's container address, every address of the host, B's port published on the
// advertise address), nor to another fleet host (a network namespace with a private /24); the
// capabilities are CapDrop ALL plus a short list, so packet and raw sockets and mknod fail; the
// firewall rules exist while agents run and a second agent does not break the first's.
// Forwarding is turned on for the test's own interfaces only (per interface, never the host-wide
// ip_forward) while A probes, and restored in `finally`.
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { after, test, type TestContext } from 'node:test';
import { promisify } from 'node:util';
import type { AgentClient } from '../../agent/client.js';
import { ensureLocalImage } from '../../agent/images/local-images.js';
import { startAgent, type AgentOptions } from '../../agent/server.js';
import { createAgentClient } from '../../agent/client.js';
import { IsolationFirewall } from '../../agent/firewall.js';
import { createLogger } from '../../lib/log.js';
import { DOCKER_SOCKET, dockerAvailable, localImagesBuildable, tcpConnects, waitFor } from '../helpers.js';
import { engine, removeAgentContainers, removeTestFirewall, TEST_NET_PREFIX, testIsolation } from './docker-isolation-harness.js';
import { killAgentProcesses, killChild, newToken, spawnAgent, startTestAgent, tempDir, waitForState } from './harness.js';

const BUSYBOX = 'rc-test/busybox:1';
const GRADIO = 'rc/gradio:latest';
const run = promisify(execFile);
const pid = process.pid;

after(removeTestFirewall);

function agentOptions(options: Partial<AgentOptions>): Partial<AgentOptions> {
  return {
    runtime: 'docker',
    dockerSocket: DOCKER_SOCKET,
    readyTimeoutMs: 60_000,
    stopGraceMs: 1000,
    ...options,
    docker: { limitsPerGpu: { memoryMb: 256, cpus: 0.5, pids: 200 }, toolbox: false, isolation: testIsolation, ...options.docker },
  };
}

async function dockerAgent(t: TestContext, options: Partial<AgentOptions> = {}) {
  const a = await startTestAgent(t, agentOptions(options));
  t.after(() => removeAgentContainers(a.agent.agentId));
  return a;
}

let imagesReady: Promise<void> | undefined;
async function needEngine(t: TestContext): Promise<boolean> {
  if (!(await dockerAvailable(t)) || !(await localImagesBuildable(t, BUSYBOX, GRADIO))) return false;
  imagesReady ??= (async () => {
    await ensureLocalImage(DOCKER_SOCKET, BUSYBOX);
    await ensureLocalImage(DOCKER_SOCKET, GRADIO);
  })();
  await imagesReady;
  return true;
}

/** A TCP server on every address of the host (0.0.0.0): what a container must not reach. */
async function hostServer(t: TestContext, reply = 'host-ok'): Promise<number> {
  const server = createServer((s) => {
    s.on('error', () => undefined); // a probe that resets is fine
    s.end(reply);
  });
  await new Promise<void>((r) => server.listen(0, '0.0.0.0', r));
  t.after(() => server.close());
  return (server.address() as { port: number }).port;
}

/** A stand-in tunnel broker on the host's loopback (the relay's target). */
async function broker(t: TestContext): Promise<string> {
  const server = createServer((s) => {
    s.on('error', () => undefined);
    s.end('HTTP/1.1 200 OK\r\ncontent-length: 9\r\nconnection: close\r\n\r\nbroker-ok');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

/** The host's IPv4 addresses other than loopback, by interface (the LAN address, docker0, every bridge's gateway). */
function hostAddresses(): { name: string; address: string }[] {
  return Object.entries(networkInterfaces()).flatMap(([name, list]) =>
    (list ?? []).filter((a) => a.family === 'IPv4' && !a.internal).map((a) => ({ name, address: a.address })),
  );
}

/** The host's LAN address (the advertise address of a fleet host), not a bridge's. */
function lanAddress(): string {
  const lan = hostAddresses().find((a) => !/^(docker|br-|rc|veth)/.test(a.name));
  assert.ok(lan, 'the host has a non-loopback address');
  return lan.address;
}

/**
 * The start command of an attacker: waits for /rc/go (so the test can turn forwarding on for its
 * bridge first), then tries every target (`label,host,port`) and its own gateway, and the relay.
 */
function attackerCommand(ownGatewayPort: number): string {
  return [
    'while [ ! -e /rc/go ]; do sleep 0.2; done',
    // busybox nc: -e runs the program once connected (its status is nc's), so 0 means connected.
    'try() { if nc -w 3 "$2" "$3" -e /bin/true; then echo "REACHED $1 $2:$3"; else echo "BLOCKED $1 $2:$3"; fi; }',
    `try own-gateway "$(ip route | awk '/^default/ {print $3}')" ${ownGatewayPort}`,
    'for t in $TARGETS; do set -- $(echo "$t" | tr , " "); try "$1" "$2" "$3"; done',
    // The static busybox cannot resolve names (its wget crashes, and so does its -T): the relay by the address /etc/hosts gives.
    `hg=$(awk '/host.docker.internal/ {print $1; exit}' /etc/hosts)`,
    // The relay answers only tunnel upgrades of running instances (agent/broker-relay.ts): a connection is what shows it open.
    'if [ -n "$RC_TUNNEL_BROKER" ]; then rp=$(echo "$RC_TUNNEL_BROKER" | sed -E "s#^[a-z]+://[^:/]+:([0-9]+).*#\\1#"); if nc -w 3 "$hg" "$rp" -e /bin/true; then echo "relay: open $hg:$rp"; else echo "relay: closed $hg:$rp"; fi; fi',
    'echo PROBE-DONE',
    'exec sleep 600',
  ].join('\n');
}

async function logsOf(client: AgentClient, id: string): Promise<string> {
  const out: string[] = [];
  for await (const line of client.logs(id, { tail: 1000 })) out.push(line);
  return out.join('\n');
}

/** The host-side interface of a container's network: docker0 for the default bridge, else the network's bridge. */
async function bridgeOf(containerName: string): Promise<string> {
  const c = await waitFor(async () => {
    const r = await engine('GET', `/containers/${containerName}/json`);
    return r.status === 200 && r.json.State.Running ? r.json : undefined;
  }, 60_000);
  const [network] = Object.keys(c.NetworkSettings.Networks as Record<string, unknown>);
  if (network === 'bridge') return 'docker0';
  const n = await engine('GET', `/networks/${network}`);
  return n.json.Options?.['com.docker.network.bridge.name'] ?? `br-${String(n.json.Id).slice(0, 12)}`;
}

/** Turns IPv4 forwarding on for packets arriving on these interfaces only; returns the restore. */
function forwardOn(interfaces: string[]): () => void {
  const saved = interfaces.map((i) => {
    const file = `/proc/sys/net/ipv4/conf/${i}/forwarding`;
    const before = readFileSync(file, 'utf8').trim();
    writeFileSync(file, '1');
    return { file, before };
  });
  return () => {
    for (const { file, before } of saved) if (existsSync(file)) writeFileSync(file, before);
  };
}

/** Starts the attacker, lets it probe with forwarding on for its bridge (and `alsoForward`), returns its output. */
async function attack(
  a: { client: AgentClient; dataDir: string },
  id: string,
  targets: string[],
  env: Record<string, string>,
  ownGatewayPort: number,
  alsoForward: string[] = [],
): Promise<string> {
  await a.client.start({ instanceId: id, image: BUSYBOX, env: { ...env, TARGETS: targets.join(' ') }, startCommand: attackerCommand(ownGatewayPort) });
  const bridge = await bridgeOf(`rc-${id}`);
  const restore = forwardOn([bridge, ...alsoForward]);
  try {
    writeFileSync(join(`${a.dataDir}-instances`, 'homes', id, 'go'), '');
    return await waitFor(async () => {
      const l = await logsOf(a.client, id);
      return l.includes('PROBE-DONE') ? l : undefined;
    }, 90_000);
  } finally {
    restore();
  }
}

/** Packets counted by the rules of `chain` whose listing line matches `match`. */
async function rulePackets(chain: string, match: RegExp): Promise<number> {
  const { stdout } = await run('iptables', ['-w', '5', '-L', chain, '-v', '-x', '-n']);
  return stdout
    .split('\n')
    .filter((l) => match.test(l))
    .reduce((sum, l) => sum + Number(l.trim().split(/\s+/)[0]), 0);
}

test("instance A cannot connect to instance B: not B's container address, not any host address, not B's port published on the advertise address", async (t) => {
  if (!(await needEngine(t))) return;
  const lan = lanAddress();
  const hostPort = await hostServer(t);
  const brokerUrl = await broker(t);
  const a = await dockerAgent(t, { advertiseHost: lan });
  const b = `iso-b-${pid}`;
  await a.client.start({
    instanceId: b,
    image: BUSYBOX,
    startCommand: 'mkdir -p /www; echo b-app > /www/index.html; exec httpd -f -p $PORT -h /www',
    ports: [7860],
  });
  const ready = await waitForState(a.client, b, 'ready', 60_000);
  const published = ready.endpoints[0]!;
  assert.equal(published.host, lan, 'ports are published on the advertise address');
  // B runs and answers through its published port, from the host.
  assert.equal(await (await fetch(`http://${lan}:${published.hostPort}/`)).text(), 'b-app\n');
  const bIp = Object.values((await engine('GET', `/containers/rc-${b}/json`)).json.NetworkSettings.Networks as Record<string, { IPAddress: string }>)[0]!
    .IPAddress;
  assert.ok(bIp);
  const targets = [
    `b-container,${bIp},7860`,
    `b-published,${lan},${published.hostPort}`,
    `host-gateway-name,host.docker.internal,${hostPort}`,
    `b-published-on-host-gateway,host.docker.internal,${published.hostPort}`,
    ...hostAddresses().map(({ name, address }) => `host-${name},${address},${hostPort}`),
    ...hostAddresses().map(({ name, address }) => `b-published-on-${name},${address},${published.hostPort}`),
  ];
  const before = await rulePackets(`${TEST_NET_PREFIX}-isolate-fwd`, new RegExp(`REJECT.*\\s${TEST_NET_PREFIX}-\\+\\s`)).catch(() => 0);
  const out = await attack(a, `iso-a-${pid}`, targets, { RC_TUNNEL_BROKER: brokerUrl }, hostPort);
  t.diagnostic(out);
  const reached = out.split('\n').filter((l) => l.startsWith('REACHED'));
  assert.deepEqual(reached, [], 'A reached nothing');
  const blocked = out.split('\n').filter((l) => l.startsWith('BLOCKED'));
  assert.equal(blocked.length, targets.length + 1, 'every target was tried');
  assert.match(out, /relay: open /, 'the tunnel broker relay stays reachable');
  // With forwarding on for A's bridge, A -> B went to the FORWARD rule (B's bridge), which refused it.
  const after = await rulePackets(`${TEST_NET_PREFIX}-isolate-fwd`, new RegExp(`REJECT.*\\s${TEST_NET_PREFIX}-\\+\\s`));
  assert.ok(after > before, `the FORWARD rule refused A -> B (${before} -> ${after} packets)`);
});

test('across the fleet: a container cannot connect to another host on a private network (a network namespace)', async (t) => {
  if (!(await needEngine(t))) return;
  const n = 1 + (pid % 250);
  const ns = `rca-ns-${pid}`;
  const hostSide = `${TEST_NET_PREFIX}h${n}`.slice(0, 15);
  const remote = `10.213.${n}.2`;
  const ip = (...args: string[]) => run('ip', args);
  let server: ReturnType<typeof spawn> | undefined;
  try {
    await ip('netns', 'add', ns);
    await ip('link', 'add', hostSide, 'type', 'veth', 'peer', 'name', 'rca-r', 'netns', ns);
    await ip('addr', 'add', `10.213.${n}.1/24`, 'dev', hostSide);
    await ip('link', 'set', hostSide, 'up');
    await ip('-n', ns, 'addr', 'add', `${remote}/24`, 'dev', 'rca-r');
    await ip('-n', ns, 'link', 'set', 'rca-r', 'up');
    await ip('-n', ns, 'link', 'set', 'lo', 'up');
    await ip('-n', ns, 'route', 'add', 'default', 'via', `10.213.${n}.1`);
    server = spawn(
      'ip',
      [
        'netns',
        'exec',
        ns,
        process.execPath,
        '-e',
        `require('net').createServer((s)=>{s.on('error',()=>{});s.end('remote-ok')}).listen(8080,'${remote}',()=>console.log('listening'))`,
      ],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    await new Promise<void>((resolve, reject) => {
      server!.stdout!.once('data', () => resolve());
      server!.once('exit', (code) => reject(new Error(`the remote server exited (${code})`)));
    });
    assert.equal(await tcpConnects(remote, 8080), true, 'the host reaches the remote host');

    const a = await dockerAgent(t);
    const before = await rulePackets(`${TEST_NET_PREFIX}-isolate-fwd`, /REJECT.*\s10\.0\.0\.0\/8\s/).catch(() => 0);
    // Forwarding on for A's bridge and the remote link (answers come back that way).
    const out = await attack(a, `iso-fleet-${pid}`, [`remote-host,${remote},8080`], {}, 8080, [hostSide]);
    t.diagnostic(out);
    assert.match(out, new RegExp(`BLOCKED remote-host ${remote.replace(/\./g, '\\.')}:8080`));
    assert.doesNotMatch(out, /REACHED remote-host/);
    const after = await rulePackets(`${TEST_NET_PREFIX}-isolate-fwd`, /REJECT.*\s10\.0\.0\.0\/8\s/);
    assert.ok(after > before, `the FORWARD rule for private ranges refused it (${before} -> ${after} packets)`);
  } finally {
    server?.kill('SIGKILL');
    await ip('netns', 'del', ns).catch(() => undefined);
    await ip('link', 'del', hostSide).catch(() => undefined);
  }
});

test('capabilities: CapDrop ALL and a short CapAdd list; packet and raw sockets and mknod fail, chown works', async (t) => {
  if (!(await needEngine(t))) return;
  const { client } = await dockerAgent(t);
  const id = `iso-caps-${pid}`;
  const probe = [
    'import os, socket',
    "for name, args in [('packet', (socket.AF_PACKET, socket.SOCK_RAW)), ('raw-icmp', (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP))]:",
    '    try:',
    '        socket.socket(*args).close()',
    "        print(name + '-OPENED')",
    '    except PermissionError:',
    "        print(name + '-REFUSED')",
    "open('/tmp/owned', 'w').close()",
    "os.chown('/tmp/owned', 65534, 65534)",
    "print('CHOWN-OK')",
  ].join('\n');
  await client.start({
    instanceId: id,
    image: GRADIO,
    files: { 'probe.py': probe },
    startCommand: 'python3 /rc/probe.py; if mknod /tmp/null c 1 3; then echo MKNOD-OK; else echo MKNOD-REFUSED; fi; echo CAPS-DONE; exec sleep 600',
  });
  await waitForState(client, id, 'ready', 60_000);
  const out = await waitFor(async () => {
    const l = await logsOf(client, id);
    return l.includes('CAPS-DONE') ? l : undefined;
  }, 60_000);
  t.diagnostic(out);
  const { json: c } = await engine('GET', `/containers/rc-${id}/json`);
  const norm = (caps: string[] | null) => (caps ?? []).map((x) => x.replace(/^CAP_/, '')).sort();
  assert.deepEqual(norm(c.HostConfig.CapDrop), ['ALL']);
  assert.deepEqual(norm(c.HostConfig.CapAdd), [
    'AUDIT_WRITE',
    'CHOWN',
    'DAC_OVERRIDE',
    'FOWNER',
    'FSETID',
    'KILL',
    'NET_BIND_SERVICE',
    'SETGID',
    'SETUID',
    'SYS_CHROOT',
  ]);
  for (const line of ['packet-REFUSED', 'raw-icmp-REFUSED', 'MKNOD-REFUSED', 'CHOWN-OK']) assert.ok(out.includes(line), `${line} in:\n${out}`);
});

/** The rules of a chain as `iptables -S` prints them. */
async function rules(chain: string): Promise<string[]> {
  return (await run('iptables', ['-w', '5', '-S', chain])).stdout.trim().split('\n');
}

test("the firewall rules exist while the agent runs; a second agent on the machine installs the same and leaves the first's relay rule", async (t) => {
  if (!(await needEngine(t))) return;
  const P = TEST_NET_PREFIX;
  const hostPort = await hostServer(t);
  const one = await dockerAgent(t);
  const jumps = async () => ({
    input: (await rules('INPUT')).filter((r) => r === `-A INPUT -i ${P}-+ -j ${P}-isolate-in`).length,
    forward: (await rules('FORWARD')).filter((r) => r === `-A FORWARD -i ${P}-+ -j ${P}-isolate-fwd`).length,
  });
  assert.deepEqual(await jumps(), { input: 1, forward: 1 });
  const inRules = await rules(`${P}-isolate-in`);
  assert.ok(inRules.includes(`-A ${P}-isolate-in -j REJECT --reject-with icmp-port-unreachable`), inRules.join('\n'));
  const fwdRules = await rules(`${P}-isolate-fwd`);
  assert.ok(fwdRules.includes(`-A ${P}-isolate-fwd -o ${P}-+ -j REJECT --reject-with icmp-port-unreachable`), fwdRules.join('\n'));

  const brokerOne = await broker(t);
  await one.client.start({ instanceId: `iso-one-${pid}`, image: BUSYBOX, env: { RC_TUNNEL_BROKER: brokerOne }, startCommand: 'exec sleep 600' });
  await waitForState(one.client, `iso-one-${pid}`, 'ready', 60_000);
  const relayOf = async (agentId: string) => (await rules(`${P}-isolate-relay`)).filter((r) => r.includes(`rc relay ${agentId}`));
  assert.equal((await relayOf(one.agent.agentId)).length, 1, "the first agent's relay port is open");

  // A second agent of the same prefix: same chains, no duplicate jumps, its own relay rule.
  const token = newToken();
  const dataDir = tempDir(t);
  const two = await startAgent({
    host: '127.0.0.1',
    port: 0,
    token,
    dataDir,
    gpus: { detect: 'configured', count: 4 },
    lostControlPlaneGraceMs: 0,
    logger: createLogger('silent'),
    ...agentOptions({}),
  });
  const twoClient = createAgentClient({ address: two.address, token });
  try {
    const brokerTwo = await broker(t);
    await twoClient.start({ instanceId: `iso-two-${pid}`, image: BUSYBOX, env: { RC_TUNNEL_BROKER: brokerTwo }, startCommand: 'exec sleep 600' });
    await waitForState(twoClient, `iso-two-${pid}`, 'ready', 60_000);
    assert.deepEqual(await jumps(), { input: 1, forward: 1 }, 'no duplicate jumps');
    assert.equal((await relayOf(two.agentId)).length, 1);
    assert.deepEqual(await rules(`${P}-isolate-in`), inRules, 'the same rules');
  } finally {
    twoClient.close();
    await two.close();
    killAgentProcesses(two.agentId);
    await removeAgentContainers(two.agentId);
  }
  await waitFor(async () => (await relayOf(two.agentId)).length === 0, 10_000);
  assert.equal((await relayOf(one.agent.agentId)).length, 1, "the first agent's relay rule is left");
  assert.deepEqual(await jumps(), { input: 1, forward: 1 });

  // The first agent's containers are still kept off the host, and still reach their relay.
  const out = await attack(
    one,
    `iso-after-${pid}`,
    hostAddresses().map(({ name, address }) => `host-${name},${address},${hostPort}`),
    { RC_TUNNEL_BROKER: brokerOne },
    hostPort,
  );
  t.diagnostic(out);
  assert.deepEqual(
    out.split('\n').filter((l) => l.startsWith('REACHED')),
    [],
  );
  assert.match(out, /relay: open /);
});

test('a flushed chain, a lost jump and a duplicate jump are put right by refresh (a firewall reload while the agent runs)', async (t) => {
  if (!(await needEngine(t))) return;
  const P = TEST_NET_PREFIX;
  const fw = new IsolationFirewall({ prefix: P, pool: '10.231.0.0/16', blocked: [], nameservers: [] }, `fw-test-${pid}`);
  await fw.install();
  await fw.allowRelay('172.17.0.1', 1);
  const want = { in: await rules(`${P}-isolate-in`), relay: await rules(`${P}-isolate-relay`) };
  assert.ok(want.relay.some((r) => r.includes(`rc relay fw-test-${pid}`)));
  await run('iptables', ['-w', '5', '-F', `${P}-isolate-in`]);
  await run('iptables', ['-w', '5', '-F', `${P}-isolate-relay`]);
  await run('iptables', ['-w', '5', '-D', 'INPUT', '-i', `${P}-+`, '-j', `${P}-isolate-in`]);
  await run('iptables', ['-w', '5', '-I', 'FORWARD', '-i', `${P}-+`, '-j', `${P}-isolate-fwd`]);
  await fw.refresh();
  assert.deepEqual(await rules(`${P}-isolate-in`), want.in);
  assert.deepEqual(await rules(`${P}-isolate-relay`), want.relay);
  assert.equal((await rules('INPUT')).filter((r) => r === `-A INPUT -i ${P}-+ -j ${P}-isolate-in`).length, 1);
  assert.equal((await rules('FORWARD')).filter((r) => r === `-A FORWARD -i ${P}-+ -j ${P}-isolate-fwd`).length, 1, 'the duplicate is gone');
  await fw.close();
  assert.ok(!(await rules(`${P}-isolate-relay`)).some((r) => r.includes(`rc relay fw-test-${pid}`)), 'close removes its relay rule');
});

test('without iptables: on refuses to start and names RC_AGENT_FIREWALL; auto starts on loopback only (one machine) and refuses beyond it; off starts', async (t) => {
  if (!(await needEngine(t))) return;
  const base = {
    RC_AGENT_RUNTIME: 'docker',
    RC_AGENT_DOCKER_SOCKET: DOCKER_SOCKET,
    RC_AGENT_TOOLBOX: '0',
    RC_AGENT_NETWORK_PREFIX: TEST_NET_PREFIX,
    PATH: '/nonexistent', // no iptables (node is started by its absolute path)
  };
  await assert.rejects(spawnAgent(t, tempDir(t), newToken(), { ...base, RC_AGENT_FIREWALL: 'on' }), /installing them failed.*RC_AGENT_FIREWALL=off/s);
  // auto (the default): a non-root `npm start` on one's own machine still runs; an agent other
  // machines can reach does not (it refuses before listening, so nothing is exposed meanwhile).
  const local = await spawnAgent(t, tempDir(t), newToken(), base);
  assert.ok(local.agentId);
  await killChild(local.child);
  await assert.rejects(spawnAgent(t, tempDir(t), newToken(), base, 0, lanAddress()), /installing them failed.*only while the agent listens on loopback/s);
  const off = await spawnAgent(t, tempDir(t), newToken(), { ...base, RC_AGENT_FIREWALL: 'off' });
  assert.ok(off.agentId);
  await killChild(off.child);
});
