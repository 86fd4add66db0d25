// Cookie tossing in a real browser (issue 27): a page on another port of the console's host (a
// small server standing in for any tenant content that shares the host name: a tunnel, an app)
// runs `document.cookie = "rc_session=<attacker's session>; path=/api"`. Cookies ignore ports, so
// the signed-in victim's browser now sends two rc_session cookies to the API, the attacker's first.
// The victim must then have no session at all (never the attacker's account), a saved SSH key must
// not land in the attacker's account, and signing in again, or signing out then in, recovers.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import type { BrowserContext, Page } from 'playwright-core';
import { createLogger } from '../../lib/log.js';
import { startPlatform, sessionCookieOf, sshKey } from '../control-plane/platform.js';
import { listenLocal } from '../helpers.js';
import { browserAvailable, launchBrowser } from './browser.js';

const VICTIM = { email: 'victim@example.com', password: 'victim password 1' };
const ATTACKER = { email: 'attacker@example.com', password: 'attacker password 1' };

/** The rc_session cookies the browser holds for the console's host, on any path: path and value. */
async function sessionCookies(context: BrowserContext, api: string): Promise<{ path: string; value: string }[]> {
  const host = new URL(api).hostname;
  return (await context.cookies()).filter((c) => c.name === 'rc_session' && c.domain === host).map((c) => ({ path: c.path, value: c.value }));
}

/** Signs in through the console's form. */
async function signIn(page: Page, api: string): Promise<void> {
  await page.goto(`${api}/signin`);
  await page.getByLabel('E-mail').fill(VICTIM.email);
  await page.getByLabel('Password').fill(VICTIM.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((u) => u.pathname !== '/signin');
}

/** GET /api/me from the console's page: status and e-mail. */
async function me(page: Page): Promise<{ status: number; email: string | undefined }> {
  return page.evaluate(`fetch('/api/me').then(async (r) => ({ status: r.status, email: (await r.json()).email }))`) as Promise<{
    status: number;
    email: string | undefined;
  }>;
}

test("cookie tossing from another port of the console host: no session instead of the attacker's; sign-in and sign-out recover", {
  timeout: 120_000,
}, async (t) => {
  if (!browserAvailable(t)) return;
  const p = await startPlatform({ logger: createLogger('silent') });
  t.after(() => p.close());
  await p.account(VICTIM.email, { verified: true, password: VICTIM.password });
  const attacker = await p.account(ATTACKER.email, { verified: true, password: ATTACKER.password });
  const attackerLogin = await p.call('POST', '/api/auth/login', { body: ATTACKER });
  const attackerToken = sessionCookieOf(attackerLogin).split('=')[1]!;
  const api = p.cp.url; // http://127.0.0.1:<port>

  // The attacker's page on another port of the same host. `extra` adds a cookie on a path nobody
  // lists (a parameter path), which only Clear-Site-Data can remove.
  const tenant = createServer((req, res) => {
    const extra = req.url?.includes('extra') ? `document.cookie = "rc_session=junk; path=/api/profile/templates/7";` : '';
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end(`<!doctype html><title>tenant</title><script>document.cookie = "rc_session=${attackerToken}; path=/api";${extra}</script><p>hello</p>`);
  });
  const tenantPort = await listenLocal(t, tenant);
  const toss = async (page: Page, extra = false) => {
    await page.goto(`http://127.0.0.1:${tenantPort}/${extra ? 'extra' : ''}`);
    await page.locator('p').waitFor();
  };

  const context = await launchBrowser(t);
  const page = await context.newPage();
  await signIn(page, api);
  assert.deepEqual(await me(page), { status: 200, email: VICTIM.email });

  // The attack: two rc_session cookies for the host, the attacker's on the longer path.
  const other = await context.newPage();
  await toss(other);
  assert.deepEqual((await sessionCookies(context, api)).map((c) => c.path).sort(), ['/', '/api']);
  const during = await me(page);
  assert.equal(during.status, 401, `the victim's /api/me must not be the attacker's account: ${JSON.stringify(during)}`);
  assert.notEqual(during.email, ATTACKER.email);
  // The console's save of an SSH key (CSRF token from /api/auth/session, as the console does it) lands nowhere.
  const key = sshKey('ssh-ed25519', 'victim@laptop');
  const saved = await page.evaluate(`fetch('/api/auth/session').then((r) => r.json()).then((s) => fetch('/api/profile/ssh-key', { method: 'POST',
      headers: { 'content-type': 'application/json', 'x-csrf-token': String(s.csrf_token) }, body: JSON.stringify({ ssh_public_key: ${JSON.stringify(key)} }) }))
      .then((r) => r.status)`);
  assert.equal(saved, 401);
  assert.equal((await p.call('GET', '/api/me', { key: attacker.api_token! })).body.ssh_public_key, null, "nothing saved into the attacker's account");
  // The console shows the victim signed out, not as the attacker.
  await page.goto(`${api}/`);
  await page.waitForURL(`${api}/signin`);

  // Recovery by signing in again: the sign-in response expires the tossed cookie beside the new one.
  await signIn(page, api);
  assert.deepEqual(await sessionCookies(context, api).then((c) => c.map((x) => x.path)), ['/']);
  assert.deepEqual(await me(page), { status: 200, email: VICTIM.email });

  // Tossed again, also on a path nobody lists: sign-out (without a session) clears every
  // rc_session cookie of the host, Clear-Site-Data included, on http://127.0.0.1.
  await toss(other, true);
  assert.equal((await sessionCookies(context, api)).length, 3);
  const out = await page.evaluate(
    `fetch('/api/auth/logout', { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' }).then((r) => r.status)`,
  );
  assert.equal(out, 200);
  assert.deepEqual(await sessionCookies(context, api), [], 'every session cookie is gone');
  await signIn(page, api);
  assert.deepEqual(await me(page), { status: 200, email: VICTIM.email });
});
