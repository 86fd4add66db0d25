// Issue 44, item 8, in Chromium: the console, instance apps and tunnels on names under test domains
// that the browser maps to 127.0.0.1 (`--host-resolver-rules`). A tenant's tunnel page runs
// `document.cookie = "...; domain=<its registrable domain>"`.
// - One registrable domain for all (the red team's shape): `rc start` refuses the configuration.
//   Served anyway (parts started by hand), the tossed cookies reach the console's host (two
//   rc_session: the victim has no session) and the app's host; the app still gets only its own.
// - Registrable domains apart (the documented shape): the configuration loads, the browser files
//   the tunnel's cookies under the tunnels' domain only, and the console session and the victim's
//   app are untouched.
// - npm start's `*.localhost`: Chromium refuses `domain=localhost`, so each name is its own site.
// The tunnel's page is served by a plain server on the tunnel's name: a cookie's scope depends only
// on the page's host, and the broker relays pages verbatim (test/dedicated/tunnel-browser.test.ts).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { openInstanceRoutes, ProxyTickets } from '../../control-plane/proxy/handover.js';
import { startInstanceProxyServer } from '../../control-plane/proxy/proxy.js';
import { loadConfig } from '../../lib/config.js';
import { ConfigError } from '../../lib/errors.js';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { createLogger } from '../../lib/log.js';
import { sessionCookieOf, startPlatform } from '../control-plane/platform.js';
import { listenLocal } from '../helpers.js';
import { browserAvailable, CHROMIUM } from './browser.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));
const VICTIM = { email: 'victim@example.com', password: 'victim password 1' };
const ATTACKER = { email: 'attacker@example.com', password: 'attacker password 1' };
const TUNNEL_ID = `t${'ab'.repeat(12)}`;

/** Chromium with every name under `domains` resolved to 127.0.0.1 (`*.localhost` is loopback already). */
async function launch(t: TestContext, domains: string[]): Promise<BrowserContext> {
  const profile = mkdtempSync(join(tmpdir(), 'rc-cookie-sites-'));
  const rules = domains.flatMap((d) => [`MAP ${d} 127.0.0.1`, `MAP *.${d} 127.0.0.1`]).join(', ');
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    timeout: 60_000,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--no-first-run',
      '--disable-sync',
      '--disable-features=HttpsUpgrades',
      `--host-resolver-rules=${rules}`,
    ],
  });
  t.after(async () => {
    await context.close().catch(() => {});
    rmSync(profile, { recursive: true, force: true });
  });
  return context;
}

interface Deployment {
  console: string;
  /** The app of the victim's instance `inst-victim`. */
  app: string;
  /** The attacker's tunnel page, which tosses cookies for each of `tossDomains` ('': host-only). */
  tunnel: string;
  attackerSession: string;
  /** What the app received on its last request. */
  appSaw: () => string | undefined;
}

/**
 * The platform API and console, the instance proxy and a tunnel's page, on `consoleHost`,
 * `<id>.<appsHost>` and `<tunnel id>.<tunnelsHost>` (ports of their own on 127.0.0.1). The victim's
 * instance app sets `sid=own` on /login and echoes the cookies it gets on /echo.
 */
async function deploy(t: TestContext, hosts: { console: string; apps: string; tunnels: string }, tossDomains: string[]): Promise<Deployment> {
  const routes = new InstanceRouteTable(() => {}, 0);
  let tickets!: ProxyTickets; // made on the platform's store, once it has one
  let proxyBase = '';
  const p = await startPlatform({
    routes: (deps) => openInstanceRoutes({ tickets: (tickets = new ProxyTickets(deps.store)), proxyBase: () => proxyBase, instance: (id) => routes.get(id) }),
  });
  t.after(() => p.close());
  const victim = await p.account(VICTIM.email, { verified: true, password: VICTIM.password });
  await p.account(ATTACKER.email, { verified: true, password: ATTACKER.password });
  const attackerSession = sessionCookieOf(await p.call('POST', '/api/auth/login', { body: ATTACKER })).split('=')[1]!;

  const seen: (string | undefined)[] = [];
  const app = createServer((req, res) => {
    seen.push(req.headers.cookie);
    const headers: Record<string, string> = { 'content-type': 'text/plain', 'cache-control': 'no-store' };
    if (req.url === '/login') headers['set-cookie'] = 'sid=own; Path=/; HttpOnly';
    res.writeHead(200, headers);
    res.end(`app ${req.url}`);
  });
  const appPort = await listenLocal(t, app);
  routes.set({ instanceId: 'inst-victim', accountId: victim.id, status: 'ready', instanceType: 'gradio', ports: new Map([[7860, `127.0.0.1:${appPort}`]]) });
  const proxy = await startInstanceProxyServer({ store: p.cp.store, routes, tickets, publicUrl: `http://${hosts.apps}`, logger: createLogger('silent') });
  t.after(() => proxy.close());
  proxyBase = `http://${hosts.apps}:${proxy.port}`;

  const tosses = tossDomains
    .flatMap((d) => [`rc_session=${attackerSession}${d ? `; domain=${d}` : ''}; path=/`, `sid=evil${d ? `; domain=${d}` : ''}; path=/`])
    .map((c) => `document.cookie = ${JSON.stringify(c)};`)
    .join('\n');
  const tunnelPage = createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'no-store' });
    res.end(`<!doctype html><title>tunnel</title><script>${tosses}</script><p>tossed</p>`);
  });
  const tunnelPort = await listenLocal(t, tunnelPage);
  return {
    console: `http://${hosts.console}:${new URL(p.cp.url).port}`,
    app: `http://inst-victim.${hosts.apps}:${proxy.port}`,
    tunnel: `http://${TUNNEL_ID}.${hosts.tunnels}:${tunnelPort}/`,
    attackerSession,
    appSaw: () => seen.at(-1),
  };
}

/** GET /api/me from a page of the console at `consoleUrl`. */
async function me(page: Page, consoleUrl: string): Promise<{ status: number; email: string | undefined }> {
  if (new URL(page.url()).origin !== consoleUrl) await page.goto(`${consoleUrl}/`);
  return page.evaluate(`fetch('/api/me').then(async (r) => ({ status: r.status, email: (await r.json()).email }))`) as Promise<{
    status: number;
    email: string | undefined;
  }>;
}

/** The victim signs in on the console, opens the instance (the hand-over), and the app sets its cookie. */
async function victimSignsInAndOpens(page: Page, d: Deployment): Promise<void> {
  await page.goto(`${d.console}/`);
  const login = await page.evaluate(
    `fetch('/api/auth/login', { method: 'POST', headers: { 'content-type': 'application/json' }, body: ${JSON.stringify(JSON.stringify(VICTIM))} }).then((r) => r.status)`,
  );
  assert.equal(login, 200);
  assert.deepEqual(await me(page, d.console), { status: 200, email: VICTIM.email });
  await page.goto(`${d.console}/api/instances/inst-victim/open`);
  assert.equal(new URL(page.url()).origin, d.app, page.url());
  await page.goto(`${d.app}/login`);
  await page.goto(`${d.app}/echo`);
  assert.equal(d.appSaw(), 'sid=own', 'the app gets its own cookie back (its seal beside it)');
}

/** The tunnel page's visit: its script tosses its cookies. */
async function visitTunnel(context: BrowserContext, d: Deployment): Promise<void> {
  const page = await context.newPage();
  await page.goto(d.tunnel);
  await page.locator('p').waitFor();
  await page.close();
}

/** The cookies the browser would send to `url`: name=value. */
async function jar(context: BrowserContext, url: string): Promise<string[]> {
  return (await context.cookies(url)).map((c) => `${c.name}=${c.value}`).sort();
}

test('one registrable domain for console, apps and tunnels: refused at start; served anyway, a tunnel page reaches the console, and the app still gets only its own cookie', {
  timeout: 120_000,
}, async (t) => {
  if (!browserAvailable(t)) return;
  const shared = {
    RC_API_PUBLIC_URL: 'http://console.example.net:8080',
    RC_PROXY_PUBLIC_URL: 'http://apps.example.net:8081',
    RC_TUNNEL_PUBLIC_URL: 'http://tunnels.example.net:8082',
  };
  // `rc start` stops before anything listens, naming both settings and the registrable domain.
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-cookie-sites-data-'));
  t.after(() => rmSync(dataDir, { recursive: true, force: true }));
  const started = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
    const child = execFile(
      process.execPath,
      [RC, 'start'],
      { env: { ...process.env, ...shared, RC_DATA_DIR: dataDir }, timeout: 60_000 },
      (_err, _out, stderr) => resolve({ code: child.exitCode, stderr }),
    );
  });
  assert.notEqual(started.code, 0);
  assert.match(
    started.stderr,
    /RC_API_PUBLIC_URL \(http:\/\/console\.example\.net:8080\) and RC_PROXY_PUBLIC_URL \(http:\/\/apps\.example\.net:8081\) share the registrable domain example\.net/,
  );

  const d = await deploy(t, { console: 'console.example.net', apps: 'apps.example.net', tunnels: 'tunnels.example.net' }, ['example.net']);
  const context = await launch(t, ['example.net']);
  const page = await context.newPage();
  await victimSignsInAndOpens(page, d);

  await visitTunnel(context, d);
  // The browser took the tunnel's cookies for the whole domain: the console's host now has two
  // rc_session (the victim is signed out, never signed in as the attacker) and the app's host two sid.
  assert.ok((await jar(context, d.console)).includes(`rc_session=${d.attackerSession}`));
  assert.ok((await jar(context, d.app)).includes('sid=evil'));
  const during = await me(page, d.console);
  assert.equal(during.status, 401, JSON.stringify(during));
  // The proxy forwards the app's own sealed cookie only, never the tossed one.
  await page.goto(`${d.app}/echo`);
  assert.equal(d.appSaw(), 'sid=own');
});

test('registrable domains apart: the configuration loads; a tunnel page reaches neither the console nor the apps', { timeout: 120_000 }, async (t) => {
  if (!browserAvailable(t)) return;
  const hosts = { console: 'console.example.com', apps: 'apps.example-apps.net', tunnels: 'tunnels.example-tunnels.net' };
  const config = loadConfig({
    RC_API_PUBLIC_URL: `http://${hosts.console}:8080`,
    RC_PROXY_PUBLIC_URL: `http://${hosts.apps}:8081`,
    RC_TUNNEL_PUBLIC_URL: `http://${hosts.tunnels}:8082`,
  });
  assert.equal(config.tunnelPublicUrl, `http://${hosts.tunnels}:8082`);
  // The tunnel's page tries every domain; the browser accepts only its own registrable domain.
  const d = await deploy(t, hosts, ['example-tunnels.net', 'example.com', 'example-apps.net', 'apps.example-apps.net']);
  const context = await launch(t, ['example.com', 'example-apps.net', 'example-tunnels.net']);
  const page = await context.newPage();
  await victimSignsInAndOpens(page, d);

  await visitTunnel(context, d);
  assert.ok((await jar(context, d.tunnel)).includes('sid=evil'), "the tunnel's cookies exist, under its own domain");
  assert.ok(!(await jar(context, d.console)).some((c) => c.includes(d.attackerSession) || c === 'sid=evil'));
  assert.ok(!(await jar(context, d.app)).some((c) => c.includes(d.attackerSession) || c === 'sid=evil'));
  assert.deepEqual(await me(page, d.console), { status: 200, email: VICTIM.email });
  await page.goto(`${d.app}/echo`);
  assert.equal(d.appSaw(), 'sid=own');
  assert.equal(await page.locator('body').textContent(), 'app /echo');
});

test("npm start's names: Chromium refuses domain=localhost, so a tunnel page on *.localhost reaches no app", { timeout: 120_000 }, async (t) => {
  if (!browserAvailable(t)) return;
  assert.doesNotThrow(() => loadConfig({}), ConfigError);
  const d = await deploy(t, { console: '127.0.0.1', apps: 'localhost', tunnels: 'localhost' }, ['localhost', '.localhost', '']);
  const context = await launch(t, []);
  const page = await context.newPage();
  await victimSignsInAndOpens(page, d);
  await visitTunnel(context, d);
  assert.deepEqual(
    (await context.cookies()).filter((c) => c.value === 'evil' || c.value === d.attackerSession).map((c) => c.domain),
    [`${TUNNEL_ID}.localhost`, `${TUNNEL_ID}.localhost`],
    "only the host-only ones, on the tunnel's own name: none for localhost",
  );
  assert.deepEqual(await me(page, d.console), { status: 200, email: VICTIM.email });
  await page.goto(`${d.app}/echo`);
  assert.equal(d.appSaw(), 'sid=own');
});
