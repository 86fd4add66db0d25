// GPU telemetry in the console (issue 41), in Chromium against the whole platform in this process
// and a second host agent whose nvidia-smi is a stand-in the test sets: the tenant's instance page
// shows its GPU's utilization and memory with their history as sparklines and follows a new
// figure live (the status stream's `gpus` event); a tenant on the simulated host reads "No GPU
// telemetry"; the operator's Hosts page shows every GPU of both hosts (index, model, utilization,
// memory, holder); the control plane's Prometheus listener has the gauges. Screenshots at 1440 and
// 390 wide go to test-output/console/gpus/.
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { startTestAgent, tempDir } from '../agent/harness.js';
import { FOUR_H100, NvidiaSmiStandIn } from '../agent/nvidia-smi-stand-in.js';
import { waitFor } from '../helpers.js';
import { browserAvailable, launchBrowser, screenshots, signInPage } from './browser.js';
import { startConsolePlatform } from './platform.js';

const PASSWORD = 'gpu console password';
const APP = `require('http').createServer((q, s) => s.end('ok')).listen(process.env.PORT)`;
const shots = screenshots('gpus');

const signIn = (page: Page, api: string, email: string) => signInPage(page, api, email, PASSWORD);

/** Launches a small app for the account with `key`; resolves with its instance id once ready. */
async function launchReady(api: string, key: string): Promise<string> {
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${api}${path}`, {
      method,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: r.status, body: (await r.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };
  const tpl = await call('POST', '/api/profile/templates', {
    title: 'GPU app',
    image: 'rc/gradio:latest',
    instance_type: 'gradio',
    app_port: 7860,
    start_command: `exec "${process.execPath}" -e "${APP}"`,
  });
  assert.equal(tpl.status, 200, JSON.stringify(tpl.body));
  const launched = await call('POST', `/api/templates/${tpl.body.id}/launch`, { gpu_count: 1 });
  assert.equal(launched.status, 200, JSON.stringify(launched.body));
  await waitFor(async () => (await call('GET', '/api/notebook/status')).body.status === 'ready', 60_000);
  return launched.body.instance_id;
}

test('GPU telemetry: the instance page live with sparklines, "No GPU telemetry" on a simulated GPU, every GPU on Hosts, /metrics', {
  timeout: 300_000,
}, async (t) => {
  if (!browserAvailable(t)) return;
  const smi = new NvidiaSmiStandIn(join(tempDir(t, 'rc-smi-'), 'smi'));
  smi.setGpus(FOUR_H100.slice(0, 2));
  smi.setUsage([
    { index: 0, utilization: 97, memoryUsedMb: 4915 },
    { index: 1, utilization: 0, memoryUsedMb: 0 },
  ]);
  const { platform, api, rc } = await startConsolePlatform(t, 'rc-console-gpus-');
  const real = await startTestAgent(t, { gpus: { detect: 'auto', command: smi.command }, gpuSampleMs: 250 });
  await rc('host', 'add', '--name', 'gpu-1', '--address', real.agent.address, '--token', real.token);
  await rc('account', 'create', '--email', 'op@example.com', '--verified', '--operator', '--password', PASSWORD);
  const a = await rc('account', 'create', '--email', 'trainer@example.com', '--verified', '--credits', '10', '--password', PASSWORD);
  const b = await rc('account', 'create', '--email', 'simulated@example.com', '--verified', '--credits', '10', '--password', PASSWORD);

  // The trainer's instance on the real host's GPU 0, the other tenant's on the simulated one.
  await rc('host', 'drain', 'local');
  const idA = await launchReady(api, a.api_token);
  await rc('host', 'resume', 'local');
  await rc('host', 'drain', 'gpu-1');
  const idB = await launchReady(api, b.api_token);

  const errors: string[] = [];
  const browser = async () => {
    const page = await (await launchBrowser(t, { width: 1440, height: 900 })).newPage();
    page.on('pageerror', (err) => errors.push(String(err)));
    return page;
  };
  const trainer = await browser();
  await signIn(trainer, api, 'trainer@example.com');
  await trainer.goto(`${api}/instance`);
  const gpu0 = trainer.locator('[data-gpu="0"]');
  await gpu0.getByRole('heading', { name: /GPU 0 NVIDIA H100 80GB HBM3/ }).waitFor({ timeout: 30_000 });
  await gpu0.locator('.gpu-util', { hasText: '97 %' }).waitFor();
  assert.equal(await gpu0.locator('.gpu-mem').innerText(), '4.8 GiB of 79.6 GiB');
  await gpu0.getByRole('img', { name: /^GPU 0 utilization over the last .*: now 97 %, peak 97 %, mean 97 %$/ }).waitFor();
  await gpu0.getByRole('img', { name: /^GPU 0 memory in use over the last .*: now 4\.8 GiB/ }).waitFor();
  assert.equal(await trainer.locator('[data-gpu]').count(), 1, 'its own GPU only');
  assert.match(await trainer.locator('#gpu-span').innerText(), /the lines show (the last \d+ s|the samples as they come)\.$/);

  // A new figure arrives through the status stream: the page follows without a reload.
  smi.setUsage([
    { index: 0, utilization: 40, memoryUsedMb: 30_000 },
    { index: 1, utilization: 0, memoryUsedMb: 0 },
  ]);
  await gpu0.locator('.gpu-util', { hasText: '40 %' }).waitFor({ timeout: 20_000 });
  await gpu0.getByRole('img', { name: /now 40 %, peak 97 %/ }).waitFor();
  await waitFor(async () => (await gpu0.locator('.gpu-mem').innerText()) === '29.3 GiB of 79.6 GiB');
  await shots(trainer, 'instance-gpu');

  const other = await browser();
  await signIn(other, api, 'simulated@example.com');
  await other.goto(`${api}/instance`);
  await other.locator('#gpu-note', { hasText: 'No GPU telemetry: this instance runs on a simulated GPU' }).waitFor({ timeout: 30_000 });
  assert.equal(await other.locator('[data-gpu="0"] .gpu-util').innerText(), 'no telemetry');
  assert.equal(await other.locator('svg.spark').count(), 0, 'no line drawn for a GPU that reports nothing');
  await shots(other, 'instance-simulated');

  // The operator's Hosts page: every GPU of every host, its figures, history and holder.
  const op = await browser();
  await signIn(op, api, 'op@example.com');
  await op.goto(`${api}/operator/hosts`);
  const real0 = op.getByRole('table', { name: 'GPUs of gpu-1' }).getByRole('row').filter({ hasText: idA });
  await real0.locator('.gpu-util', { hasText: '40 %' }).waitFor({ timeout: 30_000 });
  await real0.getByText('29.3 GiB of 79.6 GiB').waitFor();
  await real0.getByRole('img', { name: /^GPU 0 utilization over the last/ }).waitFor();
  const real1 = op.getByRole('table', { name: 'GPUs of gpu-1' }).getByRole('row').filter({ hasText: 'free' });
  await real1.locator('.gpu-util', { hasText: '0 %' }).waitFor();
  await op.getByText('Simulated GPUs: no GPU telemetry (they report no figures).').waitFor();
  const local = op.getByRole('table', { name: 'GPUs of local' });
  assert.equal(await local.getByRole('row').count(), 5, 'a header and the 4 simulated GPUs');
  await local.getByRole('row').filter({ hasText: idB }).getByText('no telemetry', { exact: true }).waitFor();
  await shots(op, 'hosts-gpus');

  // Prometheus: the control plane's own listener has the gauges (a real scrape).
  const scrape = await fetch(`${platform.controlMetrics.url}/metrics`);
  assert.equal(scrape.status, 200);
  const text = await scrape.text();
  assert.match(
    text,
    new RegExp(
      `^rc_gpu_utilization_percent\\{host="gpu-1",index="0",uuid="${FOUR_H100[0]!.uuid}",model="NVIDIA H100 80GB HBM3",instance_id="${idA}"\\} 40$`,
      'm',
    ),
  );
  assert.match(text, /^rc_gpu_memory_used_bytes\{host="gpu-1",index="1",uuid="[^"]+",model="[^"]+"\} 0$/m);
  assert.doesNotMatch(text, /host="local"/, 'simulated GPUs: no series');
  assert.deepEqual(errors, []);
});
