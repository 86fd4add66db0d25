// The backend client's header lines (lib/relay/http-parser.ts HeaderLines): hop-by-hop lines found
// while the head is parsed, and the Buffers of a line seen before shared between responses.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { emptyParsedHead, parseHead } from '../../../lib/relay/http-parser.js';

function linesOf(head: string): [Buffer[], Buffer[]] {
  const buf = Buffer.from(`${head}\r\n\r\n`, 'latin1');
  const out = emptyParsedHead();
  assert.equal(parseHead(buf, 0, buf.length - 4, out), undefined);
  return [out.headers.all(), out.headers.endToEnd()];
}

const text = (list: Buffer[]): string[] => list.map((b) => b.toString('latin1'));

test('end-to-end lines leave out every hop-by-hop name, in any case; all() keeps them', () => {
  const [all, endToEnd] = linesOf(
    'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: x\r\nuWebSockets: 20\r\nKeep-Alive: timeout=5\r\nProxy-Connection: close\r\nx-id: 1\r\nContent-Length: 2',
  );
  assert.deepEqual(text(endToEnd), ['Content-Type', 'application/json', 'x-id', '1']);
  assert.equal(all.length, 14);
});

test('a line seen before comes back as the same Buffers; another value of the same length does not', () => {
  const [, a] = linesOf('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: aaaa\r\ncontent-length: 2');
  const [, b] = linesOf('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-request-id: aaab\r\ncontent-length: 2');
  const [, c] = linesOf('HTTP/1.1 200 OK\r\ncontent-type: application/jsoo\r\nx-request-id: aaab\r\ncontent-length: 2');
  assert.equal(b[0], a[0], 'the same name Buffer');
  assert.equal(b[1], a[1], 'the same value Buffer');
  assert.deepEqual(text(a), ['content-type', 'application/json', 'x-request-id', 'aaaa']);
  assert.deepEqual(text(b), ['content-type', 'application/json', 'x-request-id', 'aaab']);
  assert.deepEqual(text(c), ['content-type', 'application/jsoo', 'x-request-id', 'aaab']);
});
