// Issue 27, items 3 and 6, in a real browser: tunnel A's page registers a service worker for
// scope `/` (its script answers `Service-Worker-Allowed: /`). When tunnels shared one origin,
// A's worker then served tunnel B's URL in that visitor's browser, and A's script read B's
// answers. Each tunnel is now an origin of its own, and the header never reaches the browser.
// Chromium (playwright-core, /usr/bin/chromium); RC_REQUIRE_BROWSER=1 fails instead of skipping.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test, type TestContext } from 'node:test';
import { browserAvailable, launchBrowser } from '../console/browser.js';
import { listenLocal } from '../helpers.js';
import { connectedTunnel, startGatewayFixture, type GatewayFixture } from './fixture.js';

const PAGE_A = `<!doctype html><title>A</title><body>A's page<script>
  window.swaHeader = fetch('sw.js', { cache: 'no-store' }).then((r) => r.headers.get('service-worker-allowed'));
  window.registered = navigator.serviceWorker
    .register('sw.js', { scope: '/' })
    .then(() => navigator.serviceWorker.ready)
    .then((r) => 'active, scope ' + r.scope, (e) => 'refused: ' + e.message);
</script>`;

/** A's worker answers every request of its origin itself. */
const WORKER_A = `
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (e) => e.waitUntil(self.clients.claim()));
self.addEventListener('fetch', (e) => {
  if (new URL(e.request.url).origin === self.location.origin && !e.request.url.endsWith('sw.js')) {
    e.respondWith(new Response('<title>A worker</title>SERVED-BY-A-WORKER', { headers: { 'content-type': 'text/html' } }));
  }
});`;

async function startService(t: TestContext, name: 'A' | 'B'): Promise<number> {
  const server = createServer((req, res) => {
    if (name === 'A' && req.url === '/sw.js') {
      res.writeHead(200, { 'content-type': 'text/javascript', 'service-worker-allowed': '/', 'cache-control': 'no-store' });
      res.end(WORKER_A);
      return;
    }
    res.writeHead(200, { 'content-type': 'text/html', 'cache-control': 'no-store' });
    res.end(name === 'A' ? PAGE_A : `<!doctype html><title>B</title><body>B-OWN-ANSWER ${req.url}`);
  });
  return listenLocal(t, server);
}

async function tunnel(t: TestContext, f: GatewayFixture, instanceId: string, port: number): Promise<string> {
  f.addRoute(instanceId, '127.0.0.1:1', { instanceType: 'gradio' });
  return connectedTunnel(t, f, instanceId, port);
}

test("tunnel A's service worker and scripts cannot reach tunnel B (an origin per tunnel, no Service-Worker-Allowed)", async (t) => {
  if (!browserAvailable(t)) return;
  const f = await startGatewayFixture(t);
  const urlA = await tunnel(t, f, 'i_a', await startService(t, 'A'));
  const urlB = await tunnel(t, f, 'i_b', await startService(t, 'B'));
  assert.notEqual(new URL(urlA).origin, new URL(urlB).origin, 'each tunnel is its own origin');

  const context = await launchBrowser(t);
  const page = await context.newPage();
  await page.goto(urlA);
  // (Page scripts as strings: the tests compile without the DOM's types.)
  assert.equal(await page.evaluate('window.swaHeader'), null, 'Service-Worker-Allowed reached the browser');
  const registered = String(await page.evaluate('window.registered'));
  assert.match(registered, /^active, scope /, registered);

  // A's script fetches B's URL: another origin without CORS, so it cannot read the answer.
  const read = String(await page.evaluate(`fetch(${JSON.stringify(urlB)}).then((r) => r.text().then((text) => 'read: ' + text), (e) => 'blocked: ' + e.name)`));
  assert.match(read, /^blocked: TypeError/, read);

  // The visitor opens B's URL afterwards: B's own service answers, no worker of A's.
  await page.goto(`${urlB}page`);
  const body = await page.textContent('body');
  assert.match(body ?? '', /B-OWN-ANSWER \/page/, body ?? '');
  assert.equal(await page.evaluate('navigator.serviceWorker.controller === null'), true, "B's page is controlled by a worker");
});
