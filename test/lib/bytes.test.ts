// lib/bytes.ts: each function answers what the Buffer method it stands for answers, on the same
// arguments, the missing ones included (the request path calls them with offsets left out).
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allocUnsafe, copyWithin, decode, indexOf, lastIndexOf, OWN_VIEWS, set, subarray, write } from '../../lib/bytes.js';

const text = 'data: {"usage":{"prompt_tokens":3}}\n\ndata: [DONE]\n\n';
const buf = Buffer.from(text);
const needles: (number | Buffer)[] = [0x0a, 0x7b, 0x00, Buffer.from('\n\n'), Buffer.from('"usage":{'), Buffer.from('absent'), Buffer.alloc(0)];
const offsets = [undefined, 0, 1, 7, -3, -200, buf.length - 1, buf.length, buf.length + 5, Number.NaN];

describe('lib/bytes', () => {
  it('indexOf and lastIndexOf find what Buffer#indexOf and Buffer#lastIndexOf find, from every offset', () => {
    for (const needle of needles) {
      for (const from of offsets) {
        assert.equal(indexOf(buf, needle, from), buf.indexOf(needle, from), `indexOf ${String(needle)} from ${from}`);
        assert.equal(lastIndexOf(buf, needle, from), buf.lastIndexOf(needle, from), `lastIndexOf ${String(needle)} from ${from}`);
      }
      assert.equal(indexOf(buf, needle), buf.indexOf(needle));
      assert.equal(lastIndexOf(buf, needle), buf.lastIndexOf(needle));
    }
    assert.equal(indexOf(Buffer.alloc(0), 0x0a), -1);
    assert.equal(lastIndexOf(Buffer.alloc(0), 0x0a), -1);
  });

  it('subarray is a view of the same bytes (no copy), as Buffer#subarray', () => {
    assert.ok(OWN_VIEWS, 'this Node names its Buffer class (Buffer[Symbol.species]): subarray makes views itself');
    for (const [start, end] of [
      [0, undefined],
      [3, 9],
      [-5, undefined],
      [-5, -1],
      [9, 3],
      [0, 1000],
      [5, 5],
      [1000, 2000],
      [2.5, 7.9],
      [Number.NaN, 4],
      [3, Number.POSITIVE_INFINITY],
      [0, -0],
    ] as [number, number | undefined][]) {
      const view = subarray(buf, start, end);
      const expected = buf.subarray(start, end);
      assert.ok(Buffer.isBuffer(view));
      assert.deepEqual(view, expected, `subarray(${start}, ${end})`);
      assert.equal(view.byteOffset, expected.byteOffset, `subarray(${start}, ${end}).byteOffset`);
      assert.equal(view.buffer, expected.buffer);
    }
    // A pooled Buffer shares its memory with others: no end reaches past it.
    const pooled = Buffer.from('abcdef');
    assert.ok(pooled.buffer.byteLength > pooled.length, 'a small Buffer.from lies in the pool');
    assert.equal(subarray(pooled, 2, 4096).toString(), 'cdef');
    assert.equal(subarray(pooled, 4096, 8192).length, 0);
    assert.equal(subarray(pooled, 4096).byteOffset, pooled.byteOffset + pooled.length);
    const copy = Buffer.from(buf);
    subarray(copy, 0, 4)[0] = 0x44;
    assert.equal(copy[0], 0x44, 'a write through the view reaches the buffer');
  });

  it('decode reads the bytes as Buffer#toString does, whole or a range', () => {
    const utf8 = Buffer.from('héllo, wörld ✓');
    for (const enc of ['utf8', 'latin1'] as const) {
      assert.equal(decode(utf8, enc), utf8.toString(enc));
      assert.equal(decode(utf8, enc, 2, 9), utf8.toString(enc, 2, 9));
      assert.equal(decode(utf8, enc, 5), utf8.toString(enc, 5));
      assert.equal(decode(utf8, enc, 9, 2), utf8.toString(enc, 9, 2));
    }
  });

  it('set, copyWithin and write change the bytes as the methods do; allocUnsafe gives a Buffer of the size', () => {
    const a = allocUnsafe(12);
    assert.ok(Buffer.isBuffer(a));
    assert.equal(a.length, 12);
    const b = Buffer.allocUnsafe(12);
    a.fill(0);
    b.fill(0);
    set(a, Buffer.from('abc'), 2);
    b.set(Buffer.from('abc'), 2);
    assert.deepEqual(a, b);
    copyWithin(a, 6, 2, 5);
    b.copyWithin(6, 2, 5);
    assert.deepEqual(a, b);
    assert.equal(write(a, 'xyzw', 1, 3, 'latin1'), b.write('xyzw', 1, 3, 'latin1'));
    assert.deepEqual(a, b);
    assert.equal(a.toString('latin1', 0, 9), '\0xyzc\0abc');
    assert.throws(() => set(a, Buffer.alloc(4), 10), RangeError);
  });
});
