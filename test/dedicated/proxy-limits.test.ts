// Issue 44 on the instance proxy (control-plane/proxy/limits.ts): requests in flight, WebSockets
// open included, are bounded per instance, per account and per client address
// (RC_PROXY_INFLIGHT_*), and bytes of request bodies still arriving too (RC_PROXY_UPLOAD_BYTES_*).
// Past a bound: 429 `{detail}` naming it with Retry-After, or a WebSocket closed with 1013 and the
// reason; the other tenant is served; every place and byte is given back however a request ends.
// Real parts: the platform API (sessions, the hand-over), the proxy on its own port, a real app.
import assert from 'node:assert/strict';
import { createServer, type ServerResponse } from 'node:http';
import { test, type TestContext } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { createLogger } from '../../lib/log.js';
import { openInstanceRoutes, ProxyTickets } from '../../control-plane/proxy/handover.js';
import type { ProxyLimitSettings } from '../../control-plane/proxy/limits.js';
import { startInstanceProxyServer } from '../../control-plane/proxy/proxy.js';
import { startPlatform, type Platform } from '../control-plane/platform.js';
import { openRequest, type OpenRequest } from '../held-streams.js';
import { waitFor } from '../helpers.js';
import { listenApp } from './fixture.js';
import { answered, detailOf, type SlowUpload, slowUpload, statusOf } from './slow-upload.js';
import { fetchLoopback } from './origins.js';

const MiB = 1024 * 1024;

/** The app: a POST whose body says "hold" is answered with a first chunk and held open; others answered at once; WebSockets echo. */
async function startApp(t: TestContext): Promise<{ address: string; held: ServerResponse[] }> {
  const held: ServerResponse[] = [];
  const server = createServer((req, res) => {
    let size = 0;
    let hold = false;
    req.on('data', (c: Buffer) => {
      size += c.length;
      hold ||= c.includes('hold');
    });
    req.on('end', () => {
      const json = JSON.stringify({ size });
      if (!hold) return void res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(json.length) }).end(json);
      res.writeHead(200, { 'content-type': 'text/plain' }).write('first');
      held.push(res);
    });
  });
  const wss = new WebSocketServer({ server });
  wss.on('connection', (ws) => ws.on('message', (d) => ws.send(`echo:${d.toString()}`)));
  return { address: await listenApp(t, server, wss), held };
}

async function signUp(p: Platform, email: string): Promise<{ cookie: string; id: number }> {
  const r = await p.call('POST', '/api/auth/signup', { body: { email, password: 'correct horse battery' } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return { cookie: String(([] as string[]).concat(r.headers['set-cookie'] as string[])[0]).split(';')[0]!, id: r.body.account.id as number };
}

/** The platform API, the proxy with `limits`, the app; the owner's instances i-a and i-b, the other account's i-o, each with its proxy cookie. */
async function setup(t: TestContext, limits: Partial<ProxyLimitSettings>, trustProxy?: boolean) {
  const routes = new InstanceRouteTable(() => {}, 0);
  let tickets!: ProxyTickets; // made on the platform's store, once it has one
  let base = '';
  const platform = await startPlatform({
    routes: (deps) => openInstanceRoutes({ tickets: (tickets = new ProxyTickets(deps.store)), proxyBase: () => base, instance: (id) => routes.get(id) }),
  });
  t.after(() => platform.close());
  const server = await startInstanceProxyServer({ store: platform.cp.store, routes, tickets, logger: createLogger('silent'), limits, trustProxy });
  t.after(() => server.close());
  base = `http://localhost:${server.port}`;
  const app = await startApp(t);
  const owner = await signUp(platform, 'owner@example.com');
  const other = await signUp(platform, 'other@example.com');
  const cookies = new Map<string, string>();
  for (const [id, account] of [
    ['i-a', owner],
    ['i-b', owner],
    ['i-o', other],
  ] as const) {
    routes.set({ instanceId: id, accountId: account.id, status: 'ready', instanceType: 'jupyter', ports: new Map([[8888, app.address]]) });
    const opened = await platform.call('GET', `/api/instances/${id}/open`, { cookie: account.cookie });
    const redeemed = await fetchLoopback(String(opened.headers.location));
    cookies.set(id, redeemed.headers.get('set-cookie')!.split(';')[0]!);
  }
  const host = (id: string) => `${id}.localhost:${server.port}`;
  /** A POST to instance `id` that the app holds open once it answered its head. */
  const hold = (id: string, localAddress?: string, forwardedFor?: string): Promise<OpenRequest> =>
    openRequest(
      `http://127.0.0.1:${server.port}/run`,
      { hold: true },
      { host: host(id), cookie: cookies.get(id)!, ...(forwardedFor ? { 'x-forwarded-for': forwardedFor } : {}) },
      localAddress,
    );
  return { proxy: server.proxy, port: server.port, app, cookies, host, hold };
}

function refusedWith(r: OpenRequest, detail: string): void {
  assert.equal(r.status, 429, r.text);
  assert.equal(r.headers['retry-after'], '5');
  assert.deepEqual(JSON.parse(r.text), { detail });
}

test('proxied requests in flight per instance and per account: past the bound 429 naming it; the other account served; every end frees its place', async (t) => {
  const s = await setup(t, { inflightPerInstance: 2, inflightPerAccount: 3 });
  const inflight = s.proxy.limits.inflight;
  const held = [await s.hold('i-a'), await s.hold('i-a')];
  t.after(() => {
    for (const h of held) h.abort();
  });
  for (const h of held) assert.equal(h.status, 200);
  refusedWith(await s.hold('i-a'), 'Too many requests in flight for this instance: at most 2 (RC_PROXY_INFLIGHT_PER_INSTANCE); wait for one to end');
  assert.equal(s.app.held.length, 2, 'the refused one never reached the app');
  held.push(await s.hold('i-b'));
  assert.equal(held[2]!.status, 200);
  refusedWith(await s.hold('i-b'), 'Too many requests in flight for this account: at most 3 (RC_PROXY_INFLIGHT_PER_ACCOUNT); wait for one to end');
  // The other account is not touched by the owner's bounds.
  held.push(await s.hold('i-o'), await s.hold('i-o'));
  assert.deepEqual(
    held.map((h) => h.status),
    [200, 200, 200, 200, 200],
  );
  assert.deepEqual(inflight.held(), { accounts: 2, addresses: 1, instances: 3, total: 5 });
  // The app ends one, one client goes away: their places are free, and the instance takes another.
  s.app.held.shift()!.end('done');
  held[1]!.abort();
  await waitFor(() => inflight.held().total === 3);
  const again = await s.hold('i-a');
  held.push(again);
  assert.equal(again.status, 200);
  for (const h of held) h.abort();
  await waitFor(() => inflight.held().total === 0);
  assert.deepEqual(inflight.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
});

test('proxied requests in flight per client address: past the bound 429; another address of the same account served', async (t) => {
  const s = await setup(t, { inflightPerAddress: 2 });
  const held = [await s.hold('i-a'), await s.hold('i-o')];
  t.after(() => {
    for (const h of held) h.abort();
  });
  // X-Forwarded-For is anyone's to write: without trustProxy it names no other client.
  refusedWith(
    await s.hold('i-b', undefined, '198.51.100.9'),
    'Too many requests in flight from this address: at most 2 (RC_PROXY_INFLIGHT_PER_ADDRESS); wait for one to end',
  );
  const elsewhere = await s.hold('i-b', '127.0.0.2');
  held.push(elsewhere);
  assert.equal(elsewhere.status, 200);
  for (const h of held) h.abort();
  await waitFor(() => s.proxy.limits.inflight.held().total === 0);
});

test('behind a reverse proxy (trustProxy): the per-address bound is per X-Forwarded-For client; without it the header is ignored', async (t) => {
  const behind = await setup(t, { inflightPerAddress: 1 }, true);
  const held = [await behind.hold('i-a', undefined, 'spoofed, 203.0.113.1'), await behind.hold('i-o', undefined, '203.0.113.2')];
  t.after(() => {
    for (const h of held) h.abort();
  });
  assert.deepEqual(
    held.map((h) => h.status),
    [200, 200],
    'two clients through one reverse proxy',
  );
  refusedWith(
    await behind.hold('i-b', undefined, '203.0.113.1'),
    'Too many requests in flight from this address: at most 1 (RC_PROXY_INFLIGHT_PER_ADDRESS); wait for one to end',
  );
  for (const h of held) h.abort();
  await waitFor(() => behind.proxy.limits.inflight.held().total === 0);
});

/** Opens a WebSocket to instance `id` through the proxy: its messages, or its close code and reason. */
async function openSocket(s: Awaited<ReturnType<typeof setup>>, id: string): Promise<{ ws: WebSocket; opened: boolean; close: Promise<[number, string]> }> {
  const ws = new WebSocket(`ws://127.0.0.1:${s.port}/api/kernels/k/channels`, ['v1.kernel'], { headers: { host: s.host(id), cookie: s.cookies.get(id)! } });
  const close = new Promise<[number, string]>((r) => ws.once('close', (code, reason) => r([code, reason.toString()])));
  const opened = await new Promise<boolean>((resolve) => {
    ws.once('open', () => resolve(true));
    ws.once('error', () => resolve(false));
  });
  return { ws, opened, close };
}

test('a WebSocket holds a place until it closes; past the bound it opens and closes with 1013 and the reason; the other account served', async (t) => {
  const s = await setup(t, { inflightPerInstance: 1 });
  const inflight = s.proxy.limits.inflight;
  const first = await openSocket(s, 'i-a');
  t.after(() => first.ws.terminate());
  assert.equal(first.opened, true);
  first.ws.send('hi');
  assert.equal(String(await new Promise((r) => first.ws.once('message', r))), 'echo:hi');
  assert.equal(inflight.held().total, 1);
  const reason = 'Too many requests in flight for this instance: at most 1 (RC_PROXY_INFLIGHT_PER_INSTANCE); wait for one to end';
  // A second socket, and an HTTP request, to the same instance: refused, each saying why.
  const second = await openSocket(s, 'i-a');
  assert.equal(second.opened, true, 'opened to be told why');
  assert.deepEqual(await second.close, [1013, reason]);
  refusedWith(await s.hold('i-a'), reason);
  // The other account's socket works meanwhile.
  const foreign = await openSocket(s, 'i-o');
  t.after(() => foreign.ws.terminate());
  assert.equal(foreign.opened, true);
  foreign.ws.send('x');
  assert.equal(String(await new Promise((r) => foreign.ws.once('message', r))), 'echo:x');
  // Closing the first frees its place.
  first.ws.close();
  await first.close;
  await waitFor(() => inflight.held().total === 1);
  const later = await s.hold('i-a');
  assert.equal(later.status, 200);
  later.abort();
  foreign.ws.close();
  await waitFor(() => inflight.held().total === 0);
});

/** POSTs `size` bytes to instance `id` (with `cookie`), all but the last `withhold`. */
function startUpload(port: number, host: string, cookie: string, size: number, withhold: number): SlowUpload {
  const body = Buffer.alloc(size, 'x');
  return slowUpload('127.0.0.1', port, `POST /upload HTTP/1.1\r\nHost: ${host}\r\nCookie: ${cookie}\r\nContent-Length: ${body.length}\r\n\r\n`, body, withhold);
}

test("upload bytes per instance: slow bodies past the bound 429 and closed; the other account's upload served; bodies without a session never count against an instance", async (t) => {
  const s = await setup(t, { uploadBytesPerInstance: 2 * MiB });
  const uploads = s.proxy.limits.uploads;
  // 1 MiB bodies withholding their last byte: two fit the instance's 2 MiB.
  const big = Array.from({ length: 4 }, () => startUpload(s.port, s.host('i-a'), s.cookies.get('i-a')!, MiB, 1));
  t.after(() => {
    for (const u of big) u.socket.destroy();
  });
  await waitFor(() => big.filter(answered).length >= 2, 30_000);
  const refused = big.filter(answered);
  assert.equal(refused.length, 2);
  for (const u of refused) {
    assert.equal(statusOf(u), 429);
    assert.match(u.reply, /\r\nretry-after: 5\r\n/i);
    assert.equal(detailOf(u), 'Too many request body bytes in flight for this instance: at most 2097152 (RC_PROXY_UPLOAD_BYTES_PER_INSTANCE)');
  }
  await waitFor(() => refused.every((u) => u.closed), 10_000); // the rest of their bodies is never read
  await waitFor(() => uploads.held().bytes === 2 * (MiB - 1));
  assert.deepEqual(uploads.held(), { addresses: 1, accounts: 1, instances: 1, uploads: 2, bytes: 2 * (MiB - 1) });
  // Someone without a session sends to the same instance: 401, and the instance's count is untouched.
  const stranger = startUpload(s.port, s.host('i-a'), 'rc_proxy=forged', MiB, 1);
  t.after(() => stranger.socket.destroy());
  await waitFor(() => answered(stranger), 10_000);
  assert.equal(statusOf(stranger), 401);
  await waitFor(() => stranger.closed, 10_000);
  assert.equal(uploads.held().instances, 1);
  // The other account's upload completes meanwhile.
  const foreign = startUpload(s.port, s.host('i-o'), s.cookies.get('i-o')!, MiB, 1);
  t.after(() => foreign.socket.destroy());
  await waitFor(() => uploads.held().instances === 2);
  foreign.socket.write(foreign.rest);
  await waitFor(() => answered(foreign), 30_000);
  assert.equal(statusOf(foreign), 200);
  // The held ones complete when their last byte comes, and the app answers them.
  const held = big.filter((u) => !answered(u));
  for (const u of held) u.socket.write(u.rest);
  await waitFor(() => held.every(answered), 30_000);
  for (const u of held) assert.equal(statusOf(u), 200);
  assert.match(held[0]!.reply, /"size":1048576/);
  await waitFor(() => uploads.held().uploads === 0 && s.proxy.limits.inflight.held().total === 0);
  assert.deepEqual(uploads.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
});

test('upload bytes per client address count from the first byte, before the session is known', async (t) => {
  const s = await setup(t, { uploadBytesPerAddress: MiB + MiB / 2 });
  const first = startUpload(s.port, s.host('i-a'), s.cookies.get('i-a')!, MiB, 1);
  t.after(() => first.socket.destroy());
  await waitFor(() => s.proxy.limits.uploads.held().bytes === MiB - 1);
  const second = startUpload(s.port, s.host('i-o'), s.cookies.get('i-o')!, MiB, 1);
  t.after(() => second.socket.destroy());
  await waitFor(() => answered(second), 30_000);
  assert.equal(statusOf(second), 429);
  assert.equal(detailOf(second), `Too many request body bytes in flight from this address: at most ${MiB + MiB / 2} (RC_PROXY_UPLOAD_BYTES_PER_ADDRESS)`);
  first.socket.write(first.rest);
  await waitFor(() => answered(first), 30_000);
  assert.equal(statusOf(first), 200);
  await waitFor(() => s.proxy.limits.uploads.held().uploads === 0);
});
