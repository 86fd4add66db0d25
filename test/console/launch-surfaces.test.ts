// The console's launch surfaces in Chromium (issue 42): the template list and the launch page show
// the price per GPU count, the balance and the hours it buys, the free GPUs, and the launches the
// rate windows leave; "Insufficient credits" says what is needed and what the account has, with
// the way to Credits. The figures are those of GET /api/launch-quote, checked here against the
// settings. Screenshots at 1440 and 390 wide go to test-output/console/launch-surfaces/
// (RC_SHOT_PREFIX names them, `after` by default; RC_SHOTS_ONLY=1 takes them of an older console).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { waitFor } from '../helpers.js';
import { browserAvailable, launchBrowser, screenshots, SHOTS_ONLY } from './browser.js';
import { startConsolePlatform } from './platform.js';

const EMAIL = 'quote@example.com';
const PASSWORD = 'quote password 1';
const shots = screenshots('launch-surfaces');

/** A pending launch: its stage, the time so far (ticking), and empty logs that say so. */
async function instancePending(page: Page): Promise<void> {
  await page.locator('#stage', { hasText: 'starting: waiting for the app to answer on its port' }).waitFor({ timeout: 30_000 });
  const first = await page.locator('#elapsed').innerText();
  assert.match(first, /^\d+ s$|^\d+ min \d\d s$/);
  await page.locator('#elapsed').filter({ hasNotText: first }).waitFor(); // it ticks
  assert.equal(await page.locator('#logs').innerText(), '');
  assert.equal(await page.locator('#logs').getAttribute('data-empty'), 'No log lines yet: the instance has written nothing so far.');
  await shots(page, 'instance-pending');
}

/** Destroyed: no SSH command, no stage, and "Launch again" launches this template again. */
async function instanceEnded(page: Page, templateId: number): Promise<void> {
  assert.equal(await page.locator('#ssh').count(), 0);
  assert.equal(await page.locator('#stage').count(), 0);
  assert.equal(await page.getByRole('link', { name: 'Launch again' }).getAttribute('href'), `/launch/${templateId}`);
  await shots(page, 'instance-stopped');
}

test('launch surfaces: price per GPU count, balance and hours, free GPUs, launches left, insufficient credits', { timeout: 180_000 }, async (t) => {
  if (!browserAvailable(t)) return;
  // 2 credits per GPU-hour, one launch per 10 minutes, 4 simulated GPUs of a named model.
  const { api, rc } = await startConsolePlatform(t, 'rc-console-quote-', {
    RC_INSTANCE_CREDITS_PER_GPU_HOUR: '2',
    RC_INSTANCE_LAUNCH_RATE: '600:1,3600:5',
    RC_AGENT_GPUS: '4',
    RC_AGENT_GPU_MODEL: 'Test GPU 80GB',
  });
  const account = await rc('account', 'create', '--email', EMAIL, '--password', PASSWORD, '--verified', '--credits', '3');
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(api + path, {
      method,
      headers: { authorization: `Bearer ${account.api_token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: (await res.json()) as any }; // eslint-disable-line @typescript-eslint/no-explicit-any
  };

  const before = await call('GET', '/api/launch-quote');
  assert.equal(before.status, 200);
  assert.equal(before.body.balance, 3);
  assert.equal(before.body.credits_per_gpu_hour, 2);
  assert.deepEqual(
    before.body.options.map((o: any) => [o.gpu_count, o.credits_per_hour, o.affordable, o.hours_affordable]), // eslint-disable-line @typescript-eslint/no-explicit-any
    [
      [1, 2, true, 1.5],
      [2, 4, true, 0.75],
      [4, 8, false, 0.375],
    ],
  );
  assert.deepEqual(before.body.launch_rate, {
    windows: [
      { seconds: 600, max: 1, used: 0, remaining: 1 },
      { seconds: 3600, max: 5, used: 0, remaining: 5 },
    ],
    retry_after_seconds: 0,
  });
  // The local agent's GPUs once it is connected.
  const quote = await waitFor(async () => {
    const q = (await call('GET', '/api/launch-quote')).body;
    return q.capacity.free_gpus === 4 ? q : null;
  });
  assert.deepEqual(quote.capacity, { free_gpus: 4, largest_free: 4, gpu_model: 'Test GPU 80GB', queued: 0 });
  assert.deepEqual(
    quote.options.map((o: any) => o.hosts_with_room), // eslint-disable-line @typescript-eslint/no-explicit-any
    [1, 1, 1],
  );
  assert.equal((await fetch(`${api}/api/launch-quote`)).status, 401);

  const context = await launchBrowser(t, { width: 1440, height: 900 });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  await page.goto(`${api}/signin`);
  await page.getByLabel('E-mail').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${api}/instance`);

  // A template whose command never serves its port: the launch stays pending (starting, waiting
  // for the port) while the instance page shows its stage, the time so far and empty logs.
  const tpl = await call('POST', '/api/profile/templates', {
    title: 'Quote app',
    image: 'rc/gradio:latest',
    instance_type: 'gradio',
    start_command: 'sleep 600',
  });
  assert.equal(tpl.status, 200, JSON.stringify(tpl.body));
  const id = tpl.body.id;
  assert.equal((await call('POST', `/api/templates/${id}/launch`, { gpu_count: 1 })).status, 200);
  await page.goto(`${api}/instance`);
  if (SHOTS_ONLY) {
    await page.locator('#status', { hasText: 'pending' }).waitFor({ timeout: 30_000 });
    await shots(page, 'instance-pending');
  }
  if (!SHOTS_ONLY) await instancePending(page);
  await page.getByRole('button', { name: 'Destroy' }).click();
  await page.getByRole('dialog').getByRole('button', { name: 'Destroy' }).click();
  await page.locator('#status', { hasText: /stopped|failed/ }).waitFor({ timeout: 30_000 });
  if (SHOTS_ONLY) await shots(page, 'instance-stopped');
  else await instanceEnded(page, id);

  // That launch used up the 10-minute window.
  const used = (await call('GET', '/api/launch-quote')).body;
  assert.deepEqual(
    used.launch_rate.windows.map((w: any) => [w.used, w.remaining]), // eslint-disable-line @typescript-eslint/no-explicit-any
    [
      [1, 0],
      [1, 4],
    ],
  );
  assert.ok(used.launch_rate.retry_after_seconds > 0 && used.launch_rate.retry_after_seconds <= 600);

  // The template list: prices, balance, free GPUs, launches left.
  await page.goto(`${api}/templates`);
  await page.getByRole('heading', { name: 'Your templates' }).waitFor();
  if (SHOTS_ONLY) {
    // Screenshots of an older console for the before/after comparison: its pages lack what is asserted.
    await shots(page, 'templates');
    await page.goto(`${api}/launch/${id}`);
    await page.getByRole('heading', { name: 'Launch Quote app', level: 1 }).waitFor();
    await shots(page, 'launch');
    await page.getByRole('radio', { name: /^4 GPUs/ }).check();
    await page.getByRole('button', { name: 'Launch' }).click();
    await page.getByRole('alert').filter({ hasText: 'Insufficient credits' }).waitFor();
    return shots(page, 'insufficient');
  }
  const summary = page.getByRole('region', { name: 'Prices and capacity' });
  await summary.waitFor();
  const text = await summary.innerText();
  assert.match(text, /Balance\s+(?:3|2\.9\d*) credits/);
  assert.match(text, /1 GPU: 2\/h \(1 h (?:2\d|30) min\) · 2 GPUs: 4\/h \(4\d min\) · 4 GPUs: 8\/h \(not enough credits\)/);
  assert.match(text, /Free GPUs\s+4 × Test GPU 80GB, at most 4 on one host/);
  assert.match(text, /Launches left: 0 of 1 per 10 minutes, 4 of 5 per hour\. The next launch is possible in about (10|[1-9]) min\./);
  await shots(page, 'templates');

  // The launch page: each GPU count with its price, how long the balance lasts, hosts with room.
  await page.goto(`${api}/launch/${id}`);
  await page.getByRole('heading', { name: 'Launch Quote app', level: 1 }).waitFor();
  assert.match(await page.locator('#balance').innerText(), /^(?:3|2\.9\d*) credits · Credits$/);
  assert.equal(await page.locator('#capacity').innerText(), '4 × Test GPU 80GB (at most 4 on one host)');
  assert.match(await page.locator('#gpu-1-d').innerText(), /^your balance lasts 1 h (?:2\d|30) min; free now on 1 host\.$/);
  assert.match(await page.locator('#gpu-4-d').innerText(), /^needs a balance of 4 \(you have (?:3|2\.9\d*)\); free now on 1 host\.$/);
  assert.match(await page.locator('#launch-rate').innerText(), /^Launches left: 0 of 1 per 10 minutes/);
  assert.equal(await page.getByRole('radio', { name: /^1 GPU · 2 credits per hour/ }).isChecked(), true);
  await shots(page, 'launch');

  // 4 GPUs: "Insufficient credits" with what is needed, what the account has, and the way to Credits.
  await page.getByRole('radio', { name: /^4 GPUs/ }).check();
  await page.getByRole('button', { name: 'Launch' }).click();
  const alert = page.getByRole('alert').filter({ hasText: 'Insufficient credits' });
  await alert.waitFor();
  assert.match(await alert.innerText(), /^Insufficient credits: 4 GPUs need a balance of at least 4 credits and you have (?:3|2\.9\d*)\. Add credits\.$/);
  await shots(page, 'insufficient');
  await alert.getByRole('link', { name: 'Add credits' }).click();
  await page.waitForURL(`${api}/credits`);
  assert.deepEqual(errors, []);
});

test('template form: defaults agree, errors are sentences next to their fields (checked here and by the API)', { timeout: 120_000 }, async (t) => {
  if (!browserAvailable(t)) return;
  const { api, rc } = await startConsolePlatform(t, 'rc-console-form-');
  await rc('account', 'create', '--email', EMAIL, '--password', PASSWORD, '--verified');
  const context = await launchBrowser(t, { width: 1440, height: 900 });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  await page.goto(`${api}/signin`);
  await page.getByLabel('E-mail').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL(`${api}/instance`);
  await page.goto(`${api}/templates/new`);
  await page.getByRole('heading', { name: 'New template', level: 1 }).waitFor();
  const image = page.getByLabel('Image');
  const type = page.getByLabel('Instance type');
  /** The error slot next to a field (`<input id>-error`, also in its aria-describedby). */
  const error = (label: string) =>
    page
      .getByLabel(label, { exact: true })
      .evaluate((el) =>
        el.getAttribute('aria-describedby')?.includes(`${el.id}-error`) ? el.ownerDocument.getElementById(`${el.id}-error`)?.textContent : 'not described',
      );

  // Three mistakes at once: no title, vllm without a start command, a disk over 200 GB.
  await type.selectOption('vllm');
  await page.getByLabel('Disk size (GB)').fill('250');
  await page.getByRole('button', { name: 'Create template' }).click();
  if (SHOTS_ONLY) {
    await page.getByRole('alert').filter({ hasText: /\S/ }).first().waitFor();
    return shots(page, 'template-form');
  }
  await page.getByText('A vLLM template needs a start command: the command that serves the model on $PORT.').waitFor();
  assert.equal(await error('Title'), 'Give the template a title.');
  assert.equal(await error('Disk size (GB)'), 'The disk size is a whole number of GB from 100 to 200.');
  assert.equal(await page.getByLabel('Title').getAttribute('aria-invalid'), 'true');
  assert.equal(await page.getByLabel('Image').getAttribute('aria-invalid'), null);
  // Not zod's text at the top of the form.
  assert.equal(await page.getByText(/Too big|expected number/).count(), 0);
  await shots(page, 'template-form');

  // A mistake only the API catches (a description over 10,000 characters): its message goes to the field too.
  await page.getByLabel('Title').fill('Form check');
  await type.selectOption('gradio');
  await page.getByLabel('Disk size (GB)').fill('100');
  await page.getByLabel('Description').fill('x'.repeat(10_001));
  await page.getByRole('button', { name: 'Create template' }).click();
  await page.getByText('The description can have at most 10,000 characters.').waitFor();
  assert.equal(await error('Title'), '');
  assert.equal(await error('Description'), 'The description can have at most 10,000 characters.');

  // SSH switched on without a saved key, on an image without an SSH server: the form says both, with the way to Account.
  assert.equal(await page.locator('#ssh-key-note').isVisible(), false);
  await page.getByLabel('SSH access').check();
  assert.match(
    await page.locator('#ssh-key-note').innerText(),
    /^The image rc\/jupyter-pytorch:latest runs no SSH server: instances of this template get no SSH\. Pick an image marked “SSH”\. No SSH key saved: add one on Account before launching/,
  );
  await page.getByLabel('SSH access').uncheck();
  assert.equal(await page.locator('#ssh-key-note').isVisible(), false);

  // Defaults agree: a fresh form has the first image and its type; picking the Gradio image picks gradio.
  await page.goto(`${api}/templates/new`);
  await page.getByRole('heading', { name: 'New template', level: 1 }).waitFor();
  assert.equal(await image.inputValue(), 'rc/jupyter-pytorch:latest');
  assert.equal(await type.inputValue(), 'jupyter');
  await image.selectOption('rc/gradio:latest');
  assert.equal(await type.inputValue(), 'gradio');
  // Once the type is picked by hand, the image no longer changes it.
  await type.selectOption('custom');
  await image.selectOption('rc/streamlit:latest');
  assert.equal(await type.inputValue(), 'custom');
  assert.deepEqual(errors, []);
});
