// Console pages that wait on someone else, and Model APIs' ready-to-paste settings (issue 42), in
// Chromium: the review page opens the instance page by itself once an operator verifies the
// account; Model APIs scales per-model bars to the busiest model and gives curl and the four
// coding agents' settings with this platform's base URLs and a catalog model. Screenshots at 1440
// and 390 wide go to test-output/console/pages/.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Page } from 'playwright-core';
import { waitFor } from '../helpers.js';
import { browserAvailable, launchBrowser, screenshots, SHOTS_ONLY } from './browser.js';
import { startConsolePlatform } from './platform.js';

const EMAIL = 'pages@example.com';
const PASSWORD = 'pages password 1';
const shots = screenshots('pages');

/** The same pages of an older console, for the before/after comparison (no assertions on them). */
async function olderConsoleShots(page: Page, api: string, rc: (...args: string[]) => Promise<unknown>): Promise<void> {
  await page.getByRole('button', { name: 'Check again' }).waitFor();
  await shots(page, 'review');
  await rc('account', 'verify', '--email', EMAIL);
  await page.getByRole('button', { name: 'Check again' }).click();
  await page.waitForURL(`${api}/instance`);
  await page.goto(`${api}/models`);
  await page.getByRole('heading', { name: 'Catalog' }).waitFor();
  await shots(page, 'models');
  await page.goto(`${api}/no/such/page`);
  await page.waitForLoadState();
  await shots(page, 'not-found');
}

test('review updates itself on verification; Model APIs: bars to scale, curl and coding-agent settings', { timeout: 120_000 }, async (t) => {
  if (!browserAvailable(t)) return;
  const { platform, api, rc } = await startConsolePlatform(t, 'rc-console-pages-');
  const context = await launchBrowser(t, { width: 1440, height: 900 });
  const page = await context.newPage();
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));

  // Sign up: under review. The operator verifies with the CLI; the page follows without a click.
  await page.goto(`${api}/signup`);
  await page.getByLabel('E-mail').fill(EMAIL);
  await page.getByLabel('Password').fill(PASSWORD);
  await page.getByRole('button', { name: 'Create account' }).click();
  await page.waitForURL(`${api}/review`);
  if (SHOTS_ONLY) return olderConsoleShots(page, api, rc);
  await page.getByText('This page checks every 10 seconds').waitFor();
  await shots(page, 'review');
  const verified = await rc('account', 'verify', '--email', EMAIL);
  await page.waitForURL(`${api}/instance`, { timeout: 30_000 });
  assert.equal(await page.getByRole('button', { name: 'Check again' }).count(), 0);

  // Usage on two models, one much busier: its bar is full, the other's is not empty.
  for (const [model, max_tokens] of [
    ['sim-chat', 4],
    ['sim-reasoner', 64],
  ] as const) {
    const chat = await fetch(`${platform.gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${verified.api_token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model, messages: [{ role: 'user', content: 'hello' }], max_tokens }),
    });
    assert.equal(chat.status, 200, await chat.clone().text());
    await chat.json();
  }
  await waitFor(async () => {
    const u = await fetch(`${api}/api/profile/model-usage`, { headers: { authorization: `Bearer ${verified.api_token}` } });
    return ((await u.json()) as { requests: number }).requests === 2;
  });
  await page.goto(`${api}/models`);
  const list = page.getByRole('list', { name: 'Tokens by model today' });
  await list.waitFor();
  const widths = (await list.locator('.bar > span').evaluateAll((els) => els.map((e) => (e as unknown as { dataset: { w: string } }).dataset.w))) as string[];
  assert.equal(widths.length, 2);
  assert.ok(widths.includes('100.0%'), `the busiest model fills its bar: ${widths}`);
  assert.ok(
    widths.every((w) => Number.parseFloat(w) > 0.5),
    `no bar looks empty: ${widths}`,
  );

  // Ready-to-paste settings: this platform's base URLs, a catalog model, the key's placeholder.
  const models = (await (await fetch(`${api}/api/models`, { headers: { authorization: `Bearer ${verified.api_token}` } })).json()) as {
    openai_base_url: string;
    anthropic_base_url: string;
    models: { name: string }[];
  };
  const model = models.models[0]!.name;
  const text = (label: string) => page.getByLabel(label, { exact: true }).innerText();
  assert.match(await text('curl'), new RegExp(`^curl ${models.openai_base_url}/chat/completions -H "Authorization: Bearer YOUR_API_KEY"`));
  assert.match(await text('curl'), new RegExp(`"model":"${model}"`));
  assert.equal(await text('Claude Code'), `ANTHROPIC_BASE_URL=${models.anthropic_base_url} ANTHROPIC_API_KEY=YOUR_API_KEY ANTHROPIC_MODEL=${model} claude`);
  assert.equal(await text('Qwen Code'), `OPENAI_BASE_URL=${models.openai_base_url} OPENAI_API_KEY=YOUR_API_KEY OPENAI_MODEL=${model} qwen`);
  assert.match(await text('Codex CLI configuration'), new RegExp(`base_url = "${models.openai_base_url}"\\nenv_key = "RC_API_KEY"\\nwire_api = "responses"`));
  assert.equal(await text('Codex CLI'), `RC_API_KEY=YOUR_API_KEY codex -m ${model}`);
  const opencode = JSON.parse(await text('opencode configuration'));
  assert.equal(opencode.provider.rc.options.baseURL, models.openai_base_url);
  assert.deepEqual(
    Object.keys(opencode.provider.rc.models),
    models.models.map((m) => m.name),
  );
  assert.equal(await text('opencode'), `RC_API_KEY=YOUR_API_KEY opencode --model rc/${model}`);
  await shots(page, 'models');

  // An unknown path: the console's own page, not the API's JSON.
  const miss = await page.goto(`${api}/no/such/page`);
  assert.equal(miss?.status(), 404);
  await page.getByRole('heading', { name: 'Not found', level: 1 }).waitFor();
  await page.getByRole('link', { name: 'Home' }).waitFor();
  await shots(page, 'not-found');
  assert.deepEqual(errors, []);
});
