// Headless Chromium for the console tests: Debian's /usr/bin/chromium driven by playwright-core
// (no browser download). Without it the tests are skipped, unless RC_REQUIRE_BROWSER=1 (CI),
// which makes them fail instead.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { chromium, type BrowserContext } from 'playwright-core';

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
