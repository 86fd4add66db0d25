// rc-tunnel in containers of the docker runtime against the real broker (issue 27): the tunnel
// token never enters a container, rc-tunnel still exposes a service through the agent's relay
// and a visitor gets it, a token stolen from another instance gets the thief only its own
// identity, and the relay refuses a caller that is no running container (the host).
// Skipped without an engine (failed with RC_REQUIRE_DOCKER=1); every container is removed afterwards.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, test, type TestContext } from 'node:test';
import { createAgentClient, type AgentClient } from '../../agent/client.js';
import { ensureLocalImage } from '../../agent/images/local-images.js';
import { issueTunnelToken, tunnelId } from '../../lib/tunnel/identity.js';
import { killChild, newToken, spawnAgent, startTestAgent, tempDir, waitForState } from '../agent/harness.js';
import { DOCKER_SOCKET, dockerAvailable, localImagesBuildable, waitFor } from '../helpers.js';
import { engine, removeAgentContainers, removeTestFirewall, TEST_NET_PREFIX, testIsolation } from '../agent/docker-isolation-harness.js';
import { OTHER, startGatewayFixture, tunnelFetch } from './fixture.js';

const BUSYBOX = 'rc-test/busybox:1';

// The chains this file's agents installed under the test prefix go with it.
after(removeTestFirewall);

async function logsOf(client: AgentClient, id: string): Promise<string> {
  const out: string[] = [];
  for await (const line of client.logs(id, { tail: 1000 })) out.push(line);
  return out.join('\n');
}

async function logLine(client: AgentClient, id: string, marker: string): Promise<string> {
  return waitFor(
    async () => {
      const l = await logsOf(client, id);
      return l.includes(marker) ? l : undefined;
    },
    90_000,
    200,
  ).catch(async (err: unknown) => {
    throw new Error(`${(err as Error).message}; logs of ${id}:\n${await logsOf(client, id)}`);
  });
}

/** A raw request to host:port; resolves with the status line and body. */
function rawRequest(host: string, port: number, head: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host, port });
    let got = '';
    s.on('connect', () => s.write(head));
    s.on('data', (d: Buffer) => (got += d.toString()));
    s.on('close', () => resolve(got));
    s.on('error', reject);
  });
}

const SERVE = (page: string) => `mkdir -p /www && echo ${page} > /www/index.html && httpd -p 8080 -h /www`;

test('tunnels of containers: no token inside, exposed through the relay, a stolen token gets only the own identity, the host is refused', {
  timeout: 240_000,
}, async (t: TestContext) => {
  if (!(await dockerAvailable(t)) || !(await localImagesBuildable(t, BUSYBOX))) return;
  await ensureLocalImage(DOCKER_SOCKET, BUSYBOX);
  const f = await startGatewayFixture(t);
  const { client, agent } = await startTestAgent(t, {
    runtime: 'docker',
    dockerSocket: DOCKER_SOCKET,
    readyTimeoutMs: 60_000,
    stopGraceMs: 1000,
    docker: { limitsPerGpu: { memoryMb: 512, cpus: 1, pids: 200 }, toolbox: true, isolation: testIsolation },
  });
  t.after(() => removeAgentContainers(agent.agentId));
  const idA = `relay-a-${process.pid}`;
  const idB = `relay-b-${process.pid}`;
  f.addRoute(idA, '127.0.0.1:1', { instanceType: 'gradio' });
  f.addRoute(idB, '127.0.0.1:1', { instanceType: 'gradio', accountId: OTHER });
  const provisioning = (id: string) => ({ RC_TUNNEL_BROKER: f.gateway.url, RC_TUNNEL_TOKEN: issueTunnelToken(f.tunnelSecret, id) });
  const tokenB = issueTunnelToken(f.tunnelSecret, idB);

  // B, the victim: prints its whole environment (env, and PID 1's), then exposes its page.
  await client.start({
    instanceId: idB,
    image: BUSYBOX,
    env: provisioning(idB),
    startCommand: `echo ENV-BEGIN; env; tr '\\0' '\\n' </proc/1/environ; echo ENV-END; ${SERVE('page-of-B')}; rc-tunnel expose --port 8080 --detach; echo B-UP; exec sleep 600`,
  });
  await waitForState(client, idB, 'ready', 60_000);
  const logsB = await logLine(client, idB, 'B-UP');
  const environment = logsB.slice(logsB.indexOf('ENV-BEGIN'), logsB.indexOf('ENV-END'));
  assert.match(environment, /RC_TUNNEL_VIA_RELAY=1/, 'the environment was printed');
  assert.match(environment, /RC_TUNNEL_BROKER=http:\/\/host\.docker\.internal:\d+/);
  assert.doesNotMatch(environment, /RC_TUNNEL_TOKEN|rct-/, 'no tunnel token in the container environment');
  const { json: inspected } = await engine('GET', `/containers/rc-${idB}/json`);
  assert.ok(!(inspected.Config.Env as string[]).some((e) => e.startsWith('RC_TUNNEL_TOKEN=') || e.includes('rct-')), 'nor in docker inspect');

  // A visitor gets B's page through B's public URL (rc-tunnel -> relay -> broker).
  // Each tunnel on an origin of its own (gateway/tunnel/origins.ts): <tunnel id>.localhost on the tunnels' listener.
  const urlOf = (id: string) => `http://${tunnelId(f.tunnelSecret, id, 8080)}.localhost:${f.tunnels.port}/`;
  await waitFor(async () => f.broker.tunnels().some((x) => x.instanceId === idB), 60_000, 100);
  assert.equal(await (await tunnelFetch(urlOf(idB))).text(), 'page-of-B\n');

  // A, the attacker, holds B's token (stolen: before this change it was in B's environment, which
  // B's app could serve): a plain request to the relay, then rc-tunnel with B's token.
  await client.start({
    instanceId: idA,
    image: BUSYBOX,
    env: provisioning(idA),
    startCommand: [
      SERVE('page-of-A'),
      `echo PLAIN-$(wget -q -O - "$RC_TUNNEL_BROKER/tunnel/connect?port=8080" 2>&1 | tr -d '\\n')-END`,
      `RC_TUNNEL_TOKEN='${tokenB}' rc-tunnel expose --port 8080 --detach`,
      `echo STATUS-$(rc-tunnel status --json | tr -d '\\n')-END`,
      'echo A-UP; exec sleep 600',
    ].join('; '),
  });
  const logsA = await logLine(client, idA, 'A-UP');
  assert.match(logsA, /PLAIN-.*404.*-END/, 'a plain request to the relay is 404');
  const status = JSON.parse(/STATUS-(.*)-END/.exec(logsA)![1]!) as { tunnels: { state: string; public_url: string | null }[] };
  assert.deepEqual(
    status.tunnels.map((x) => [x.state, x.public_url]),
    [['connected', urlOf(idA)]],
    "B's token got A its own tunnel, not B's",
  );
  assert.equal(await (await tunnelFetch(urlOf(idA))).text(), 'page-of-A\n');
  for (let i = 0; i < 5; i++) assert.equal(await (await tunnelFetch(urlOf(idB))).text(), 'page-of-B\n', "B's URL keeps serving B");
  assert.deepEqual(
    f.broker
      .tunnels()
      .filter((x) => x.instanceId === idB)
      .map((x) => x.port),
    [8080],
    'one tunnel of B: its own',
  );

  // The host is no container: the relay refuses it, B's token or not.
  const relayPort = Number(/host\.docker\.internal:(\d+)/.exec(environment)![1]);
  const { json: bridge } = await engine('GET', '/networks/bridge');
  const gatewayIp = (bridge.IPAM.Config as { Gateway?: string }[]).find((c) => c.Gateway)?.Gateway ?? '172.17.0.1';
  const refused = await rawRequest(
    gatewayIp,
    relayPort,
    `GET /tunnel/connect?port=8080 HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nAuthorization: Bearer ${tokenB}\r\n\r\n`,
  );
  assert.match(refused, /^HTTP\/1\.1 403 /, refused);
  assert.match(refused, /running instances only/);
});

test('after an agent restart the relay knows the adopted container again: its rc-tunnel reconnects on the same URL', {
  timeout: 240_000,
}, async (t: TestContext) => {
  if (!(await dockerAvailable(t)) || !(await localImagesBuildable(t, BUSYBOX))) return;
  await ensureLocalImage(DOCKER_SOCKET, BUSYBOX);
  const f = await startGatewayFixture(t);
  const dataDir = tempDir(t);
  const token = newToken();
  const env = {
    RC_AGENT_RUNTIME: 'docker',
    RC_AGENT_DOCKER_SOCKET: DOCKER_SOCKET,
    RC_AGENT_STOP_GRACE_MS: '1000',
    RC_AGENT_MEMORY_MB_PER_GPU: '512',
    RC_AGENT_NETWORK_PREFIX: TEST_NET_PREFIX,
  };
  let a = await spawnAgent(t, dataDir, token, env);
  t.after(() => removeAgentContainers(a.agentId));
  let client = createAgentClient({ address: a.address, token });
  const id = `relay-restart-${process.pid}`;
  f.addRoute(id, '127.0.0.1:1', { instanceType: 'gradio' });
  await client.start({
    instanceId: id,
    image: BUSYBOX,
    env: { RC_TUNNEL_BROKER: f.gateway.url, RC_TUNNEL_TOKEN: issueTunnelToken(f.tunnelSecret, id) },
    startCommand: `${SERVE('page-before-restart')}; rc-tunnel expose --port 8080 --detach; echo UP; exec sleep 600`,
  });
  await logLine(client, id, 'UP');
  const url = `http://${tunnelId(f.tunnelSecret, id, 8080)}.localhost:${f.tunnels.port}/`;
  await waitFor(async () => (await tunnelFetch(url)).status === 200, 60_000, 100);

  // SIGKILL: the relay goes with the agent, the tunnel drops (rc-tunnel retries with backoff).
  client.close();
  await killChild(a.child);
  await waitFor(async () => !f.broker.tunnels().some((x) => x.instanceId === id), 30_000, 100);
  a = await spawnAgent(t, dataDir, token, env);
  client = createAgentClient({ address: a.address, token });
  t.after(() => client.close());
  await waitForState(client, id, 'ready', 60_000);
  await waitFor(async () => f.broker.tunnels().some((x) => x.instanceId === id), 90_000, 200);
  assert.equal(await (await tunnelFetch(url)).text(), 'page-before-restart\n');
  await client.reconcile([]);
  await killChild(a.child);
});
