// The instance proxy against a real control plane (sessions from the sign-up API), a real app
// with HTTP and WebSocket on the instance side, and real browser-like clients.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test, type TestContext } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { createLogger } from '../../lib/log.js';
import { InstanceRouteTable, type InstanceRoute } from '../../lib/instance-routes.js';
import { startInstanceProxyServer } from '../../control-plane/proxy/proxy.js';
import { openInstanceRoutes, ProxyTickets } from '../../control-plane/proxy/handover.js';
import { fetchLoopback, loopbackLookup, statusLoopback } from './origins.js';
import type { RequestInit } from 'undici';
import { startPlatform, type Platform } from '../control-plane/platform.js';
import { waitFor } from '../helpers.js';
import { listenApp } from './fixture.js';

/** The instance's app: HTTP echo and a WebSocket echo on the same port. */
async function startApp(t: TestContext): Promise<{ address: string; wsClosed: number[] }> {
  const wsClosed: number[] = [];
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': 'app_session=xyz; Path=/' });
      res.end(
        JSON.stringify({
          method: req.method,
          url: req.url,
          body: Buffer.concat(parts).toString(),
          cookie: req.headers.cookie ?? null,
          prefix: req.headers['x-forwarded-prefix'] ?? null,
          authorization: req.headers.authorization ?? null,
          csrf: req.headers['x-csrf-token'] ?? null,
        }),
      );
    });
  });
  const wss = new WebSocketServer({ server, handleProtocols: (protocols) => (protocols.has('v1.kernel') ? 'v1.kernel' : false) });
  wss.on('connection', (ws, req) => {
    ws.send(`hello ${req.url} cookie=${req.headers.cookie ?? ''}`);
    ws.on('message', (data, isBinary) => ws.send(isBinary ? data : `echo:${data.toString()}`, { binary: isBinary }));
    ws.on('close', (code) => wsClosed.push(code));
  });
  return { address: await listenApp(t, server, wss), wsClosed };
}

async function signUp(p: Platform, email: string): Promise<{ cookie: string; id: number; csrf: string }> {
  const r = await p.call('POST', '/api/auth/signup', { body: { email, password: 'correct horse battery' } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const setCookie = ([] as string[]).concat(r.headers['set-cookie'] as string | string[]);
  return { cookie: setCookie[0]!.split(';')[0]!, id: r.body.account.id as number, csrf: r.body.csrf_token as string };
}

/** The platform API with the hand-over route, and the proxy on its own port; ids are DNS labels. */
async function startProxyPlatform(t: TestContext, startingRetryAfterSec?: number) {
  const activity: string[] = [];
  const routes = new InstanceRouteTable((id) => activity.push(id), 0);
  let tickets!: ProxyTickets; // made on the platform's store, once it has one
  let base = '';
  const platform = await startPlatform({
    routes: (deps) => openInstanceRoutes({ tickets: (tickets = new ProxyTickets(deps.store)), proxyBase: () => base, instance: (id) => routes.get(id) }),
  });
  t.after(() => platform.close());
  const proxy = await startInstanceProxyServer({ store: platform.cp.store, routes, tickets, logger: createLogger('silent'), startingRetryAfterSec });
  t.after(() => proxy.close());
  base = `http://localhost:${proxy.port}`;
  /** The instance's origin. */
  const origin = (id: string) => `http://${id}.localhost:${proxy.port}`;
  /** Through the hand-over: the API's open route, then the ticket on the instance's origin; the proxy cookie. */
  const open = async (id: string, cookie: string): Promise<string> => {
    const r = await p_open(platform, id, cookie);
    assert.equal(r.status, 302, JSON.stringify(r.body));
    const location = String(r.headers.location);
    assert.ok(location.startsWith(`${origin(id)}/_rc/auth?ticket=`), location);
    const redeemed = await fetchLoopback(location);
    assert.equal(redeemed.status, 302);
    assert.equal(redeemed.headers.get('location'), '/');
    const set = redeemed.headers.get('set-cookie')!;
    assert.match(set, /^rc_proxy=[0-9a-f]{64}\.[A-Za-z0-9_-]+; Path=\/; HttpOnly; SameSite=Lax; Max-Age=\d+$/);
    return set.split(';')[0]!;
  };
  return { platform, proxy, routes, activity, tickets, origin, open };
}

const p_open = (platform: Platform, id: string, cookie?: string, key?: string) => platform.call('GET', `/api/instances/${id}/open`, { cookie, key });

test("the instance proxy: its own origin per instance, the owner's session through the hand-over, keys refused, WebSockets relayed", async (t) => {
  const { platform, proxy, routes, activity, origin, open } = await startProxyPlatform(t, 9);
  const app = await startApp(t);
  const owner = await signUp(platform, 'owner@example.com');
  const stranger = await signUp(platform, 'stranger@example.com');
  const verified = await platform.account('keyholder@example.com', { verified: true });

  const route = (instanceId: string, accountId: number, status: InstanceRoute['status'] = 'ready'): void =>
    routes.set({ instanceId, accountId, status, instanceType: 'jupyter', ports: new Map([[8888, app.address]]) });
  route('inst-app', owner.id);
  route('inst-keyholder', verified.id);
  route('inst-starting', owner.id, 'pending');
  const ownerProxy = await open('inst-app', owner.cookie);
  const get = async (url: string, headers: Record<string, string> = {}, init: RequestInit = {}) => {
    const r = await fetchLoopback(url, { ...init, headers });
    const text = await r.text();
    return { status: r.status, headers: r.headers, json: JSON.parse(text) as Record<string, unknown> };
  };

  // The owner's proxy cookie reaches the app at its origin's root; the platform credentials do not
  // (nor an app cookie without its seal: test/dedicated/app-cookies.test.ts; `__Host-` ones pass).
  const ok = await get(`${origin('inst-app')}/tree/notebooks?x=1`, {
    cookie: `__Host-app=1; ${ownerProxy}; ${owner.cookie}; tossed=1`,
    'x-csrf-token': 'secret-csrf',
  });
  assert.equal(ok.status, 200);
  assert.deepEqual(ok.json, {
    method: 'GET',
    url: '/tree/notebooks?x=1',
    body: '',
    cookie: '__Host-app=1',
    prefix: null,
    authorization: null,
    csrf: null,
  });
  assert.equal(ok.headers.getSetCookie()[0], 'app_session=xyz; Path=/');
  const posted = await get(
    `${origin('inst-app')}/api/contents`,
    { cookie: ownerProxy, authorization: 'token jupyter-own-token', 'content-type': 'application/json' },
    { method: 'POST', body: '{"type":"notebook"}' },
  );
  assert.equal(posted.status, 200);
  assert.equal(posted.json.body, '{"type":"notebook"}');
  assert.equal(posted.json.authorization, 'token jupyter-own-token', "the app's own auth scheme passes through");
  assert.ok(activity.includes('inst-app'));

  // The console's session cookie is not what opens it (browsers do not send it to this host anyway).
  assert.equal((await get(`${origin('inst-app')}/`, { cookie: owner.cookie })).status, 401);
  // Keys are refused with 403, even the owner's own valid key, and even with the proxy cookie beside it.
  const keyed = await get(`${origin('inst-keyholder')}/`, { authorization: `Bearer ${verified.api_token}` });
  assert.equal(keyed.status, 403);
  assert.deepEqual(keyed.json, { detail: 'You do not have access to this instance' });
  assert.equal((await get(`${origin('inst-app')}/`, { authorization: `Bearer ${verified.api_token}`, cookie: ownerProxy })).status, 403);
  assert.equal((await get(`${origin('inst-keyholder')}/`, { 'x-api-key': verified.api_token! })).status, 403);

  // Other refusals.
  assert.equal((await get(`${origin('inst-app')}/`)).status, 401);
  assert.equal((await get(`${origin('inst-app')}/`, { cookie: 'rc_proxy=forged' })).status, 401);
  assert.equal((await get(`${origin('inst-app')}/`, { cookie: `${ownerProxy}; rc_proxy=junk` })).status, 401, 'two proxy cookies: none');
  assert.equal((await get(`${origin('inst-app')}/`, { cookie: `rc_proxy=junk; ${ownerProxy}` })).status, 401);
  // The owner's cookie made for another instance's origin does not open this one.
  route('inst-other', owner.id);
  assert.equal((await get(`${origin('inst-other')}/`, { cookie: ownerProxy })).status, 401);
  // Another account's session: refused at the API and at the proxy.
  const foreign = await p_open(platform, 'inst-app', stranger.cookie);
  assert.equal(foreign.status, 403);
  assert.deepEqual(foreign.body, { detail: 'You do not have access to this instance' });
  route('inst-stranger', stranger.id);
  const strangerProxy = await open('inst-stranger', stranger.cookie);
  routes.set({ instanceId: 'inst-stranger', accountId: owner.id, status: 'ready', instanceType: 'jupyter', ports: new Map([[8888, app.address]]) });
  assert.equal((await get(`${origin('inst-stranger')}/`, { cookie: strangerProxy })).status, 403, "a session of another account than the instance's");
  assert.equal((await get(`${origin('inst-nope')}/`, { cookie: ownerProxy })).status, 401);
  const starting = await get(`${origin('inst-starting')}/`, { cookie: await open('inst-starting', owner.cookie) });
  assert.equal(starting.status, 503);
  assert.equal(starting.headers.get('retry-after'), '9');
  // The old path form on the proxy's port redirects to the instance's origin.
  const old = await fetchLoopback(`${proxy.url}/instances/inst-app/tree?a=b`);
  assert.equal(old.status, 308);
  assert.equal(old.headers.get('location'), `${origin('inst-app')}/tree?a=b`);
  assert.equal((await get(`${proxy.url}/elsewhere`, { cookie: ownerProxy })).status, 404);
  // A request another site (or a sibling instance's app) starts is refused unless it is a navigation.
  assert.equal(
    await statusLoopback(`${origin('inst-app')}/api/contents`, { cookie: ownerProxy, 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'cors' }, 'POST'),
    403,
  );
  assert.equal(
    await statusLoopback(`${origin('inst-app')}/api/contents`, { cookie: ownerProxy, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' }, 'POST'),
    403,
  );
  assert.equal(await statusLoopback(`${origin('inst-app')}/`, { cookie: ownerProxy, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'navigate' }), 200);
  assert.equal(await statusLoopback(`${origin('inst-app')}/`, { cookie: ownerProxy, 'sec-fetch-site': 'same-origin', 'sec-fetch-mode': 'cors' }, 'POST'), 200);

  // Signing out of the console ends proxy access at once.
  const other = await platform.call('POST', '/api/auth/login', { body: { email: 'owner@example.com', password: 'correct horse battery' } });
  const second = { cookie: String(([] as string[]).concat(other.headers['set-cookie'] as string[])[0]).split(';')[0]!, csrf: other.body.csrf_token as string };
  const secondProxy = await open('inst-app', second.cookie);
  assert.equal((await get(`${origin('inst-app')}/`, { cookie: secondProxy })).status, 200);
  assert.equal((await platform.call('POST', '/api/auth/logout', { cookie: second.cookie, csrf: second.csrf })).status, 200);
  assert.equal((await get(`${origin('inst-app')}/`, { cookie: secondProxy })).status, 401);

  // A WebSocket through the proxy (a notebook kernel channel), with its subprotocol.
  const wsUrl = `${origin('inst-app').replace('http', 'ws')}/api/kernels/k1/channels?session_id=s`;
  const ws = new WebSocket(wsUrl, ['v1.kernel'], { headers: { cookie: `__Host-app=1; tossed=1; ${ownerProxy}` }, lookup: loopbackLookup });
  const received: (string | Buffer)[] = [];
  ws.on('message', (data, isBinary) => received.push(isBinary ? (data as Buffer) : data.toString()));
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  assert.equal(ws.protocol, 'v1.kernel');
  ws.send('ping-1');
  ws.send(Buffer.from([1, 2, 3]), { binary: true });
  await waitFor(() => received.length >= 3);
  assert.equal(received[0], 'hello /api/kernels/k1/channels?session_id=s cookie=__Host-app=1');
  assert.equal(received[1], 'echo:ping-1');
  assert.deepEqual([...(received[2] as Buffer)], [1, 2, 3]);
  ws.close(1000);
  await waitFor(() => app.wsClosed.length === 1);
  assert.equal(app.wsClosed[0], 1000);

  // WebSocket refusals happen before the upgrade, with the same statuses.
  const refused = async (headers: Record<string, string>, url = wsUrl) =>
    new Promise<number>((resolve) => {
      const w = new WebSocket(url, { headers, lookup: loopbackLookup });
      w.on('unexpected-response', (_req, res) => {
        resolve(res.statusCode!);
        w.terminate();
      });
      w.on('open', () => {
        w.close();
        resolve(101);
      });
      w.on('error', () => {});
    });
  assert.equal(await refused({ authorization: `Bearer ${verified.api_token}` }), 403);
  assert.equal(await refused({ cookie: strangerProxy }, `${origin('inst-stranger').replace('http', 'ws')}/ws`), 403);
  assert.equal(await refused({ cookie: `${ownerProxy}; rc_proxy=junk` }), 401);
  assert.equal(await refused({ cookie: ownerProxy, origin: 'http://evil.localhost', 'sec-fetch-site': 'same-site', 'sec-fetch-mode': 'websocket' }), 403);
  assert.equal(await refused({}), 401);
});

test('the hand-over: a ticket once, for its own instance, from a browser session only', async (t) => {
  const { platform, routes, tickets, origin, open } = await startProxyPlatform(t);
  const app = await startApp(t);
  const owner = await signUp(platform, 'owner@example.com');
  const stranger = await signUp(platform, 'stranger@example.com');
  const keyholder = await platform.account('keyholder@example.com', { verified: true });
  const set = (instanceId: string, accountId: number) =>
    routes.set({ instanceId, accountId, status: 'ready', instanceType: 'gradio', ports: new Map([[7860, app.address]]) });
  set('inst-a', owner.id);
  set('inst-k', keyholder.id);

  // The status object's base_url leads here; a bearer key gets 403 (SPEC), as another account's session does.
  const keyed = await p_open(platform, 'inst-k', undefined, keyholder.api_token!);
  assert.equal(keyed.status, 403);
  assert.deepEqual(keyed.body, { detail: 'You do not have access to this instance' });
  assert.equal((await p_open(platform, 'inst-a', stranger.cookie)).status, 403);
  assert.equal((await p_open(platform, 'inst-a')).status, 401);
  assert.equal((await p_open(platform, 'inst-missing', owner.cookie)).status, 404);
  // Two session cookies at the API: no session, no ticket.
  assert.equal((await p_open(platform, 'inst-a', `rc_session=junk; ${owner.cookie}`)).status, 401);

  // A ticket works once.
  const r = await p_open(platform, 'inst-a', owner.cookie);
  assert.equal(r.status, 302);
  assert.equal(r.headers['referrer-policy'], 'no-referrer');
  const location = String(r.headers.location);
  assert.equal((await fetchLoopback(location)).status, 302);
  const replayed = await fetchLoopback(location);
  assert.equal(replayed.status, 401);
  assert.equal(replayed.headers.get('set-cookie'), null);
  // A ticket is for its own instance's origin only.
  const again = String((await p_open(platform, 'inst-a', owner.cookie)).headers.location);
  assert.equal((await fetchLoopback(again.replace(origin('inst-a'), origin('inst-k')))).status, 401);
  assert.equal((await fetchLoopback(`${origin('inst-a')}/_rc/auth?ticket=forged`)).status, 401);
  assert.equal((await fetchLoopback(`${origin('inst-a')}/_rc/auth`)).status, 401);
  // A key at the redemption: 403; a ticket of a signed-out session: refused.
  const t2 = String((await p_open(platform, 'inst-a', owner.cookie)).headers.location);
  assert.equal((await fetchLoopback(t2, { headers: { authorization: `Bearer ${keyholder.api_token}` } })).status, 403);
  const minted = await tickets.mint('inst-a', '0'.repeat(64));
  assert.equal((await fetchLoopback(`${origin('inst-a')}/_rc/auth?ticket=${minted}`)).status, 401);
  // The proxy cookie opens the app.
  const cookie = await open('inst-a', owner.cookie);
  assert.equal((await fetchLoopback(`${origin('inst-a')}/`, { headers: { cookie } })).status, 200);
});
