// The rest of issue 42 in Chromium, against the whole platform in this process:
// - the instance page lists its tunnels' public URLs live (rc-tunnel inside the instance, the
//   brokers' reports reaching the control plane), with the one line that opens one; the list goes
//   when the instance stops, and the URL answers;
// - SSH offered only where the image serves it and a key was saved, the launch and instance pages
//   saying which is missing;
// - Model APIs gives each model's context as a number (from the backend when the catalog has
//   none), or says "unknown";
// - the operator's model form takes the served name and checks the upstream before saving (a
//   wrong name, an unreachable upstream, a server that is no model server), "Save anyway" after a
//   confirmation; images say whether they serve SSH;
// - the launch stage shows an image build's step k of n (with a Docker engine: a second host
//   agent builds a throwaway image; skipped without one, failed with RC_REQUIRE_DOCKER=1).
// Screenshots at 1440 and 390 wide go to test-output/console/issue-42/ (RC_SHOT_PREFIX names them,
// `after` by default; RC_SHOTS_ONLY=1 takes the same pages of an older console, without assertions).
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import type { Page } from 'playwright-core';
import { buildImage } from '../../agent/images/build.js';
import { ensureLocalImage } from '../../agent/images/local-images.js';
import { startTestAgent } from '../agent/harness.js';
import { engine, removeAgentContainers, removeTestFirewall, testIsolation } from '../agent/docker-isolation-harness.js';
import { tunnelFetch } from '../dedicated/fixture.js';
import { DOCKER_SOCKET, dockerAvailable, listenLocal, localImagesBuildable } from '../helpers.js';
import { browserAvailable, launchBrowser, screenshots, SHOTS_ONLY, signInPage } from './browser.js';
import { startConsolePlatform, type ConsolePlatform } from './platform.js';

const PASSWORD = 'issue 42 password';
const shots = screenshots('issue-42');
const KEY = `ssh-ed25519 ${Buffer.concat([Buffer.from([0, 0, 0, 11]), Buffer.from('ssh-ed25519'), Buffer.from([0, 0, 0, 32]), Buffer.alloc(32, 7)]).toString('base64')} me@laptop`;

/** An app on $PORT that also opens a tunnel to itself with rc-tunnel (the instance's own identity). */
const TUNNELLED_APP = `d=$(mktemp -d) && cd "$d" && echo 'tunnelled page' > index.html && { rc-tunnel expose --port $PORT & } && exec python3 -m http.server $PORT`;

const signIn = (page: Page, api: string, email: string) => signInPage(page, api, email, PASSWORD);

/** A page of a fresh browser, with its script errors collected (each test asserts there are none). */
async function browserPage(t: TestContext): Promise<{ page: Page; errors: string[] }> {
  const context = await launchBrowser(t, { width: 1440, height: 900 });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  return { page, errors };
}

/** A JSON client with the account's key. */
function client(api: string, key: string) {
  return async (method: string, path: string, body?: unknown) => {
    const res = await fetch(api + path, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
}

/** Destroys the instance from its page (confirmed) and waits for it to end. */
async function destroy(page: Page): Promise<void> {
  await page.getByRole('button', { name: 'Destroy' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Destroy' }).click();
  await page.locator('#status', { hasText: /stopped|failed/ }).waitFor({ timeout: 30_000 });
}

/** Launches template `id` from its launch page (1 GPU) and waits for the instance to be ready. */
async function launch(page: Page, api: string, id: number): Promise<void> {
  await page.goto(`${api}/launch/${id}`);
  await page.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL(`${api}/instance`);
  await page.locator('#status', { hasText: 'ready' }).waitFor({ timeout: 60_000 });
}

test('instance page: tunnels listed live with the line that opens one, gone when it stops; SSH only where the image serves it and a key exists', {
  timeout: 240_000,
}, async (t) => {
  if (!browserAvailable(t)) return;
  const { api, rc } = await startConsolePlatform(t, 'rc-console-i42-');
  const email = 'tunnels@example.com';
  const account = await rc('account', 'create', '--email', email, '--password', PASSWORD, '--verified', '--credits', '10');
  const call = client(api, account.api_token);
  const tpl = await call('POST', '/api/profile/templates', {
    title: 'Tunnelled app',
    image: 'rc/gradio:latest',
    instance_type: 'gradio',
    ssh_enabled: true,
    start_command: TUNNELLED_APP,
  });
  assert.equal(tpl.status, 200, JSON.stringify(tpl.body));
  const { page, errors } = await browserPage(t);
  await signIn(page, api, email);

  if (SHOTS_ONLY) {
    await page.goto(`${api}/launch/${tpl.body.id}`);
    await page.getByRole('button', { name: 'Launch' }).waitFor();
    await shots(page, 'launch-image-without-ssh');
    await page.getByRole('button', { name: 'Launch' }).click();
    await page.locator('#status', { hasText: 'ready' }).waitFor({ timeout: 60_000 });
    await page.getByText(/Forwarding http/).waitFor({ timeout: 30_000 });
    return shots(page, 'instance-tunnel');
  }
  // The launch page says the image has no SSH server (seeded images serve none).
  await page.goto(`${api}/launch/${tpl.body.id}`);
  const note = page.locator('#ssh-key-note');
  await note.waitFor();
  assert.equal(
    await note.innerText(),
    'This template has SSH on, but its image rc/gradio:latest runs no SSH server: the instance will have no SSH. Pick an image that serves SSH in the template.',
  );
  await shots(page, 'launch-image-without-ssh');
  await page.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL(`${api}/instance`);

  // rc-tunnel inside the instance opens a tunnel: its URL appears without a reload, and answers.
  const link = page.locator('#tunnels a');
  await link.waitFor({ timeout: 60_000 });
  const url = await link.innerText();
  assert.match(url, /^http:\/\/t[0-9a-f]{24}\.localhost:\d+\/$/);
  assert.equal(await link.getAttribute('href'), url);
  assert.equal(await link.getAttribute('target'), '_blank');
  // rc-tunnel may connect before python3 listens (both start at once in the start command); a
  // request then is the broker's 502, rightly. Ready means the app's port answers.
  await page.locator('#status', { hasText: 'ready' }).waitFor({ timeout: 60_000 });
  const tunnelled = await tunnelFetch(url);
  assert.equal(tunnelled.status, 200);
  assert.equal((await tunnelled.text()).trim(), 'tunnelled page');
  assert.match(await page.locator('#tunnels').innerText(), /→ port \d+ in the instance/);
  assert.equal(await page.getByRole('region', { name: 'Tunnels' }).getByLabel('Open a tunnel').innerText(), 'rc-tunnel expose --port 8080 --detach');
  const status = await call('GET', '/api/notebook/status');
  assert.deepEqual(
    status.body.tunnels.map((x: { public_url: string }) => x.public_url),
    [url],
  );
  assert.equal(
    await page.locator('#ssh').innerText(),
    'Not offered: the image rc/gradio:latest runs no SSH server. Pick an image that serves SSH in the template, then launch again (SSH is set when an instance launches).',
  );
  await shots(page, 'instance-tunnel');

  // It stops: the tunnels go from the page and the status.
  await destroy(page);
  assert.equal(await page.locator('#tunnels').count(), 0);
  assert.deepEqual((await call('GET', '/api/notebook/status')).body.tunnels, []);

  // The operator says the image serves SSH; no key saved yet: the page says the key is missing.
  await rc('image', 'ssh', '--image', 'rc/gradio:latest');
  await launch(page, api, tpl.body.id);
  assert.match(await page.locator('#ssh').innerText(), /^Not offered: no SSH key was saved when it launched\. Add one on Account, then launch again/);
  await shots(page, 'instance-ssh-no-key');
  await destroy(page);

  // With a key: the command.
  assert.equal((await call('POST', '/api/profile/ssh-key', { ssh_public_key: KEY })).status, 200);
  await launch(page, api, tpl.body.id);
  assert.match(await page.locator('#ssh').innerText(), /^ssh -p \d+ root@127\.0\.0\.1$/);
  await destroy(page);
  assert.equal(await page.locator('#ssh').count(), 0, 'no SSH command once it stopped');
  assert.deepEqual(errors, []);
});

test('Model APIs: every model’s context as a number (the backend’s when the catalog has none), or “unknown” said plainly', { timeout: 120_000 }, async (t) => {
  if (!browserAvailable(t)) return;
  const { api, rc } = await startConsolePlatform(t, 'rc-console-i42m-');
  const email = 'models@example.com';
  await rc('account', 'create', '--email', email, '--password', PASSWORD, '--verified');
  const down = createServer();
  const closed = await listenLocal(t, down);
  down.close();
  // (An older rc has no --unchecked: it saved without a check.)
  const unchecked = SHOTS_ONLY ? [] : ['--unchecked'];
  await rc('model', 'add', '--name', 'nobody-home', '--upstream', `http://127.0.0.1:${closed}`, ...unchecked);
  await rc('model', 'add', '--name', 'fixed-window', '--upstream', `http://127.0.0.1:${closed}`, '--max-context', '4096', ...unchecked);
  const { page, errors } = await browserPage(t);
  await signIn(page, api, email);
  await page.goto(`${api}/models`);
  const row = (name: string) => page.getByRole('row').filter({ has: page.getByRole('cell', { name, exact: true }) });
  await row('sim-chat').waitFor();
  if (SHOTS_ONLY) return shots(page, 'models-context');
  // The embedded sims report vLLM's default 32768 in their /v1/models.
  assert.equal(await row('sim-chat').getByRole('cell').nth(3).innerText(), '32,768 tokens (from the backend)');
  assert.equal(await row('sim-reasoner').getByRole('cell').nth(3).innerText(), '32,768 tokens (from the backend)');
  assert.equal(await row('fixed-window').getByRole('cell').nth(3).innerText(), '4,096 tokens');
  assert.equal(await row('nobody-home').getByRole('cell').nth(3).innerText(), 'unknown (the backend does not say)');
  await shots(page, 'models-context');
  assert.deepEqual(errors, []);
});

test('operator’s model form: served name, the upstream checked before saving (wrong name, unreachable, not a model server), Save anyway after a confirmation; images say whether they serve SSH', {
  timeout: 180_000,
}, async (t) => {
  if (!browserAvailable(t)) return;
  const { api, rc, platform } = await startConsolePlatform(t, 'rc-console-i42o-');
  const email = 'op42@example.com';
  await rc('account', 'create', '--email', email, '--password', PASSWORD, '--verified', '--operator');
  const simUrl = platform.sims.find((s) => s.model === 'sim-chat')!.url;
  const { page, errors } = await browserPage(t);
  await signIn(page, api, email);
  await page.goto(`${api}/operator/catalogs`);
  await page.getByRole('heading', { name: 'Catalogs', level: 1 }).waitFor();
  if (SHOTS_ONLY) {
    // The older form: no served name, nothing checked; it saves the wrong name as it is.
    await page.getByLabel('Model name').fill('team-chat');
    await page.getByLabel('Upstreams').fill(simUrl);
    await page.getByRole('button', { name: 'Add model' }).click();
    await page.getByRole('cell', { name: 'team-chat', exact: true }).waitFor();
    return shots(page, 'operator-model-wrong-name');
  }
  const form = page.locator('#model-form');
  const result = page.locator('#model-check');
  const fill = async (name: string, served: string, upstream: string) => {
    await form.getByLabel('Model name').fill(name);
    await form.getByLabel('Served name').fill(served);
    await form.getByLabel('Upstreams').fill(upstream);
    await form.getByRole('button', { name: 'Check and save' }).click();
  };

  // What issue 42 hit: the catalog name where the sim serves another. Checked, refused, explained.
  await fill('team-chat', '', simUrl);
  await result.getByText('Check failed.').waitFor();
  assert.match(await result.innerText(), /serves “sim-chat”, not “team-chat”: set the served name to the one the server was started with\./);
  assert.equal(await form.getByRole('button', { name: 'Save anyway' }).isVisible(), true);
  assert.equal(await page.getByRole('cell', { name: 'team-chat', exact: true }).count(), 0, 'nothing saved');
  await shots(page, 'operator-model-wrong-name');

  // Unreachable, and a server that is no model server (the platform API itself).
  const down = createServer();
  const closed = await listenLocal(t, down);
  down.close();
  await fill('team-chat', 'sim-chat', `http://127.0.0.1:${closed}`);
  await result.getByText(/could not be reached \(connection refused\)/).waitFor();
  await fill('team-chat', 'sim-chat', api);
  await result.getByText(/answered GET \/v1\/models with status 404 .*it is not an OpenAI-compatible model server/).waitFor();
  await shots(page, 'operator-model-not-a-model-server');

  // Save anyway: confirmed first, then saved, and said so.
  await form.getByRole('button', { name: 'Save anyway' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Save anyway' }).click();
  await page.locator('#catalog-saved', { hasText: 'Saved “team-chat” without a passing check.' }).waitFor();
  const audit = await rc('model', 'list');
  assert.deepEqual(audit.models.find((m: { name: string }) => m.name === 'team-chat').upstreams, [api]);

  // The served name right: the check passes, with what it found, and the model is saved.
  await page.locator('#model-form').getByLabel('Model name').waitFor();
  await fill('team-chat', 'sim-chat', simUrl);
  const saved = page.locator('#catalog-saved', { hasText: 'Saved “team-chat”.' });
  await saved.waitFor();
  // What the check found stays in the notice.
  assert.match(
    await saved.innerText(),
    /Every upstream serves “sim-chat”\. .* lists “sim-chat” \(vllm, context 32,768 tokens\)\. A one-token completion for “sim-chat” answered in \d+ ms\./,
  );
  const row = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'team-chat', exact: true }) });
  assert.equal(await row.getByRole('cell').nth(1).innerText(), 'sim-chat');
  // The window in use as a number, the one Model APIs shows (the sim reports vLLM's 32768).
  assert.equal(await row.getByRole('cell').nth(3).innerText(), '32,768 tokens (from the backend)');
  // It serves: a chat completion for team-chat through the gateway.
  const tenant = await rc('account', 'create', '--email', 'user42@example.com', '--verified');
  const chat = await fetch(`${platform.gateway.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${tenant.api_token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ model: 'team-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
  });
  assert.equal(chat.status, 200, await chat.clone().text());

  await shots(page, 'operator-model-saved');

  // Images: the seeded ones serve no SSH; the operator says one does.
  const gradio = page.getByRole('row').filter({ has: page.getByRole('cell', { name: 'rc/gradio:latest', exact: true }) });
  assert.match(await gradio.innerText(), /\bno\b/);
  await gradio.getByRole('button', { name: 'Mark rc/gradio:latest as serving SSH' }).click();
  await gradio.getByRole('button', { name: 'Mark rc/gradio:latest as not serving SSH' }).waitFor();
  assert.equal((await rc('image', 'list')).images.find((i: { image: string }) => i.image === 'rc/gradio:latest').ssh, true);
  await shots(page, 'operator-catalogs');
  assert.deepEqual(errors, []);
});

/**
 * A second host agent with the docker runtime whose local-image hook builds a throwaway image
 * from a Dockerfile with slow steps (a real docker build: its `Step k/n` lines are what the agent
 * reports). Its containers, networks, firewall and the image are removed afterwards.
 */
async function dockerBuildHost(t: TestContext, cp: ConsolePlatform, tag: string): Promise<void> {
  const context = mkdtempSync(join(tmpdir(), 'rc-i42-build-'));
  t.after(() => rmSync(context, { recursive: true, force: true }));
  writeFileSync(
    join(context, 'Dockerfile'),
    ['FROM rc-test/busybox:1', 'RUN sleep 3', 'RUN sleep 3', 'RUN sleep 3', 'CMD ["/bin/sh", "-c", "sleep 600"]', ''].join('\n'),
  );
  const second = await startTestAgent(t, {
    runtime: 'docker',
    dockerSocket: DOCKER_SOCKET,
    readyTimeoutMs: 120_000,
    docker: {
      limitsPerGpu: { memoryMb: 256, cpus: 0.5, pids: 200 },
      toolbox: false,
      isolation: testIsolation,
      buildLocalImage: async (image, onOutput) => {
        if (image !== tag) return false;
        // An older agent took pending messages here (its npm start wiring made them from the Step lines, as below).
        const older = (line: string) => {
          const step = /^Step \d+\/\d+/.exec(line);
          if (step) onOutput(`building image: ${step[0].toLowerCase()}`);
        };
        await buildImage({ socketPath: DOCKER_SOCKET, tag, contextDir: context, onOutput: SHOTS_ONLY ? older : onOutput });
        return true;
      },
    },
  });
  t.after(async () => {
    await removeAgentContainers(second.agent.agentId);
    await engine('DELETE', `/images/${encodeURIComponent(tag)}?force=true`);
    await removeTestFirewall();
  });
  await cp.rc('host', 'add', '--name', 'docker-build', '--address', second.agent.address, '--token', second.token);
  await cp.rc('host', 'drain', 'local');
}

test('launch stage: an image build shows its step k of n, live', { timeout: 240_000 }, async (t) => {
  if (!browserAvailable(t) || !(await dockerAvailable(t)) || !(await localImagesBuildable(t, 'rc-test/busybox:1'))) return;
  await ensureLocalImage(DOCKER_SOCKET, 'rc-test/busybox:1');
  const cp = await startConsolePlatform(t, 'rc-console-i42b-');
  const tag = `rc-test/build-steps-${process.pid}:1`;
  await dockerBuildHost(t, cp, tag);
  await cp.rc('image', 'add', '--name', 'Build steps', '--image', tag);
  const email = 'build@example.com';
  const account = await cp.rc('account', 'create', '--email', email, '--password', PASSWORD, '--verified', '--credits', '10');
  const tpl = await client(cp.api, account.api_token)('POST', '/api/profile/templates', { title: 'Built here', image: tag, instance_type: 'custom' });
  assert.equal(tpl.status, 200, JSON.stringify(tpl.body));
  const { page, errors } = await browserPage(t);
  await signIn(page, cp.api, email);
  await page.goto(`${cp.api}/launch/${tpl.body.id}`);
  await page.getByRole('button', { name: 'Launch' }).click();
  await page.waitForURL(`${cp.api}/instance`);
  if (SHOTS_ONLY) {
    await page.locator('#status', { hasText: 'pending' }).waitFor({ timeout: 60_000 });
    await page.locator('#stage', { hasText: /build|step/i }).waitFor({ timeout: 120_000 });
    await shots(page, 'instance-build-step');
    return destroy(page);
  }
  // Six steps (the Dockerfile's five and the label the build adds); each RUN takes 3 s: steps 2,
  // 3 and 4 are each on the page for a while.
  await page
    .locator('#stage', { hasText: /^building the image: step [234] of 6$/ })
    .waitFor({ timeout: 120_000 })
    .catch(async (err: unknown) => {
      const st = await client(cp.api, account.api_token)('GET', '/api/notebook/status');
      throw new Error(`${(err as Error).message}\nstatus: ${JSON.stringify(st.body)}\npage: ${await page.locator('main').innerText()}`);
    });
  const progress = page.getByRole('progressbar', { name: 'Image build steps' });
  assert.equal(await progress.getAttribute('max'), '6');
  assert.match(await page.locator('#stage').innerText(), /^building the image: step [2-6] of 6$/);
  await shots(page, 'instance-build-step');
  await page.locator('#stage', { hasText: /^building the image: step [4-6] of 6$/ }).waitFor({ timeout: 60_000 });
  await destroy(page);
  assert.deepEqual(errors, []);
});
