// The operator's console (issue 32) in a real browser (headless Chromium through playwright-core)
// against the whole platform in this process and a second host agent: an operator made with
// `rc account create --operator` clears a new sign-up from the review queue (the row appears live)
// and the account launches; a coupon the operator creates is redeemed by the tenant; the operator
// adds the second host, drains the first and the launch lands on the second; destroys the tenant's
// instance with a reason the tenant's instance page shows; grants credits with a reason; reads the
// usage and the audit log. A tenant's session gets 403 on every operator route and sees no operator
// link. Every operator page is screenshotted under test-output/console/operator/, checked for
// unlabelled controls and for sideways scrolling at phone width.
import assert from 'node:assert/strict';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Page } from 'playwright-core';
import { startTestAgent } from '../agent/harness.js';
import { browserAvailable, launchBrowser, signInPage } from './browser.js';
import { startConsolePlatform } from './platform.js';

const OUTPUT_DIR = fileURLToPath(new URL('../../../test-output/console/operator/', import.meta.url));
const OPERATOR = 'operator@example.com';
const TENANT = 'tenant@example.com';
const PASSWORD = 'console password 1';
const APP = `require('http').createServer((q, s) => s.end('ok')).listen(process.env.PORT)`;

const h1 = (page: Page, name: string | RegExp) => page.getByRole('heading', { name, level: 1, exact: typeof name === 'string' });

/** Form controls and buttons without an accessible name (their outer HTML). */
function unlabelled(page: Page): Promise<string[]> {
  return page.evaluate(`[...document.querySelectorAll('main input, main select, main textarea, main button')]
    .filter((el) => el.type !== 'hidden' && !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !(el.textContent || '').trim())
    .map((el) => el.outerHTML)`) as Promise<string[]>;
}

/** Screenshot at desktop width, then the same page at phone width must not scroll sideways. */
async function check(page: Page, name: string): Promise<void> {
  assert.deepEqual(await unlabelled(page), [], `${name}: every control has a name`);
  await page.screenshot({ path: join(OUTPUT_DIR, `${name}.png`), fullPage: true });
  await page.setViewportSize({ width: 375, height: 800 });
  assert.equal(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth'), true, `${name} fits a phone`);
  await page.screenshot({ path: join(OUTPUT_DIR, `${name}-phone.png`), fullPage: true });
  await page.setViewportSize({ width: 1280, height: 860 });
}

const signIn = (page: Page, api: string, email: string) => signInPage(page, api, email, PASSWORD);

test('operator console: review, coupon, hosts, drain, launch elsewhere, destroy with a reason, accounts, usage, audit; tenants get 403', {
  timeout: 400_000,
}, async (t) => {
  if (!browserAvailable(t)) return;
  mkdirSync(OUTPUT_DIR, { recursive: true });
  const { api, rc } = await startConsolePlatform(t, 'rc-operator-console-');
  const second = await startTestAgent(t);
  const made = await rc('account', 'create', '--email', OPERATOR, '--verified', '--operator', '--password', PASSWORD);
  assert.equal(made.email, OPERATOR);

  const errors: string[] = [];
  const op = await (await launchBrowser(t)).newPage();
  const tenant = await (await launchBrowser(t)).newPage();
  for (const p of [op, tenant]) p.on('pageerror', (err) => errors.push(String(err)));

  // The operator opens the review queue before the tenant signs up: the row arrives live.
  await signIn(op, api, OPERATOR);
  await op.getByRole('link', { name: 'Operator' }).click();
  await h1(op, 'Review queue').waitFor();
  await op.getByText('Nobody is waiting for review.').waitFor();
  // Nothing to select: no bulk buttons.
  assert.equal(await op.getByRole('button', { name: 'Verify selected' }).isVisible(), false);
  await tenant.goto(`${api}/signup`);
  await tenant.getByLabel('E-mail').fill(TENANT);
  await tenant.getByLabel('Password').fill(PASSWORD);
  await tenant.getByRole('button', { name: 'Create account' }).click();
  await tenant.waitForURL(`${api}/review`);
  await op.getByRole('cell', { name: TENANT, exact: true }).waitFor();
  await op.getByRole('button', { name: 'Verify selected' }).waitFor();
  await check(op, '01-review');

  await tenantIsRefused(tenant, api);

  // Cleared from review: the tenant's review page opens the instance page by itself (it checks
  // every 10 s; "Check again" does it at once, unless the page has already gone).
  await op.getByRole('button', { name: `Verify ${TENANT}` }).click();
  await op.getByText('Nobody is waiting for review.').waitFor();
  await tenant
    .getByRole('button', { name: 'Check again' })
    .click({ timeout: 2_000 })
    .catch(() => {});
  await tenant.waitForURL(`${api}/instance`, { timeout: 30_000 });

  // A coupon for the tenant, shown once, redeemed on the tenant's Credits page.
  await op.getByRole('link', { name: 'Coupons' }).click();
  await h1(op, 'Coupons').waitFor();
  await op.getByLabel('Credits').fill('10');
  await op.getByLabel('Only for the account (e-mail)').fill(TENANT);
  await op.getByRole('button', { name: 'Create coupon' }).click();
  const code = await op.locator('#coupon-code').innerText();
  await op.getByRole('button', { name: 'Copy code' }).waitFor();
  await tenant.getByRole('link', { name: 'Credits' }).click();
  await tenant.getByLabel('Coupon code').fill(code);
  await tenant.getByRole('button', { name: 'Redeem' }).click();
  await tenant.getByText('Added 10 credits.').waitFor();
  await op.reload();
  await op.getByRole('cell', { name: new RegExp(`^by ${TENANT}`) }).waitFor();
  await check(op, '02-coupons');

  try {
    await hostsAndInstances(op, tenant, api, { address: second.agent.address, token: second.token });
    await accountsUsageAudit(op);
  } catch (err) {
    // What the operator's page showed when it failed.
    await op.screenshot({ path: join(OUTPUT_DIR, 'failure.png'), fullPage: true });
    throw err;
  }
  assert.deepEqual(errors, []);
});

/** The tenant sees no operator link, gets 403 on every operator route (from the route table), and no "null" on Model APIs. */
async function tenantIsRefused(tenant: Page, api: string): Promise<void> {
  assert.equal(await tenant.getByRole('link', { name: 'Operator' }).count(), 0);
  assert.equal(await tenant.locator('#nav-operator').isHidden(), true);
  const refused = (await tenant.evaluate(`(async () => {
    const s = await (await fetch('/api/auth/session')).json();
    const doc = await (await fetch('/api/openapi.json')).json();
    const out = [];
    for (const [path, ops] of Object.entries(doc.paths)) {
      if (!path.startsWith('/api/operator/')) continue;
      for (const method of Object.keys(ops)) {
        const url = path.replace('{id}', '1').replace('{op}', 'account.verify');
        const r = await fetch(url, { method: method.toUpperCase(), headers: { 'content-type': 'application/json', 'x-csrf-token': s.csrf_token },
          body: method === 'get' ? undefined : JSON.stringify({ email: '${TENANT}' }) });
        out.push([method, path, r.status]);
      }
    }
    return out;
  })()`)) as [string, string, number][];
  assert.ok(refused.length >= 11);
  for (const [method, path, status] of refused) assert.equal(status, 403, `${method} ${path}`);
  await tenant.goto(`${api}/operator/review`);
  await h1(tenant, 'Not found').waitFor();
  // The Model APIs page with no request today: nothing prints "null" under the usage bar.
  await tenant.goto(`${api}/models`);
  await h1(tenant, 'Model APIs').waitFor();
  await tenant.getByText('No requests today.').waitFor();
  assert.doesNotMatch(await tenant.locator('main').innerText(), /\bnull\b/);
  await tenant.goto(`${api}/review`);
}

/** The second host is added, the first drained; the launch lands on the second; the operator destroys it with a reason. */
async function hostsAndInstances(op: Page, tenant: Page, api: string, second: { address: string; token: string }): Promise<void> {
  await op.getByRole('link', { name: 'Hosts' }).click();
  await h1(op, 'Hosts').waitFor();
  // A host that never answers says why (issue 42), and "never" for its last contact; removed (confirmed).
  await op.getByLabel('Name').fill('nowhere');
  await op.getByLabel('Agent address').fill('127.0.0.1:1');
  await op.getByLabel('Agent token').fill('no-such-token-0123456789');
  await op.getByRole('button', { name: 'Add host' }).click();
  const nowhere = op.getByRole('row').filter({ has: op.getByRole('cell', { name: 'nowhere', exact: true }) });
  await nowhere.locator('.host-reason').filter({ hasText: /\S/ }).waitFor({ timeout: 30_000 });
  await nowhere.getByRole('cell', { name: 'never', exact: true }).waitFor();
  await check(op, '03-hosts-unreachable');
  await op.getByRole('button', { name: 'Remove nowhere' }).click();
  await op.getByRole('dialog').getByRole('button', { name: 'Remove' }).click();
  await nowhere.waitFor({ state: 'detached' });
  await op.getByLabel('Name').fill('second');
  await op.getByLabel('Agent address').fill(second.address);
  await op.getByLabel('Agent token').fill(second.token);
  await op.getByRole('button', { name: 'Add host' }).click();
  const secondRow = op.getByRole('row').filter({ has: op.getByRole('cell', { name: 'second', exact: true }) });
  await secondRow.getByText('connected').waitFor({ timeout: 30_000 });
  await op.getByRole('button', { name: 'Drain local' }).click();
  const localRow = op.getByRole('row').filter({ has: op.getByRole('cell', { name: 'local', exact: true }) });
  await localRow.getByText('draining').waitFor();
  await check(op, '03-hosts');

  // The tenant (now verified, with credits) launches; placement skips the drained host.
  const template = (await tenant.evaluate(`fetch('/api/auth/session').then((r) => r.json()).then((s) => fetch('/api/profile/templates', {
    method: 'POST', headers: { 'content-type': 'application/json', 'x-csrf-token': s.csrf_token },
    body: JSON.stringify({ title: 'Operator test app', image: 'rc/gradio:latest', instance_type: 'gradio', app_port: 7860,
      start_command: ${JSON.stringify(`exec "${process.execPath}" -e "${APP}"`)} }) })).then((r) => r.json())`)) as { id: number };
  await tenant.goto(`${api}/launch/${template.id}`);
  await tenant.getByRole('button', { name: 'Launch' }).click();
  await tenant.waitForURL(`${api}/instance`);
  await tenant.locator('#status', { hasText: 'ready' }).waitFor({ timeout: 60_000 });
  assert.equal(await tenant.evaluate(`fetch('/api/notebook/status').then((r) => r.json()).then((s) => s.host)`), 'second');

  // The instances page shows it (live) on the second host; destroyed with a reason the tenant sees.
  await op.getByRole('link', { name: 'Instances' }).click();
  await h1(op, 'Instances').waitFor();
  const row = op.getByRole('row').filter({ hasText: TENANT });
  await row.getByRole('cell', { name: 'second', exact: true }).waitFor();
  await check(op, '04-instances');
  await row.getByRole('button', { name: /^Destroy / }).click();
  await op.getByLabel('Reason (shown to the owner)').fill('Abuse report 12');
  await op.getByRole('dialog').getByRole('button', { name: 'Destroy' }).click();
  await op.getByText('No instance is running or queued.').waitFor({ timeout: 30_000 });
  await tenant.locator('#status', { hasText: /stopping|stopped/ }).waitFor({ timeout: 30_000 });
  await tenant.getByText('destroyed_by_operator').waitFor();
  await tenant.getByText('Abuse report 12').waitFor();
  await op.getByRole('link', { name: 'Hosts' }).click();
  await op.getByRole('button', { name: 'Resume local' }).click();
  await op.getByRole('button', { name: 'Drain local' }).waitFor();
}

/** Accounts (search, grant with a reason in the ledger), catalogs, usage charts with their tables, the audit log. */
async function accountsUsageAudit(op: Page): Promise<void> {
  await op.getByRole('link', { name: 'Accounts' }).click();
  await h1(op, 'Accounts').waitFor();
  await op.getByLabel('E-mail contains').fill('tenant');
  await op.getByRole('button', { name: 'Search' }).click();
  await op.getByRole('link', { name: TENANT }).click();
  await h1(op, TENANT).waitFor();
  await op.getByLabel('Credits').fill('2.5');
  await op.getByLabel('Reason').fill('Goodwill for ticket 9');
  await op.getByRole('button', { name: 'Grant credits' }).click();
  await op.getByRole('cell', { name: 'Goodwill for ticket 9' }).waitFor();
  await check(op, '05-account');
  await op.getByRole('link', { name: 'Accounts' }).click();
  await h1(op, 'Accounts').waitFor();
  await check(op, '06-accounts');

  await op.getByRole('link', { name: 'Catalogs' }).click();
  await h1(op, 'Catalogs').waitFor();
  await op.getByRole('cell', { name: 'sim-chat' }).waitFor();
  await check(op, '07-catalogs');

  await op.getByRole('link', { name: 'Usage' }).click();
  await h1(op, 'Usage').waitFor();
  await op.getByRole('img', { name: /^GPU hours by day: 1 of 30 days with use/ }).waitFor();
  // (Zero days when the destroyed instance's few seconds round to no credits.)
  await op.getByRole('img', { name: /^Credits consumed by day: [01] of 30 days with use/ }).waitFor();
  await check(op, '08-usage');

  await op.getByRole('link', { name: 'Audit log' }).click();
  await h1(op, 'Audit log').waitFor();
  for (const action of ['account.verify', 'coupon.create', 'host.add', 'host.drain', 'instance.destroy', 'account.grant-credits']) {
    await op.getByRole('row').filter({ hasText: action }).filter({ hasText: OPERATOR }).first().waitFor();
  }
  // Inputs whole (indented, wrapped), and a filter over the loaded entries.
  assert.ok((await op.locator('pre.audit-input').count()) > 0);
  await op.getByLabel('Filter').fill('host.drain');
  await op.getByText(/^\d+ of \d+ loaded entries match\.$/).waitFor();
  assert.equal(await op.getByRole('row').filter({ hasText: 'coupon.create' }).count(), 0);
  await op.getByRole('row').filter({ hasText: 'host.drain' }).first().waitFor();
  await check(op, '09-audit-filtered');
  await op.getByLabel('Filter').fill('');
  await check(op, '09-audit');
}
