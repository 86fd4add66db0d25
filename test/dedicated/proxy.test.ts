// The instance proxy against a real control plane (sessions from the sign-up API), a real app
// with HTTP and WebSocket on the instance side, and real browser-like clients.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test, type TestContext } from 'node:test';
import WebSocket, { WebSocketServer } from 'ws';
import { createLogger } from '../../lib/log.js';
import { InstanceRouteTable, type InstanceRoute } from '../../gateway/dedicated/instance-routes.js';
import { startInstanceProxyServer } from '../../control-plane/proxy/proxy.js';
import { startPlatform, type Platform } from '../control-plane/platform.js';
import { waitFor } from '../helpers.js';

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
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return { address: `127.0.0.1:${(server.address() as { port: number }).port}`, wsClosed };
}

async function signUp(p: Platform, email: string): Promise<{ cookie: string; id: number }> {
  const r = await p.call('POST', '/api/auth/signup', { body: { email, password: 'correct horse battery' } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const setCookie = ([] as string[]).concat(r.headers['set-cookie'] as string | string[]);
  return { cookie: setCookie[0]!.split(';')[0]!, id: r.body.account.id as number };
}

test('the instance proxy: sessions of the owner only, keys refused, WebSockets relayed', async (t) => {
  const platform = await startPlatform();
  t.after(() => platform.close());
  const app = await startApp(t);
  const owner = await signUp(platform, 'owner@example.com');
  const stranger = await signUp(platform, 'stranger@example.com');
  const verified = await platform.account('keyholder@example.com', { verified: true });

  const activity: string[] = [];
  const routes = new InstanceRouteTable((id) => activity.push(id), 0);
  const route = (instanceId: string, accountId: number, status: InstanceRoute['status'] = 'ready'): void =>
    routes.set({ instanceId, accountId, status, instanceType: 'jupyter', ports: new Map([[8888, app.address]]) });
  route('i_app', owner.id);
  route('i_keyholder', verified.id);
  route('i_starting', owner.id, 'pending');
  const proxy = await startInstanceProxyServer({ store: platform.cp.store, routes, logger: createLogger('silent'), startingRetryAfterSec: 9 });
  t.after(() => proxy.close());
  const get = async (path: string, headers: Record<string, string> = {}, init: RequestInit = {}) => {
    const r = await fetch(`${proxy.url}${path}`, { ...init, headers, redirect: 'manual' });
    const text = await r.text();
    return { status: r.status, headers: r.headers, json: JSON.parse(text) as Record<string, unknown> };
  };

  // The owner's session reaches the app; the platform credentials do not.
  const ok = await get('/instances/i_app/tree/notebooks?x=1', { cookie: `app=1; ${owner.cookie}`, 'x-csrf-token': 'secret-csrf' });
  assert.equal(ok.status, 200);
  assert.deepEqual(ok.json, {
    method: 'GET',
    url: '/tree/notebooks?x=1',
    body: '',
    cookie: 'app=1',
    prefix: '/instances/i_app',
    authorization: null,
    csrf: null,
  });
  assert.equal(ok.headers.get('set-cookie'), 'app_session=xyz; Path=/');
  const posted = await get(
    '/instances/i_app/api/contents',
    { cookie: owner.cookie, authorization: 'token jupyter-own-token', 'content-type': 'application/json' },
    { method: 'POST', body: '{"type":"notebook"}' },
  );
  assert.equal(posted.status, 200);
  assert.equal(posted.json.body, '{"type":"notebook"}');
  assert.equal(posted.json.authorization, 'token jupyter-own-token', "the app's own auth scheme passes through");
  assert.ok(activity.includes('i_app'));

  // Keys are refused with 403, even the owner's own valid key, and even with a session beside it.
  const keyed = await get('/instances/i_keyholder/', { authorization: `Bearer ${verified.api_token}` });
  assert.equal(keyed.status, 403);
  assert.deepEqual(keyed.json, { detail: 'You do not have access to this instance' });
  assert.equal((await get('/instances/i_app/', { authorization: `Bearer ${verified.api_token}`, cookie: owner.cookie })).status, 403);
  assert.equal((await get('/instances/i_keyholder/', { 'x-api-key': verified.api_token! })).status, 403);

  // Other refusals.
  assert.equal((await get('/instances/i_app/')).status, 401);
  assert.equal((await get('/instances/i_app/', { cookie: 'rc_session=forged' })).status, 401);
  const foreign = await get('/instances/i_app/', { cookie: stranger.cookie });
  assert.equal(foreign.status, 403);
  assert.equal(foreign.json.detail, 'You do not have access to this instance');
  assert.equal((await get('/instances/i_nope/', { cookie: owner.cookie })).status, 404);
  const starting = await get('/instances/i_starting/', { cookie: owner.cookie });
  assert.equal(starting.status, 503);
  assert.equal(starting.headers.get('retry-after'), '9');
  const bare = await get('/instances/i_app?a=b', { cookie: owner.cookie });
  assert.equal(bare.status, 308);
  assert.equal(bare.headers.get('location'), '/instances/i_app/?a=b');
  assert.equal((await get('/elsewhere', { cookie: owner.cookie })).status, 404);

  // A WebSocket through the proxy (a notebook kernel channel), with its subprotocol.
  const wsUrl = `${proxy.url.replace('http', 'ws')}/instances/i_app/api/kernels/k1/channels?session_id=s`;
  const ws = new WebSocket(wsUrl, ['v1.kernel'], { headers: { cookie: `app=1; ${owner.cookie}` } });
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
  assert.equal(received[0], 'hello /api/kernels/k1/channels?session_id=s cookie=app=1');
  assert.equal(received[1], 'echo:ping-1');
  assert.deepEqual([...(received[2] as Buffer)], [1, 2, 3]);
  ws.close(1000);
  await waitFor(() => app.wsClosed.length === 1);
  assert.equal(app.wsClosed[0], 1000);

  // WebSocket refusals happen before the upgrade, with the same statuses.
  const refused = async (headers: Record<string, string>) =>
    new Promise<number>((resolve) => {
      const w = new WebSocket(wsUrl, { headers });
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
  assert.equal(await refused({ cookie: stranger.cookie }), 403);
  assert.equal(await refused({}), 401);
});
