import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { request } from 'undici';
import { uws } from '../../lib/uws.js';
import { listen, MAX_JSON_DEPTH, nestsDeeperThan, parseJsonObject, readBody, sendJson, track } from '../../lib/http.js';

async function echoServer(limit: number) {
  const app = uws().App();
  app.post('/echo', (res, req) => {
    const r = track(res);
    readBody(
      r,
      req.getHeader('content-length'),
      limit,
      (body) => {
        const obj = parseJsonObject(body);
        if (!obj) return sendJson(r, 400, { error: 'not a JSON object' });
        sendJson(r, 200, { got: obj, bytes: body.length });
      },
      (err) => sendJson(r, err.status, { error: err.message, code: err.code }),
    );
  });
  app.get('/slow', (res) => {
    const r = track(res);
    setTimeout(() => sendJson(r, 200, { ok: true }), 50);
  });
  return listen(app, '127.0.0.1', 0);
}

test('readBody + sendJson: JSON round trip with Content-Length', async () => {
  const s = await echoServer(1024);
  try {
    const r = await request(`${s.url}/echo`, { method: 'POST', body: JSON.stringify({ a: 1 }), headers: { 'content-type': 'application/json' } });
    assert.equal(r.statusCode, 200);
    assert.equal(r.headers['content-type'], 'application/json');
    assert.deepEqual(await r.body.json(), { got: { a: 1 }, bytes: 7 });
  } finally {
    await s.close();
  }
});

test('readBody: chunked body is collected', async () => {
  const s = await echoServer(1024);
  try {
    async function* gen() {
      yield Buffer.from('{"a":');
      yield Buffer.from('[1,2,3]}');
    }
    const r = await request(`${s.url}/echo`, { method: 'POST', body: Readable.from(gen()) });
    assert.equal(r.statusCode, 200);
    assert.deepEqual(await r.body.json(), { got: { a: [1, 2, 3] }, bytes: 13 });
  } finally {
    await s.close();
  }
});

test('readBody: 413 by Content-Length and by streamed size', async () => {
  const s = await echoServer(100);
  try {
    const big = JSON.stringify({ x: 'y'.repeat(200) });
    const r1 = await request(`${s.url}/echo`, { method: 'POST', body: big });
    assert.equal(r1.statusCode, 413);
    assert.equal(((await r1.body.json()) as { code: string }).code, 'RC_ERR_BODY_TOO_LARGE');
    async function* gen() {
      for (let i = 0; i < 10; i++) yield Buffer.from('x'.repeat(50));
    }
    const r2 = await request(`${s.url}/echo`, { method: 'POST', body: Readable.from(gen()) }).catch((e: Error) => e);
    if (!(r2 instanceof Error)) {
      assert.equal(r2.statusCode, 413);
      await r2.body.dump();
    }
  } finally {
    await s.close();
  }
});

test('parseJsonObject accepts only objects', () => {
  assert.deepEqual(parseJsonObject(Buffer.from('{"a":1}')), { a: 1 });
  for (const bad of ['[1]', '1', 'null', '"s"', '{', '']) assert.equal(parseJsonObject(Buffer.from(bad)), undefined, bad);
  // Nested deeper than MAX_JSON_DEPTH: recursive code over it would overflow the stack.
  const deep = (n: number) => '{"a":'.repeat(n) + '[]' + '}'.repeat(n);
  assert.ok(parseJsonObject(Buffer.from(deep(MAX_JSON_DEPTH - 1))));
  assert.equal(parseJsonObject(Buffer.from(deep(MAX_JSON_DEPTH))), undefined);
  assert.equal(parseJsonObject(Buffer.from(deep(100_000))), undefined);
});

test('nestsDeeperThan counts arrays and objects, not scalars, and never overflows itself', () => {
  assert.equal(nestsDeeperThan(1, 0), false);
  assert.equal(nestsDeeperThan('x', 0), false);
  assert.equal(nestsDeeperThan({}, 1), false);
  assert.equal(nestsDeeperThan({}, 0), true);
  assert.equal(nestsDeeperThan({ a: [1, { b: 'c' }] }, 3), false);
  assert.equal(nestsDeeperThan({ a: [1, { b: 'c' }] }, 2), true);
  assert.equal(nestsDeeperThan([[], [[[]]], []], 3), true);
  assert.equal(nestsDeeperThan(JSON.parse('['.repeat(1_000_000) + ']'.repeat(1_000_000)) as unknown), true);
});

test('listen: ephemeral port; close waits for in-flight work up to the grace period', async () => {
  let inflight = 0;
  const app = uws().App();
  app.get('/slow', (res) => {
    const r = track(res);
    inflight++;
    setTimeout(() => {
      inflight--;
      sendJson(r, 200, { ok: true });
    }, 100);
  });
  const s = await listen(app, '127.0.0.1', 0, () => inflight === 0);
  assert.ok(s.port > 0);
  const pending = request(`${s.url}/slow`);
  // Close only once the request is in flight (a fixed sleep raced the connection on a loaded machine).
  while (inflight === 0) await new Promise((r) => setTimeout(r, 5));
  await s.close(2000);
  const r = await pending;
  assert.equal(r.statusCode, 200);
  await r.body.dump();
  await assert.rejects(request(`${s.url}/slow`));
});
