// Dedicated endpoints on a real gateway: admission (401, the 403 matrix, 404 for /v1/messages,
// 503 while starting), the backend's answer verbatim, bodies and limits, activity.
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { test } from 'node:test';
import OpenAI from 'openai';
import { FakeClock } from '../../lib/clock.js';
import { createLogger } from '../../lib/log.js';
import { routesFromInstances, type ServiceRoute } from '../../gateway/dedicated/from-instances.js';
import { startSim } from '../../sim/server.js';
import { isMessagesPath, parseDedicatedUrl } from '../../gateway/dedicated/routes.js';
import { hostPort, startGatewayFixture } from './fixture.js';

interface Seen {
  method: string;
  url: string;
  headers: IncomingMessage['headers'];
  body: string;
}

/** A plain HTTP server that records what reached it and answers 418 with its own headers. */
async function startEcho(t: { after(fn: () => unknown): void }): Promise<{ server: Server; url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(parts).toString() });
      if (req.url!.startsWith('/stream')) {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'x-backend': 'echo' });
        let n = 0;
        const tick = setInterval(() => {
          res.write(`data: ${n}\n\n`);
          if (++n === 3) {
            clearInterval(tick);
            res.end();
          }
        }, 5);
        return;
      }
      res.writeHead(418, { 'content-type': 'text/plain', 'x-backend': 'echo', 'set-cookie': ['a=1', 'b=2'] });
      res.end(`teapot ${req.method} ${req.url}`);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  const addr = server.address() as { port: number };
  return { server, url: `http://127.0.0.1:${addr.port}`, seen };
}

test('URL parsing', () => {
  assert.deepEqual(parseDedicatedUrl('/dedicated/i_1/8000/v1/models'), { instanceId: 'i_1', port: 8000, path: '/v1/models' });
  assert.deepEqual(parseDedicatedUrl('/dedicated/i_1/8000'), { instanceId: 'i_1', port: 8000, path: '/' });
  assert.equal(parseDedicatedUrl('/dedicated/i_1'), undefined);
  assert.equal(parseDedicatedUrl('/dedicated//8000/x'), undefined);
  assert.equal(parseDedicatedUrl('/dedicated/i_1/0800/x'), undefined);
  assert.equal(parseDedicatedUrl('/dedicated/i_1/99999/x'), undefined);
  assert.equal(parseDedicatedUrl('/dedicated/i_1/abc/x'), undefined);
  assert.ok(isMessagesPath('/v1/messages'));
  assert.ok(isMessagesPath('/api/v1/messages'));
  assert.ok(isMessagesPath('/v1/messages/count_tokens'));
  assert.ok(!isMessagesPath('/v1/messagesx'));
  assert.ok(!isMessagesPath('/v1/chat/completions'));
});

test('the official openai client through a dedicated endpoint, stream and non-stream', async (t) => {
  const f = await startGatewayFixture(t);
  const sim = await startSim({ model: 'served-model', fast: true, logger: createLogger('silent') });
  t.after(() => sim.close());
  f.addRoute('i_sim', hostPort(sim.url));
  const client = new OpenAI({ apiKey: f.ownerKey, baseURL: `${f.gateway.url}/dedicated/i_sim/8000/v1`, maxRetries: 0 });

  const models = await client.models.list();
  assert.deepEqual(
    models.data.map((m) => m.id),
    ['served-model'],
  );

  const done = await client.chat.completions.create({ model: 'served-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8 });
  assert.equal(done.model, 'served-model');
  assert.ok(done.choices[0]!.message.content);

  const stream = await client.chat.completions.create({ model: 'served-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, stream: true });
  let text = '';
  let chunks = 0;
  for await (const c of stream) {
    chunks++;
    text += c.choices[0]?.delta?.content ?? '';
    assert.equal(c.model, 'served-model');
  }
  assert.ok(chunks > 1);
  assert.ok(text.length > 0);

  // The backend's own errors pass through verbatim (a model name it does not serve).
  await assert.rejects(client.chat.completions.create({ model: 'not-served', messages: [{ role: 'user', content: 'x' }] }), (err: unknown) => {
    assert.ok(err instanceof OpenAI.APIError);
    assert.equal(err.status, 404);
    return true;
  });
  assert.ok(f.activity.includes('i_sim'));
});

test('admission: 401, the 403 matrix, 404 for /v1/messages, 503 while starting', async (t) => {
  const f = await startGatewayFixture(t);
  const echo = await startEcho(t);
  f.addRoute('i_mine', hostPort(echo.url));
  f.addRoute('i_theirs', hostPort(echo.url), { accountId: 8 });
  f.addRoute('i_gradio', hostPort(echo.url), { instanceType: 'gradio', port: 7860 });
  f.addRoute('i_starting', hostPort(echo.url), { status: 'pending' });
  f.addRoute('i_failed', hostPort(echo.url), { status: 'failed' });
  const call = async (path: string, key: string | undefined, init: RequestInit = {}) => {
    const r = await fetch(`${f.gateway.url}${path}`, {
      ...init,
      headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...(init.headers as Record<string, string>) },
    });
    const text = await r.text();
    return { status: r.status, headers: r.headers, json: JSON.parse(text) as { detail: string } };
  };

  const missing = await call('/dedicated/i_mine/8000/v1/models', undefined);
  assert.equal(missing.status, 401);
  assert.equal(missing.json.detail, 'Unauthorized: No API key provided.');
  const invalid = await call('/dedicated/i_mine/8000/v1/models', 'rc-' + 'x'.repeat(43));
  assert.equal(invalid.status, 401);
  assert.equal(invalid.json.detail, 'Invalid bearer token');

  const denied = [
    ["another account's key", '/dedicated/i_mine/8000/v1/models', f.otherKey],
    ['another port', '/dedicated/i_mine/8001/v1/models', f.ownerKey],
    ["another account's instance", '/dedicated/i_theirs/8000/v1/models', f.ownerKey],
    ['an unknown instance', '/dedicated/i_nope/8000/v1/models', f.ownerKey],
    ['an instance that is not a model server', '/dedicated/i_gradio/7860/', f.ownerKey],
    ['a failed instance', '/dedicated/i_failed/8000/v1/models', f.ownerKey],
    ['a malformed port', '/dedicated/i_mine/x/v1/models', f.ownerKey],
    ['no port', '/dedicated/i_mine', f.ownerKey],
  ] as const;
  for (const [what, path, key] of denied) {
    const r = await call(path, key);
    assert.equal(r.status, 403, what);
    assert.deepEqual(r.json, { detail: 'You do not have access to this instance' }, what);
  }

  for (const path of ['/v1/messages', '/api/v1/messages', '/v1/messages/count_tokens']) {
    const r = await call(`/dedicated/i_mine/8000${path}`, f.ownerKey, { method: 'POST', body: '{}', headers: { 'content-type': 'application/json' } });
    assert.equal(r.status, 404, path);
    assert.match(r.json.detail, /not served on a dedicated endpoint/);
  }

  const starting = await call('/dedicated/i_starting/8000/v1/models', f.ownerKey);
  assert.equal(starting.status, 503);
  assert.equal(starting.headers.get('retry-after'), '7');
  assert.match(starting.json.detail, /still starting/);

  assert.equal(echo.seen.length, 0, 'nothing refused reached the instance');
});

test('the backend answer is verbatim; the platform key never reaches the instance', async (t) => {
  const f = await startGatewayFixture(t);
  const echo = await startEcho(t);
  f.addRoute('i_echo', hostPort(echo.url));
  const base = `${f.gateway.url}/dedicated/i_echo/8000`;

  const r = await fetch(`${base}/some/path?x=1&y=%20`, {
    method: 'PUT',
    body: 'payload-bytes',
    headers: { authorization: `Bearer ${f.ownerKey}`, 'x-custom': 'kept', 'content-type': 'text/plain' },
  });
  assert.equal(r.status, 418);
  assert.equal(r.headers.get('x-backend'), 'echo');
  assert.deepEqual(r.headers.getSetCookie(), ['a=1', 'b=2']);
  assert.equal(await r.text(), 'teapot PUT /some/path?x=1&y=%20');
  const seen = echo.seen.at(-1)!;
  assert.equal(seen.method, 'PUT');
  assert.equal(seen.body, 'payload-bytes');
  assert.equal(seen.headers['x-custom'], 'kept');
  assert.equal(seen.headers.authorization, undefined);

  // x-api-key works as the credential too, and is not forwarded either.
  const viaXApiKey = await fetch(`${base}/stream`, { headers: { 'x-api-key': f.ownerKey } });
  assert.equal(viaXApiKey.status, 200);
  assert.equal(viaXApiKey.headers.get('content-type'), 'text/event-stream');
  assert.equal(await viaXApiKey.text(), 'data: 0\n\ndata: 1\n\ndata: 2\n\n');
  assert.equal(echo.seen.at(-1)!.headers['x-api-key'], undefined);

  const head = await fetch(`${base}/x`, { method: 'HEAD', headers: { authorization: `Bearer ${f.ownerKey}` } });
  assert.equal(head.status, 418);
  assert.equal(echo.seen.at(-1)!.method, 'HEAD');
});

test('body limit, unreachable instance', async (t) => {
  const f = await startGatewayFixture(t, { maxBodyBytes: 1024 });
  const echo = await startEcho(t);
  f.addRoute('i_echo', hostPort(echo.url));
  f.addRoute('i_down', '127.0.0.1:1');
  const auth = { authorization: `Bearer ${f.ownerKey}` };

  const big = await fetch(`${f.gateway.url}/dedicated/i_echo/8000/v1/chat/completions`, { method: 'POST', body: 'x'.repeat(2048), headers: auth });
  assert.equal(big.status, 413);
  assert.match(((await big.json()) as { detail: string }).detail, /exceeds 1024 bytes/);
  assert.equal(echo.seen.length, 0);

  const down = await fetch(`${f.gateway.url}/dedicated/i_down/8000/v1/models`, { headers: auth });
  assert.equal(down.status, 502);
  assert.deepEqual(await down.json(), { detail: 'The instance is unreachable' });
});

test('the instance base URL on the gateway: key -> main port; browser -> the proxy', async (t) => {
  const f = await startGatewayFixture(t, { proxyUrl: 'http://proxy.example:8081/' });
  const sim = await startSim({ model: 'served', fast: true, logger: createLogger('silent') });
  t.after(() => sim.close());
  f.addRoute('i_main', hostPort(sim.url));
  f.addRoute('i_nb', hostPort(sim.url), { instanceType: 'jupyter', port: 8888 });
  const client = new OpenAI({ apiKey: f.ownerKey, baseURL: `${f.gateway.url}/instances/i_main/v1`, maxRetries: 0 });
  const done = await client.chat.completions.create({ model: 'served', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 });
  assert.equal(done.model, 'served');

  const keyOnNotebook = await fetch(`${f.gateway.url}/instances/i_nb/tree`, { headers: { authorization: `Bearer ${f.ownerKey}` } });
  assert.equal(keyOnNotebook.status, 403);
  assert.deepEqual(await keyOnNotebook.json(), { detail: 'You do not have access to this instance' });
  const foreign = await fetch(`${f.gateway.url}/instances/i_main/v1/models`, { headers: { authorization: `Bearer ${f.otherKey}` } });
  assert.equal(foreign.status, 403);
  const browser = await fetch(`${f.gateway.url}/instances/i_nb/tree?a=1`, { redirect: 'manual' });
  assert.equal(browser.status, 307);
  assert.equal(browser.headers.get('location'), 'http://proxy.example:8081/instances/i_nb/tree?a=1');
});

test('routesFromInstances adapts the instances service routes', () => {
  const calls: string[] = [];
  const clock = new FakeClock();
  const serviceRoutes = new Map<string, ServiceRoute>([
    ['i_v', { instanceId: 'i_v', accountId: 1, status: 'ready', instanceType: 'vllm', host: '10.0.0.5', port: 41000 }],
    ['i_p', { instanceId: 'i_p', accountId: 1, status: 'pending', instanceType: 'gradio', host: null, port: null, routedPort: 7860 }],
  ]);
  const routes = routesFromInstances({ route: (id) => serviceRoutes.get(id), recordActivity: (id) => calls.push(id) }, 1000, clock);
  const v = routes.get('i_v')!;
  assert.deepEqual([...v.ports], [[8000, '10.0.0.5:41000']]);
  assert.equal(routes.get('i_v'), v, 'converted once per service route object');
  assert.deepEqual([...routes.get('i_p')!.ports], [[7860, '']]);
  assert.equal(routes.get('i_none'), undefined);
  routes.recordActivity('i_v');
  routes.recordActivity('i_v');
  assert.deepEqual(calls, ['i_v'], 'throttled');
  clock.advance(1000);
  routes.recordActivity('i_v');
  assert.deepEqual(calls, ['i_v', 'i_v']);
});
