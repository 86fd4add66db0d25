// The seeded demo images serve only their app (issue 27): through the app port of rc/gradio and
// rc/jupyter-pytorch (their own command, and the seeded Gradio template's start command) `/` is
// the app's page while /proc (the environment of the server: it used to give away the tunnel
// token), /etc, the instance files at /rc and `..` paths answer 404. Real engine (skipped without
// one, failed with RC_REQUIRE_DOCKER=1); the images are built when missing or stale.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, test, type TestContext } from 'node:test';
import { Client } from 'undici';
import { ensureLocalImage, LABEL_DEFINITION, localImageDigest } from '../../agent/images/local-images.js';
import { GRADIO_DEMO_COMMAND } from '../../control-plane/seed.js';
import { DOCKER_SOCKET, dockerAvailable, localImagesBuildable } from '../helpers.js';
import { removeAgentContainers, removeTestFirewall, testIsolation } from './docker-isolation-harness.js';
import { startTestAgent, waitForState } from './harness.js';

/** GET `path` exactly as written (no client normalizing `..`); the status and the body. */
function rawGet(port: number, path: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    let got = '';
    s.on('connect', () => s.write(`GET ${path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`));
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.on('close', () => resolve({ status: Number(/^HTTP\/1\.[01] (\d{3})/.exec(got)?.[1]), body: got.slice(got.indexOf('\r\n\r\n') + 4) }));
    s.on('error', reject);
  });
}

// The chains this file's agents installed under the test prefix go with it.
after(removeTestFirewall);

const OUTSIDE_THE_APP = [
  '/proc/self/environ',
  '/proc/1/environ',
  '/etc/passwd',
  '/rc/',
  '/rc',
  '/../../etc/passwd',
  '/../../proc/self/environ',
  '/%2e%2e/%2e%2e/etc/passwd',
  '/..%2f..%2fetc%2fpasswd',
  '//etc/passwd',
];

test('the demo images serve their app page and nothing of the filesystem', { timeout: 600_000 }, async (t: TestContext) => {
  if (!(await dockerAvailable(t)) || !(await localImagesBuildable(t, 'rc/gradio:latest', 'rc/jupyter-pytorch:latest'))) return;
  // Built (or rebuilt: a changed definition makes the image stale) from the current definition.
  const engine = new Client('http://localhost', { socketPath: DOCKER_SOCKET });
  t.after(() => engine.close());
  for (const image of ['rc/gradio:latest', 'rc/jupyter-pytorch:latest']) {
    await ensureLocalImage(DOCKER_SOCKET, image);
    const res = await engine.request({ method: 'GET', path: `/v1.41/images/${encodeURIComponent(image)}/json` });
    const labels = ((await res.body.json()) as { Config: { Labels: Record<string, string> } }).Config.Labels;
    assert.equal(labels[LABEL_DEFINITION], localImageDigest(image), `${image} carries the digest of its definition`);
  }
  assert.notEqual(localImageDigest('rc/gradio:latest'), localImageDigest('rc/jupyter-pytorch:latest'));
  const { client, agent } = await startTestAgent(t, {
    runtime: 'docker',
    dockerSocket: DOCKER_SOCKET,
    readyTimeoutMs: 60_000,
    stopGraceMs: 1000,
    docker: { limitsPerGpu: { memoryMb: 256, cpus: 1, pids: 200 }, toolbox: false, isolation: testIsolation },
  });
  t.after(() => removeAgentContainers(agent.agentId));
  const cases = [
    { name: 'gradio', image: 'rc/gradio:latest', port: 7860, startCommand: '', page: /Gradio demo/ },
    { name: 'gradio-seeded', image: 'rc/gradio:latest', port: 7860, startCommand: GRADIO_DEMO_COMMAND, page: /Gradio demo/ },
    { name: 'jupyter', image: 'rc/jupyter-pytorch:latest', port: 8888, startCommand: '', page: /Jupyter notebook/ },
  ];
  for (const c of cases) {
    const id = `demo-${c.name}-${process.pid}`;
    await client.start({ instanceId: id, image: c.image, startCommand: c.startCommand, ports: [c.port], env: { DEMO_SECRET: 'must-not-leak' } });
    const ready = await waitForState(client, id, 'ready', 60_000);
    const hostPort = ready.endpoints[0]!.hostPort;
    const root = await rawGet(hostPort, '/');
    assert.equal(root.status, 200, `${c.name} /`);
    assert.match(root.body, c.page, `${c.name} / is the app page`);
    for (const path of OUTSIDE_THE_APP) {
      const r = await rawGet(hostPort, path);
      assert.equal(r.status, 404, `${c.name} ${path}: ${r.body.slice(0, 200)}`);
      assert.doesNotMatch(r.body, /must-not-leak|root:x:0/, `${c.name} ${path}`);
    }
    await client.stop(id);
  }
});
