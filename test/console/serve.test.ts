// The console's static files as the control plane serves them: every page path answers the
// HTML page with a strict Content-Security-Policy; scripts compressed (brotli, gzip) with an
// ETag; unknown assets 404; the API's own 404 stays JSON.
import assert from 'node:assert/strict';
import { gunzipSync, brotliDecompressSync } from 'node:zlib';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { CONSOLE_PAGES, staticDir } from '../../control-plane/console/serve.js';
import { startPlatform } from '../control-plane/platform.js';

test('console pages and assets: HTML for every page, compressed assets, ETag, CSP', async (t) => {
  const p = await startPlatform();
  t.after(() => p.close());
  const get = async (path: string, headers: Record<string, string> = {}) => {
    const r = await request(p.cp.url + path, { headers });
    return { status: r.statusCode, headers: r.headers, body: Buffer.from(await r.body.arrayBuffer()) };
  };
  const html = readFileSync(join(staticDir(), 'index.html'));
  for (const page of CONSOLE_PAGES) {
    const r = await get(page.replace(/:\w+/g, '7'));
    assert.equal(r.status, 200, page);
    assert.equal(r.headers['content-type'], 'text/html; charset=utf-8');
    assert.deepEqual(r.body, html);
    assert.match(String(r.headers['content-security-policy']), /script-src 'self'; connect-src 'self'; frame-ancestors 'none'/);
    assert.equal(r.headers['x-content-type-options'], 'nosniff');
  }
  const js = readFileSync(join(staticDir(), 'app.js'));
  const br = await get('/console/app.js', { 'accept-encoding': 'gzip, deflate, br' });
  assert.equal(br.headers['content-encoding'], 'br');
  assert.deepEqual(brotliDecompressSync(br.body), js);
  const gz = await get('/console/app.js', { 'accept-encoding': 'gzip' });
  assert.equal(gz.headers['content-encoding'], 'gzip');
  assert.deepEqual(gunzipSync(gz.body), js);
  const plain = await get('/console/app.js', { 'accept-encoding': 'identity' });
  assert.equal(plain.headers['content-encoding'], undefined);
  assert.deepEqual(plain.body, js);
  assert.equal(plain.headers['content-type'], 'text/javascript; charset=utf-8');
  const again = await get('/console/app.js', { 'if-none-match': String(plain.headers.etag) });
  assert.equal(again.status, 304);
  assert.equal(again.body.length, 0);

  assert.equal((await get('/console/nope.js')).status, 404);
  assert.equal((await get('/console/../package.json')).status, 404);
  assert.equal((await get('/console/%2e%2e%2fpackage.json')).status, 404);
  // Any other page path a browser asks for: the console's page (its script shows "Not found") with
  // a 404, not the API's JSON.
  const pageMiss = await get('/no/such/page', { accept: 'text/html,application/xhtml+xml,*/*;q=0.8' });
  assert.equal(pageMiss.status, 404);
  assert.equal(pageMiss.headers['content-type'], 'text/html; charset=utf-8');
  assert.deepEqual(pageMiss.body, html);
  // API paths, and clients that do not ask for HTML (curl, an SDK with a wrong base URL): SPEC's JSON.
  for (const [path, accept] of [
    ['/api/nope', 'text/html'],
    ['/no/such/page', '*/*'],
    ['/v1/models', 'application/json'],
  ]) {
    const miss = await get(path!, { accept: accept! });
    assert.equal(miss.status, 404, path);
    assert.deepEqual(JSON.parse(miss.body.toString()), { detail: 'Not Found' }, path);
  }
});
