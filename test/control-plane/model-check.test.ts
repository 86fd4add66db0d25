// The operator's check of a shared model's upstreams (issue 42), against real servers: the sim as
// vLLM, SGLang and llama.cpp (the served name listed, its context read, a one-token completion),
// a wrong served name, an unreachable upstream, a server that is not a model server, a model
// server whose completions fail. model.add refuses what fails unless `unchecked` (audited as
// such); model.check is not audited. And Model APIs' context column: the catalog's figure, else
// the backend's, else unknown.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test, type TestContext } from 'node:test';
import { request } from 'undici';
import { adminToken } from '../../control-plane/secrets.js';
import { createLogger } from '../../lib/log.js';
import { startSim, type SimServer } from '../../sim/server.js';
import { listenLocal } from '../helpers.js';
import { startPlatform, type Platform } from './platform.js';

async function sim(t: TestContext, model: string, extra: Record<string, unknown> = {}): Promise<SimServer> {
  const s = await startSim({ model, fast: true, logger: createLogger('silent'), ...extra });
  t.after(() => s.close());
  return s;
}

async function platform(t: TestContext): Promise<Platform> {
  const p = await startPlatform();
  t.after(() => p.close());
  return p;
}

/** POST /api/admin/<op> with the data dir's admin token (what `rc` does while the platform runs). */
async function admin(p: Platform, op: string, body: unknown): Promise<{ status: number; body: any }> {
  const r = await request(`${p.cp.url}/api/admin/${op}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-rc-admin-token': adminToken(p.dir) },
    body: JSON.stringify(body),
  });
  return { status: r.statusCode, body: await r.body.json() };
}

/** A port nothing listens on: a server started and closed. */
async function closedPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

test('model.check: a served name the sim lists passes (vLLM, SGLang, llama.cpp, context read); a wrong name, an unreachable upstream, a web server and failing completions fail in sentences', async (t) => {
  const p = await platform(t);
  for (const flavour of ['vllm', 'sglang', 'llama.cpp']) {
    const s = await sim(t, 'team-chat-served', { flavour, maxModelLen: 16384 });
    const ok = await admin(p, 'model.check', { name: 'team-chat', servedName: 'team-chat-served', upstreams: [`${s.url}/v1`] });
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    assert.equal(ok.body.ok, true, `${flavour}: ${ok.body.summary}`);
    assert.equal(ok.body.served_name, 'team-chat-served');
    const [u] = ok.body.upstreams;
    assert.deepEqual([u.listed, u.completed, u.context], [true, true, 16384], flavour);
    assert.match(u.sentences[0], /lists “team-chat-served” \(.*context 16,384 tokens\)\./);
    assert.match(u.sentences[1], /^A one-token completion for “team-chat-served” answered in \d+ ms\.$/);
  }

  // The catalog name where the server was started with another: what issue 42 hit (404 at request time).
  const s = await sim(t, 'team-chat-served');
  const wrong = (await admin(p, 'model.check', { name: 'team-chat', upstreams: [s.url] })).body;
  assert.equal(wrong.ok, false);
  assert.equal(wrong.upstreams[0].completed, false, 'no completion is tried for a name the server does not list');
  assert.match(wrong.summary, /^1 of 1 upstream failed the check for “team-chat”\. /);
  assert.match(wrong.upstreams[0].sentences[0], /serves “team-chat-served”, not “team-chat”: set the served name/);

  const port = await closedPort();
  const down = (await admin(p, 'model.check', { name: 'm', upstreams: [`http://127.0.0.1:${port}`] })).body;
  assert.equal(down.ok, false);
  assert.match(down.upstreams[0].sentences[0], new RegExp(`^http://127\\.0\\.0\\.1:${port} could not be reached \\(connection refused\\)`));

  // A web server that is no model server: 404 page, and a 200 that is not a model list.
  for (const [status, body] of [
    [404, '<html><body>Not Found</body></html>'],
    [200, '{"hello":"world"}'],
  ] as const) {
    const web = await listenLocal(
      t,
      createServer((_req, res) => {
        res.writeHead(status, { 'content-type': status === 404 ? 'text/html' : 'application/json' });
        res.end(body);
      }),
    );
    const r = (await admin(p, 'model.check', { name: 'm', upstreams: [`http://127.0.0.1:${web}`] })).body;
    assert.equal(r.ok, false);
    assert.match(r.upstreams[0].sentences[0], /it is not an OpenAI-compatible model server, or the URL's path is wrong\.$/);
    assert.match(
      r.upstreams[0].sentences[0],
      status === 404 ? /with status 404 \(“<html><body>Not Found<\/body><\/html>”\)/ : /with something that is not a model list/,
    );
  }

  // Listed, but its completions fail: the server's own message, and the other upstream's success beside it.
  const failing = await sim(t, 'm');
  failing.setFault({ kind: '500' });
  const healthy = await sim(t, 'm');
  const half = (await admin(p, 'model.check', { name: 'm', upstreams: [failing.url, healthy.url] })).body;
  assert.equal(half.ok, false);
  assert.match(half.summary, /^1 of 2 upstreams failed/);
  assert.equal(half.upstreams[0].listed, true);
  assert.match(half.upstreams[0].sentences[1], /^A one-token completion for “m” failed with status 500: /);
  assert.equal(half.upstreams[1].completed, true);

  // Bad input is a 400 in the platform's shape, not a check.
  const bad = await admin(p, 'model.check', { name: 'm', upstreams: ['ftp://x'] });
  assert.equal(bad.status, 400);
  assert.equal(typeof bad.body.detail, 'string');
  // Checks leave no audit entry (nothing changed).
  assert.equal((await p.cp.store.audit.page(50)).entries.filter((e) => e.action === 'model.check').length, 0);
});

test('model.add checks first: refused with the sentences and nothing saved; saved when it passes; saved anyway with unchecked, which the audit log shows', async (t) => {
  const p = await platform(t);
  const s = await sim(t, 'served');
  const refused = await admin(p, 'model.add', { name: 'team-chat', upstreams: [s.url] });
  assert.equal(refused.status, 400);
  assert.match(refused.body.detail, /serves “served”, not “team-chat”.* Not saved: fix it, or save it anyway/);
  assert.equal((await p.cp.store.models.list()).length, 0);
  assert.equal(p.events.filter((e) => e.type === 'catalog.changed').length, 0);

  const saved = await admin(p, 'model.add', { name: 'team-chat', servedName: 'served', upstreams: [s.url] });
  assert.equal(saved.status, 200, JSON.stringify(saved.body));
  assert.equal(saved.body.check.ok, true);
  assert.equal((await p.cp.store.models.list())[0]!.servedName, 'served');

  const port = await closedPort();
  const anyway = await admin(p, 'model.add', { name: 'later', upstreams: [`http://127.0.0.1:${port}`], unchecked: true });
  assert.equal(anyway.status, 200);
  assert.equal(anyway.body.check, undefined);
  const entries = (await p.cp.store.audit.page(50)).entries.filter((e) => e.action === 'model.add');
  assert.deepEqual(
    entries.map((e) => [e.target, (e.detail as { unchecked?: boolean }).unchecked]),
    [
      ['later', true],
      ['team-chat', false],
    ],
  );
});

test('GET /api/models: the context is the catalog’s, else the backend’s /v1/models figure, else unknown; never blank', async (t) => {
  const p = await platform(t);
  const me = await p.account('ctx@x.io', { verified: true });
  const s = await sim(t, 'from-backend', { maxModelLen: 8192 });
  const port = await closedPort();
  for (const body of [
    { name: 'from-backend', upstreams: [s.url] },
    { name: 'from-catalog', upstreams: [s.url], servedName: 'from-backend', maxContext: 4096 },
    { name: 'nobody-home', upstreams: [`http://127.0.0.1:${port}`], unchecked: true },
  ]) {
    assert.equal((await admin(p, 'model.add', body)).status, 200);
  }
  const models = (await p.call('GET', '/api/models', { key: me.api_token! })).body.models as { name: string; context: number | null; context_source: string }[];
  const of = (name: string) => models.find((m) => m.name === name)!;
  assert.deepEqual([of('from-backend').context, of('from-backend').context_source], [8192, 'backend']);
  assert.deepEqual([of('from-catalog').context, of('from-catalog').context_source], [4096, 'catalog']);
  assert.deepEqual([of('nobody-home').context, of('nobody-home').context_source], [null, 'unknown']);
  for (const m of models) assert.ok(m.context_source === 'unknown' ? m.context === null : Number.isInteger(m.context), m.name);
});
