// bench/profile: the exact-count client against a real sim, the parsers of callgrind's output and
// of Node's JIT map, and one real callgrind run of a small node server (no count is asserted
// beyond being there: instructions differ between machines and Node builds).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnRc } from '../../bench/load.js';
import { jitName, parseAnnotate, parsePerfMap, startUnderCallgrind, totalOf } from '../../bench/profile/callgrind.js';
import { rawRequest, responseLength, sendExactly } from '../../bench/profile/exact-client.js';

test('responseLength frames by Content-Length and by the last chunk, and waits for the rest', () => {
  const sized = Buffer.from('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloHTTP/1.1');
  assert.equal(responseLength(sized), sized.indexOf('HTTP/1.1', 4));
  assert.equal(responseLength(Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhel')), -1);
  assert.equal(responseLength(Buffer.from('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n')), -1);
  const chunked = Buffer.from('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\nnext');
  assert.equal(responseLength(chunked), chunked.length - 4);
  assert.equal(responseLength(Buffer.from('HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n')), -1);
  assert.throws(() => responseLength(Buffer.from('HTTP/1.1 200 OK\r\nconnection: close\r\n\r\nabc')), /neither sized nor chunked/);
});

test('rawRequest writes the head, the headers and a sized body', () => {
  const raw = rawRequest(new URL('http://127.0.0.1:9/'), { method: 'POST', path: '/v1/x', headers: { authorization: 'Bearer k' }, body: '{"é":1}' });
  assert.equal(
    raw.toString(),
    'POST /v1/x HTTP/1.1\r\nhost: 127.0.0.1:9\r\nauthorization: Bearer k\r\ncontent-type: application/json\r\ncontent-length: 8\r\n\r\n{"é":1}',
  );
});

test('sendExactly sends exactly N requests over keep-alive connections and counts non-2xx answers', async (t) => {
  const sim = await spawnRc('sim', ['sim', '--fast', '--port', '0', '--model', 'm'], { env: { RC_LOG_LEVEL: 'silent' } });
  t.after(() => sim.stop());
  const request = (model: string, stream: boolean) => ({
    method: 'POST' as const,
    path: '/v1/chat/completions',
    body: JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }], max_tokens: 3, stream }),
  });
  const sized = await sendExactly(sim.url, request('m', false), 37, 4);
  assert.deepEqual(sized, { done: 37, failed: 0, firstFailure: undefined });
  const streamed = await sendExactly(sim.url, request('m', true), 11, 3);
  assert.deepEqual(streamed, { done: 11, failed: 0, firstFailure: undefined });
  const bad = await sendExactly(sim.url, request('nope', false), 5, 2);
  assert.equal(bad.done, 5);
  assert.equal(bad.failed, 5);
  assert.match(bad.firstFailure ?? '', /^HTTP\/1\.1 4\d\d/);
});

test('the perf map names JIT addresses; callgrind_annotate lines become costs with names', () => {
  const jit = parsePerfMap('7f0000001000 100 JS:*second file:///b.js:2:1\n7f0000000000 20 JS:*first file:///a.js:1:1\n');
  assert.equal(jitName(jit, 0x7f0000000000), 'JS:*first file:///a.js:1:1');
  assert.equal(jitName(jit, 0x7f000000001f), 'JS:*first file:///a.js:1:1');
  assert.equal(jitName(jit, 0x7f0000000020), undefined);
  assert.equal(jitName(jit, 0x7f00000010ff), 'JS:*second file:///b.js:2:1');
  assert.equal(jitName(jit, 0x7f0000001100), undefined);
  const annotate = [
    '--------------------------------------------------------------------------------',
    '9,000 (100.0%)  PROGRAM TOTALS',
    '--------------------------------------------------------------------------------',
    'Ir                   file:function',
    '--------------------------------------------------------------------------------',
    '6,000 (66.67%)  ???:0x00007f0000001010 [???]',
    '2,000 (22.22%)  ???:Builtins_LoadIC [/usr/bin/node]',
    '  700 ( 7.78%)  ./malloc/./malloc/malloc.c:malloc [/usr/lib/x86_64-linux-gnu/libc.so.6]',
    '  300 ( 3.33%)  ???:0x0000000000001234 [???]',
  ].join('\n');
  assert.deepEqual(parseAnnotate(annotate, jit), [
    { instructions: 6000, name: 'JS:*second file:///b.js:2:1' },
    { instructions: 2000, name: 'Builtins_LoadIC [/usr/bin/node]' },
    { instructions: 700, name: 'malloc.c:malloc [/usr/lib/x86_64-linux-gnu/libc.so.6]' },
    { instructions: 300, name: '???:0x0000000000001234 [???]' },
  ]);
  assert.equal(totalOf('version: 1\nevents: Ir\nsummary: 0\ntotals: 12345\n'), 12345);
  assert.equal(totalOf('events: Ir\nsummary: 77\n'), 77);
});

/** True when valgrind is on this machine; else the test is skipped, or fails under RC_REQUIRE_VALGRIND=1 (CI). */
function valgrindAvailable(t: TestContext): boolean {
  if (existsSync('/usr/bin/valgrind')) return true;
  if (process.env.RC_REQUIRE_VALGRIND === '1') throw new Error('valgrind is required (RC_REQUIRE_VALGRIND=1) but /usr/bin/valgrind is missing');
  t.skip('valgrind is not installed');
  return false;
}

test('a node server under callgrind: instructions per request, JIT code named', async (t) => {
  if (!valgrindAvailable(t)) return;
  const dir = mkdtempSync(join(tmpdir(), 'rc-profile-test-'));
  const server = `
    function answer(req, res) { let n = 0; for (let i = 0; i < 1000; i++) n += i; res.end(String(n)); }
    const s = require('http').createServer(answer).listen(0, '127.0.0.1', () => console.log(JSON.stringify({ url: 'http://127.0.0.1:' + s.address().port })));`;
  const target = await startUnderCallgrind('node http', [process.execPath, '--perf-basic-prof', '-e', server], {}, { kind: 'json-url' }, dir);
  t.after(async () => {
    await target.stop();
    rmSync(dir, { recursive: true, force: true });
  });
  const request = { method: 'GET' as const, path: '/' };
  await sendExactly(target.url, request, 300, 2);
  const counts = await target.measure(() => sendExactly(target.url, request, 200, 2), 200);
  assert.ok(counts.mainPerRequest > 1000, `main thread: ${counts.mainPerRequest} instructions per request`);
  assert.ok(counts.allPerRequest >= counts.mainPerRequest);
  const top = await target.topFunctions(200);
  assert.ok(top.length > 10);
  assert.ok(
    top.some((f) => f.name.startsWith('JS:') && f.name.includes('answer')),
    `the JIT map names the handler: ${top.map((f) => f.name).join('\n')}`,
  );
  // A second measure is a second dump, counted on its own.
  const again = await target.measure(() => sendExactly(target.url, request, 100, 2), 100);
  assert.ok(again.mainPerRequest > 1000);
});
