// RespWriter (gateway/gates/resp-encode.ts) writes exactly the bytes of the plain string encoding
// of a RESP2 command (`*<n>\r\n` then `$<byte length>\r\n<bytes>\r\n`: strings as UTF-8, numbers as
// String(n), Buffers as they are), whatever the arguments: ASCII, other characters (where the fast
// copy starts over), numbers of every kind, bytes, and commands that outgrow the buffer.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { encodeArgs, packed, RespWriter, type RespArg } from '../../../gateway/gates/resp-encode.js';

/** The reference: the command as one string, encoded as UTF-8. */
function plain(args: readonly RespArg[]): Buffer {
  let cmd = `*${args.length}\r\n`;
  for (const a of args) {
    // Bytes go as they are: latin1 keeps each byte one character (the reference is built as latin1).
    const s = Buffer.isBuffer(a) ? a.toString('latin1') : Buffer.from(String(a), 'utf8').toString('latin1');
    cmd += `$${s.length}\r\n${s}\r\n`;
  }
  return Buffer.from(cmd, 'latin1');
}

const CASES: RespArg[][] = [
  [],
  ['PING'],
  [''],
  ['EVALSHA', 'a'.repeat(40), 2, 'rc:{acct:1}:b', 'rc:{acct:1}:d:20417', '', 60, 100000, 1e9, 4096, 'llama-3.1-8b', 3_600_000, 691200, -1, 1],
  // Numbers: zero, negative zero, negatives, powers of ten at every length, the largest safe
  // integers, and what is not a safe integer (String(n) then: exponents, fractions, Infinity, NaN).
  [0, -0, -1, -9, -10, 7, 9, 10, 99, 100, 101, 999_999, 1_000_000, 2 ** 31, 2 ** 32 + 1],
  // Around the int32 range, where the digits go from floating point to int32 arithmetic; the limits.
  [2 ** 31 - 1, -(2 ** 31 - 1), 2 ** 31 + 1, -(2 ** 31), 2_147_483_650, 9_999_999_999, 1e11, 99_999_999_999, 1e15, 1e15 - 1],
  [Number.MAX_SAFE_INTEGER, -Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER + 1, 1e21, 1.5, -0.25, 1e-7, Infinity, -Infinity, Number.NaN],
  // Other characters: in the first place, after ASCII, 2-, 3- and 4-byte UTF-8, a lone surrogate.
  ['é', 'modèle', 'ascii then ü', 'ünï', '日本語のモデル', '😀 emoji', 'lone \ud800 surrogate', '\u007f', '\u0080'],
  ['a\r\nb', 'quote " and backslash \\', 'x'.repeat(10_000), 'é'.repeat(3000)],
  // Bytes, as they are (not UTF-8 text among them), between strings and numbers.
  [
    'EVALSHA',
    Buffer.from('b'.repeat(40)),
    2,
    Buffer.from('rc:{acct:7}:b'),
    Buffer.alloc(0),
    Buffer.from([0, 0xff, 0x0d, 0x0a, 0xc3]),
    'é',
    Buffer.alloc(9000, 0x61),
  ],
];

test('RespWriter writes the bytes of the plain string encoding', () => {
  for (const args of CASES) {
    const w = new RespWriter(8);
    w.command(args);
    assert.deepEqual(w.take(), plain(args), JSON.stringify(args));
    assert.equal(w.length, 0, 'take() starts over');
  }
});

test('RespWriter keeps commands in order across takes and growth, and clear() drops them', () => {
  const w = new RespWriter(16);
  for (const args of CASES) w.command(args);
  assert.deepEqual(w.take(), Buffer.concat(CASES.map(plain)));
  // The buffer is reused: what was taken before is not changed by what is written after.
  w.command(['first']);
  const first = w.take();
  w.command(['second, longer']);
  assert.deepEqual(first, plain(['first']));
  assert.deepEqual(w.take(), plain(['second, longer']));
  w.command(['dropped']);
  w.clear();
  w.command(['kept']);
  assert.deepEqual(w.take(), plain(['kept']));
});

test('RespWriter.commandOf writes the bytes of the command of its head and the arguments written after it', () => {
  const sha = Buffer.from('c'.repeat(40));
  const keys = [Buffer.from('rc:{acct:7}:b'), Buffer.from('rc:{acct:7}:d:20417')];
  const append = (w: RespWriter, args: readonly RespArg[]): void => w.appendArgs(args);
  for (const args of CASES) {
    const w = new RespWriter(8);
    const head: RespArg[] = ['EVALSHA', sha, 2, ...keys, 691200, 1e9, 1e11, 1e15];
    w.commandOf(encodeArgs(head), args.length, append, args);
    w.commandOf(encodeArgs([]), args.length, append, args);
    const expected = Buffer.concat([plain([...head, ...args]), plain(args)]);
    assert.deepEqual(w.take(), expected, JSON.stringify(args));
  }
});

test('the typed argument writers write what command() writes for the same values', () => {
  // What the gate store writes a batch's calls with: numbers, bytes (short ones copied a byte at
  // a time, long ones in one call), and arguments encoded before.
  const numbers = CASES.flat().filter((a): a is number => typeof a === 'number');
  const bytes = [
    Buffer.alloc(0),
    Buffer.from('a'),
    Buffer.from('sim-chat'),
    Buffer.alloc(64, 0x62),
    Buffer.alloc(65, 0x63),
    Buffer.from([0, 0xff, 0x0d, 0x0a]),
  ];
  const encoded = encodeArgs(['a', '', 7]);
  const w = new RespWriter(8);
  for (const n of numbers) w.numberArg(n);
  for (const n of numbers) if (Number.isSafeInteger(n)) w.integerArg(n);
  for (const b of bytes) w.bytesArg(b);
  w.encodedArgs(encoded);
  const args: RespArg[] = [...numbers, ...numbers.filter((n) => Number.isSafeInteger(n)), ...bytes, 'a', '', 7];
  // plain() of the same values, without its `*<n>` line.
  const all = plain(args);
  assert.deepEqual(w.take(), all.subarray(all.indexOf('\r\n') + 2));
});

test('packedArg writes five numbers as the bulk string of their little-endian doubles, as packed() makes them', () => {
  const values: [number, number, number, number, number][] = [
    [0, 0, 0, 0, 0],
    [1280, 45_678_901, -1, 1, 0],
    [Number.MAX_SAFE_INTEGER, 1e15, -(2 ** 31), 23, 1e11],
  ];
  const w = new RespWriter(8); // grows on the way
  for (const v of values) w.packedArg(...v);
  const expected = values.map((v) => {
    const b = Buffer.alloc(40);
    for (const [i, n] of v.entries()) b.writeDoubleLE(n, i * 8);
    assert.deepEqual(packed(...v), b);
    return plain([b]).subarray(4); // without the `*1` line
  });
  assert.deepEqual(w.take(), Buffer.concat(expected));
});
