// The response head parser of the backend client (lib/relay/http-parser.ts) on its own: the
// header lines it keeps as offsets, and the Buffers, hop-by-hop filtering and lookups made
// from them on demand.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CHUNK_SIZE, emptyParsedHead, HOP_BY_HOP_RESPONSE, LENGTH, parseHead, type ParsedHead, UNTIL_CLOSE } from '../../../lib/relay/http-parser.js';

/** Parses `head` (which ends with its blank line) placed after some unrelated bytes, as in a read buffer. */
function parse(head: string): { error: string | undefined; h: ParsedHead } {
  const before = 'xyz';
  const buf = Buffer.from(before + head + 'body', 'latin1');
  const h = emptyParsedHead();
  const end = buf.indexOf('\r\n\r\n', before.length);
  return { error: parseHead(buf, before.length, end, h), h };
}

const text = (list: Buffer[]) => list.map((b) => b.toString('latin1'));

test('header lines come back as sent, in order, with values trimmed', () => {
  const { error, h } = parse(
    'HTTP/1.1 200 OK\r\nContent-Type:  application/json \r\nX-Request-Id:\tabc\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\nContent-Length: 4\r\n\r\n',
  );
  assert.equal(error, undefined);
  assert.equal(h.status, 200);
  assert.equal(h.state, LENGTH);
  assert.equal(h.headers.all().length, 2 * 5);
  assert.equal(h.headers.contentLength, 4);
  assert.deepEqual(text(h.headers.all()), [
    'Content-Type',
    'application/json',
    'X-Request-Id',
    'abc',
    'Set-Cookie',
    'a=1',
    'Set-Cookie',
    'b=2',
    'Content-Length',
    '4',
  ]);
  // Each call makes new slices: a caller may keep or change its list.
  assert.notEqual(h.headers.all(), h.headers.all());
});

test('endToEnd drops exactly the hop-by-hop lines, in any case', () => {
  const value = (name: string) => (name === 'content-length' ? '4' : name === 'transfer-encoding' ? 'identity' : 'v');
  const hop = HOP_BY_HOP_RESPONSE.map((name, i) => `${i % 2 ? name.toUpperCase() : name}: ${value(name)}\r\n`).join('');
  // Names of the same lengths as hop-by-hop ones, and names that contain them, are relayed.
  const kept = 'x-da: 1\r\nset-cookie: a=1\r\nx-uwebsockets: 2\r\ncontent-lengths: 3\r\ncontent-type: text/plain\r\n';
  const { error, h } = parse(`HTTP/1.1 200 OK\r\n${hop}${kept}\r\n`);
  assert.equal(error, undefined);
  assert.deepEqual(text(h.headers.endToEnd()), ['x-da', '1', 'set-cookie', 'a=1', 'x-uwebsockets', '2', 'content-lengths', '3', 'content-type', 'text/plain']);
  assert.equal(h.headers.all().length, 2 * (HOP_BY_HOP_RESPONSE.length + 5));
});

test('get finds the first line of a name in any case, as text', () => {
  const { h } = parse('HTTP/1.1 429 Too Many Requests\r\nRETRY-After: 7\r\nretry-after: 9\r\n\r\n');
  assert.equal(h.headers.get(Buffer.from('retry-after')), '7');
  assert.equal(h.headers.get(Buffer.from('retry-afte')), undefined);
  assert.equal(h.headers.get(Buffer.from('date')), undefined);
});

test('a chunked head has no content length; a malformed line is refused', () => {
  const chunked = parse('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n').h;
  assert.equal(chunked.state, CHUNK_SIZE);
  assert.equal(chunked.headers.contentLength, -1);
  assert.equal(parse('HTTP/1.1 200 OK\r\nno colon here\r\n\r\n').error, 'bad header line');
  assert.equal(parse('HTTP/1.1 200 OK\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\n').error, 'bad content-length');
});

test('Transfer-Encoding and Connection are read as token lists, in any case, with no comma read past the value', () => {
  const state = (head: string) => parse(`HTTP/1.1 200 OK\r\n${head}\r\n`).h;
  assert.equal(state('Transfer-Encoding: gzip, Chunked\r\n').state, CHUNK_SIZE);
  assert.equal(state('Transfer-Encoding: chunked , \r\n').state, CHUNK_SIZE);
  assert.equal(state('Transfer-Encoding: chunk,ed\r\n').state, UNTIL_CLOSE, 'a comma splits the token');
  assert.equal(state('Transfer-Encoding: xchunked\r\n').state, UNTIL_CLOSE);
  // A value just as long as the token is compared whole; the next line's comma is not this value's.
  assert.equal(state('Transfer-Encoding: gzip\r\nX-A: b, chunked\r\n').state, UNTIL_CLOSE);
  assert.equal(state('Connection: Keep-Alive, Upgrade\r\nContent-Length: 4\r\n').keepAlive, true);
  assert.equal(state('Connection: upgrade,close\r\nContent-Length: 4\r\n').keepAlive, false);
  assert.equal(state('Connection: closed\r\nContent-Length: 4\r\n').keepAlive, true);
  assert.equal(parse('HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\n').h.keepAlive, true);
});
