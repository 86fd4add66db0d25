import assert from 'node:assert/strict';
import { test } from 'node:test';
import { SseParser } from '../../../gateway/messages/sse.js';

const STREAM =
  'data: {"a":"héllo ✓ 😀"}\n\n' +
  ': a comment\n\n' +
  'event: ignored\r\ndata: {"b":2}\r\n\r\n' +
  'data: line1\ndata: line2\n\n' +
  'data:no-space\n\n' +
  'id: 7\nretry: 10\n\n' +
  'data: [DONE]\n\n';
const EXPECTED = ['{"a":"héllo ✓ 😀"}', '{"b":2}', 'line1\nline2', 'no-space', '[DONE]'];

function parseAll(parts: Buffer[]): string[] {
  const got: string[] = [];
  const p = new SseParser((d) => got.push(d));
  for (const part of parts) p.push(part);
  p.end();
  return got;
}

test('whole stream in one chunk', () => {
  assert.deepEqual(parseAll([Buffer.from(STREAM)]), EXPECTED);
});

test('split at every byte boundary (two pieces), including inside UTF-8 characters', () => {
  const bytes = Buffer.from(STREAM);
  for (let i = 0; i <= bytes.length; i++) {
    assert.deepEqual(parseAll([bytes.subarray(0, i), bytes.subarray(i)]), EXPECTED, `split at ${i}`);
  }
});

test('one byte per chunk, with the caller reusing its buffer', () => {
  const bytes = Buffer.from(STREAM);
  const got: string[] = [];
  const p = new SseParser((d) => got.push(d));
  const scratch = Buffer.alloc(1);
  for (const b of bytes) {
    scratch[0] = b;
    p.push(scratch);
  }
  p.end();
  assert.deepEqual(got, EXPECTED);
});

test('an unterminated last event is delivered at end; nothing is delivered twice', () => {
  assert.deepEqual(parseAll([Buffer.from('data: {"x":1}\n\ndata: {"y":2}')]), ['{"x":1}', '{"y":2}']);
  assert.deepEqual(parseAll([Buffer.from('data: {"x":1}\n')]), ['{"x":1}']);
  assert.deepEqual(parseAll([Buffer.from('')]), []);
});

test('invalid UTF-8 becomes U+FFFD as a decoding of each line alone would make it, wherever the stream is cut', () => {
  // A lone continuation byte, a lead byte cut by the line's end, an overlong form, a lead byte before CR.
  const lines = [Buffer.from([0x7b, 0x80, 0x7d]), Buffer.from([0x61, 0xe2, 0x82]), Buffer.from([0xc0, 0xaf, 0x62]), Buffer.from([0x63, 0xf0, 0x9f])];
  const bytes = Buffer.concat(lines.flatMap((l, i) => [Buffer.from('data: '), l, Buffer.from(i === 3 ? '\r\n\r\n' : '\n\n')]));
  const expected = lines.map((l) => l.toString('utf8'));
  assert.ok(expected.every((e) => e.includes('\ufffd')));
  for (let i = 0; i <= bytes.length; i++) {
    assert.deepEqual(parseAll([bytes.subarray(0, i), bytes.subarray(i)]), expected, `split at ${i}`);
  }
});

// Reads that are all ASCII are split as one latin1 string; the rest as bytes. Every framing of
// the stream above without its non-ASCII text, cut anywhere, gives the same events.
const ASCII_STREAM = STREAM.replace('héllo ✓ 😀', 'hello');
const ASCII_EXPECTED = EXPECTED.map((e) => e.replace('héllo ✓ 😀', 'hello'));

test('an ASCII stream split at every byte boundary (two and three pieces)', () => {
  const bytes = Buffer.from(ASCII_STREAM);
  assert.deepEqual(parseAll([bytes]), ASCII_EXPECTED);
  for (let i = 0; i <= bytes.length; i++) {
    assert.deepEqual(parseAll([bytes.subarray(0, i), bytes.subarray(i)]), ASCII_EXPECTED, `split at ${i}`);
    for (let j = i; j <= bytes.length; j += 7) {
      assert.deepEqual(parseAll([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]), ASCII_EXPECTED, `split at ${i}, ${j}`);
    }
  }
});

test('ASCII and non-ASCII reads in turn: a line cut between them, an event whose data lines come in both', () => {
  const bytes = Buffer.from('data: {"a":1}\n\ndata: é1\ndata: two\n\ndata: x\ndata: ✓\n\n');
  const expected = ['{"a":1}', 'é1\ntwo', 'x\n✓'];
  for (let i = 0; i <= bytes.length; i++) {
    for (let j = i; j <= bytes.length; j++) {
      assert.deepEqual(parseAll([bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)]), expected, `split at ${i}, ${j}`);
    }
  }
});
