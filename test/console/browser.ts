// Headless Chromium for the console tests: Debian's /usr/bin/chromium driven by playwright-core
// (no browser download). Without it the tests are skipped, unless RC_REQUIRE_BROWSER=1 (CI),
// which makes them fail instead.
import assert from 'node:assert/strict';
import { existsSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';

export const CHROMIUM = process.env.RC_CHROMIUM || '/usr/bin/chromium';

const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--no-first-run',
  '--disable-quic',
  '--disable-sync',
];

/** True when Chromium is installed; otherwise skips the test (or fails it with RC_REQUIRE_BROWSER=1). */
export function browserAvailable(t: TestContext): boolean {
  if (existsSync(CHROMIUM)) return true;
  if (process.env.RC_REQUIRE_BROWSER === '1') throw new Error(`A browser is required (RC_REQUIRE_BROWSER=1) but ${CHROMIUM} does not exist`);
  t.skip(`no browser at ${CHROMIUM}`);
  return false;
}

/** A fresh browser profile (its own --user-data-dir), closed and removed after the test. */
export async function launchBrowser(t: TestContext, viewport = { width: 1280, height: 860 }): Promise<BrowserContext> {
  const profile = mkdtempSync(join(tmpdir(), 'rc-console-profile-'));
  const context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport, timeout: 60_000 });
  t.after(async () => {
    await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  });
  return context;
}

/** RC_SHOTS_ONLY=1: screenshots only, no assertions on the pages (a run against an older console, for "before" pictures). */
export const SHOTS_ONLY = process.env.RC_SHOTS_ONLY === '1';

/**
 * Screenshots of a page at 1440 and 390 px wide into `test-output/console/<folder>/`, named
 * `<RC_SHOT_PREFIX or "after">-<name>-<width>.png`; each width must fit without sideways scrolling.
 */
export function screenshots(folder: string): (page: Page, name: string) => Promise<void> {
  const dir = fileURLToPath(new URL(`../../../test-output/console/${folder}/`, import.meta.url));
  const prefix = process.env.RC_SHOT_PREFIX || 'after';
  return async (page, name) => {
    mkdirSync(dir, { recursive: true });
    for (const width of [1440, 390]) {
      await page.setViewportSize({ width, height: 900 });
      await page.screenshot({ path: join(dir, `${prefix}-${name}-${width}.png`), fullPage: true });
      assert.ok(await page.evaluate('document.documentElement.scrollWidth <= window.innerWidth'), `${name} fits ${width} px`);
    }
    await page.setViewportSize({ width: 1440, height: 900 });
  };
}

/** Signs in through the console's form and waits to be taken off /signin. */
export async function signInPage(page: Page, api: string, email: string, password: string): Promise<void> {
  await page.goto(`${api}/signin`);
  await page.getByLabel('E-mail').fill(email);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname !== '/signin');
}
