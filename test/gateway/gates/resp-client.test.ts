// The gates' own Redis connection (gateway/gates/resp-client.ts): its RESP parser on every split
// of the bytes, then against real redis-servers: the gates' commands, pipelining in order, large
// and UTF-8 values, error replies, a killed connection, AUTH and SELECT from the URL.
import assert from 'node:assert/strict';
import * as net from 'node:net';
import { test, type TestContext } from 'node:test';
import { INCOMPLETE, MALFORMED, parseRawReply, parseReply, ReplyError, RespClient } from '../../../gateway/gates/resp-client.js';
import { waitFor } from '../../helpers.js';
import { connectRedis, PrivateRedis } from './fixtures.js';

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';

/** The reply in `bytes`, or the marker parseReply returned. */
const parseAll = (bytes: string): unknown => parseReply(Buffer.from(bytes), 0);

test('parseReply reads each RESP2 type, and waits for a reply split anywhere', () => {
  const cases: [string, unknown][] = [
    [':42\r\n', 42],
    [':-7\r\n', -7],
    ['+OK\r\n', 'OK'],
    ['$4\r\nhé!\r\n', 'hé!'],
    ['$0\r\n\r\n', ''],
    ['$-1\r\n', null],
    ['*-1\r\n', null],
    ['*0\r\n', []],
    ['*3\r\n:1\r\n$2\r\nab\r\n*2\r\n:-2\r\n$-1\r\n', [1, 'ab', [-2, null]]],
    ['$4\r\na\r\nb\r\n', 'a\r\nb'],
  ];
  for (const [bytes, value] of cases) {
    assert.deepEqual(parseAll(bytes), value, JSON.stringify(bytes));
    // Cut short at every byte, the reply is not complete yet (never a value, nor malformed), also
    // read from the middle of a buffer.
    const full = Buffer.from(bytes);
    for (let n = 0; n < full.length; n++) {
      assert.equal(parseReply(full.subarray(0, n), 0), INCOMPLETE, `${JSON.stringify(bytes)} cut at ${n}`);
      assert.equal(parseReply(Buffer.concat([Buffer.from(':1\r\n'), full.subarray(0, n)]), 4), INCOMPLETE, `${JSON.stringify(bytes)} cut at ${n}, at 4`);
    }
    assert.deepEqual(parseReply(Buffer.concat([full, full]), full.length), value, `${JSON.stringify(bytes)} at ${full.length}`);
    // Read from a larger buffer whose bytes past `end` are not the reply's (the shared read buffer).
    const spare = Buffer.concat([full, Buffer.from('\r\n:9\r\n$5\r\n')]);
    assert.deepEqual(parseReply(spare, 0, full.length), value);
    for (let n = 0; n < full.length; n++) assert.equal(parseReply(spare, 0, n), INCOMPLETE, `${JSON.stringify(bytes)} ending at ${n}`);
  }
  // The gate script's reply: 8 integers per admission, some negative, one of 15 digits.
  const outcome = [0, 0, 599, -42, 100, 123_456_789_012_345, -1, 1024];
  const script = `*16\r\n${[...outcome, ...outcome].map((n) => `:${n}\r\n`).join('')}`;
  assert.deepEqual(parseAll(script), [...outcome, ...outcome]);
  for (let n = 0; n < script.length; n++) assert.equal(parseAll(script.slice(0, n)), INCOMPLETE, `cut at ${n}`);
  const err = parseAll('-NOSCRIPT No matching script\r\n');
  assert.ok(err instanceof ReplyError);
  assert.equal(err.message, 'NOSCRIPT No matching script');
  assert.equal(err.name, 'ReplyError');
  assert.equal(typeof parseAll('?what\r\n'), 'symbol', 'not RESP');
  // Whole lines that are not RESP: a count that is not a number, or a line without its CR. Each is
  // malformed, not incomplete: a valid reply after it does not make it one.
  for (const bad of [':4x\r\n', ':\r\n', ':-\r\n', '$\r\n', '$1a\r\nx\r\n', '*b\r\n', ':42\n', '+OK\n', '+O\rK\r\n', '*1\r\n:1\n']) {
    assert.equal(parseAll(`${bad}:1\r\n`), MALFORMED, JSON.stringify(bad));
  }
});

test('parseRawReply gives a bulk string as its bytes, a view of the buffer, and waits for one split anywhere', () => {
  const payload = Buffer.alloc(64);
  for (let i = 0; i < 8; i++) payload.writeDoubleLE(i === 3 ? -42.5 : i * 1e6, i * 8);
  // Bytes that are not UTF-8, and CRLF among them.
  payload[5] = 0x0d;
  payload[6] = 0x0a;
  payload[7] = 0xff;
  const bytes = Buffer.concat([Buffer.from('$64\r\n'), payload, Buffer.from('\r\n')]);
  const reply = parseRawReply(bytes, 0);
  assert.ok(Buffer.isBuffer(reply));
  assert.deepEqual(reply, payload);
  assert.equal(reply.buffer, bytes.buffer, 'a view, not a copy');
  for (let n = 0; n < bytes.length; n++) assert.equal(parseRawReply(bytes, 0, n), INCOMPLETE, `cut at ${n}`);
  assert.deepEqual(parseRawReply(Buffer.from('$0\r\n\r\n'), 0), Buffer.alloc(0));
  assert.equal(parseRawReply(Buffer.from('$-1\r\n'), 0), null);
  // Anything else as parseReply reads it.
  assert.deepEqual(parseRawReply(Buffer.from('*2\r\n:1\r\n$1\r\na\r\n'), 0), [1, 'a']);
  assert.ok(parseRawReply(Buffer.from('-NOSCRIPT x\r\n'), 0) instanceof ReplyError);
  assert.equal(parseRawReply(Buffer.from('$1x\r\na\r\n'), 0), MALFORMED);
});

async function client(t: TestContext, url = REDIS_URL): Promise<RespClient | undefined> {
  const c = new RespClient(url, { connectTimeoutMs: 1000 });
  c.on('error', () => {});
  t.after(() => c.disconnect());
  try {
    await waitFor(() => c.status === 'ready', 5000);
  } catch (err) {
    if (process.env.RC_REQUIRE_REDIS === '1') throw err;
    t.skip(`no Redis at ${url}`);
    return undefined;
  }
  return c;
}

test('the gates commands, in one pipeline, answered in order', async (t) => {
  const c = await client(t);
  if (!c) return;
  const key = `rc-test-resp:{${process.pid}}:h`;
  const src = 'return {tonumber(ARGV[1]) * 2, KEYS[1], #ARGV[2]}';
  const sha = (await c.script('LOAD', src)) as string;
  assert.match(sha, /^[0-9a-f]{40}$/);
  // A burst sent in one turn: one write, replies matched to commands by their order.
  const burst = Array.from({ length: 200 }, (_, i) => c.evalsha(sha, 1, `k${i}`, String(i), 'é'.repeat(i % 5)));
  const replies = await Promise.all(burst);
  for (const [i, r] of replies.entries()) assert.deepEqual(r, [i * 2, `k${i}`, 2 * (i % 5)]);
  assert.deepEqual(await c.eval(src, 1, 'x', '21', ''), [42, 'x', 0]);
  // An error reply fails its command only.
  const unknown = c.evalsha('0'.repeat(40), 0);
  const after = c.call('PING');
  await assert.rejects(unknown, (e: Error) => e instanceof ReplyError && e.message.startsWith('NOSCRIPT'));
  assert.equal(await after, 'PONG');
  // HGETALL as an object; a value larger than one socket read.
  const big = 'v'.repeat(300_000);
  await c.call('HSET', key, 'a', '1', 'ünï', big);
  assert.deepEqual(await c.hgetall(key), { a: '1', ünï: big });
  assert.deepEqual(await c.hgetall(`${key}:none`), {});
  await c.call('DEL', key);
});

test('a killed connection fails what is in flight, then comes back ready', async (t) => {
  const c = await client(t);
  if (!c) return;
  const admin = await connectRedis(REDIS_URL);
  t.after(() => admin.disconnect());
  const id = await c.call('CLIENT', 'ID');
  const closed = new Promise<void>((resolve) => c.once('close', () => resolve()));
  const blocked = assert.rejects(
    c.call('BLPOP', `rc-test-resp:{${process.pid}}:never`, '5'),
    (e: Error) => !(e instanceof ReplyError),
    'a plain error: it may not have run',
  );
  await admin.client('KILL', 'ID', String(id));
  await blocked;
  await closed;
  await assert.rejects(c.call('PING'), /Redis connection is/);
  await waitFor(() => c.status === 'ready', 5000);
  assert.equal(await c.call('PING'), 'PONG');
  c.disconnect();
  assert.equal(c.status, 'end');
  await assert.rejects(c.call('PING'), /Redis connection is end/);
});

test('AUTH and SELECT come from the URL; a wrong password never gets ready', async (t) => {
  const server = await PrivateRedis.start(t);
  if (!server) return;
  const admin = await connectRedis(server.url);
  await admin.config('SET', 'requirepass', 's3cr:t');
  admin.disconnect();
  const port = new URL(server.url).port;
  const c = await client(t, `redis://:${encodeURIComponent('s3cr:t')}@127.0.0.1:${port}/3`);
  assert.ok(c);
  await c.call('SET', 'where', 'db3');
  assert.equal(await c.call('GET', 'where'), 'db3');
  await c.call('SELECT', '0');
  assert.equal(await c.call('GET', 'where'), null, 'the value went to db 3');

  const wrong = new RespClient(`redis://:nope@127.0.0.1:${port}`, { connectTimeoutMs: 500, retryDelayMs: () => 100 });
  const errors: Error[] = [];
  wrong.on('error', (e: Error) => errors.push(e));
  t.after(() => wrong.disconnect());
  await waitFor(() => errors.length > 0, 5000);
  assert.notEqual(wrong.status, 'ready');
  assert.match(errors[0]!.message, /WRONGPASS|invalid|password/i);
});

test('replies split across reads, on two connections reading at once, arrive whole (reads share one buffer)', async (t) => {
  // A server that answers each command with a reply cut in two writes some milliseconds apart.
  const server = net.createServer((socket) => {
    socket.on('data', (chunk: Buffer) => {
      const text = chunk.toString('latin1');
      const n = text.split('\r\n')[0] === '*1' ? 1 : 0;
      if (n === 0) return;
      const tag = socket.remotePort ?? 0;
      const reply = `*2\r\n$5\r\nhello\r\n:${tag}\r\n`;
      socket.write(reply.slice(0, 9));
      setTimeout(() => socket.write(reply.slice(9)), 20);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as net.AddressInfo;
  const a = await client(t, `redis://127.0.0.1:${port}`);
  const b = await client(t, `redis://127.0.0.1:${port}`);
  if (!a || !b) return;
  const [ra, rb] = await Promise.all([a.call('PING'), b.call('PING')]);
  assert.equal((ra as unknown[])[0], 'hello');
  assert.equal((rb as unknown[])[0], 'hello');
  assert.notEqual((ra as unknown[])[1], (rb as unknown[])[1], 'each connection its own reply');
  a.disconnect();
  b.disconnect();
});

test('replies written a byte at a time arrive whole and in order (a reply split at every byte)', async (t) => {
  // A server that answers each command with the gate script's kind of reply, then an error reply,
  // each byte in a write of its own some time apart: the client reads them in many pieces.
  const outcome = [0, 0, 599, -42, 100, 123_456_789_012_345, -1, 1024];
  const replies = [`*8\r\n${outcome.map((n) => `:${n}\r\n`).join('')}`, '-ERR no\r\n', '$3\r\nabc\r\n'];
  const server = net.createServer((socket) => {
    socket.setNoDelay(true);
    let sent = false;
    socket.on('data', () => {
      if (sent) return;
      sent = true;
      const bytes = Buffer.from(replies.join(''));
      let i = 0;
      const next = (): void => {
        if (i === bytes.length || socket.destroyed) return;
        socket.write(bytes.subarray(i, ++i));
        setTimeout(next, 1);
      };
      next();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as net.AddressInfo;
  const c = await client(t, `redis://127.0.0.1:${port}`);
  if (!c) return;
  const [a, b, d] = [c.call('PING'), c.call('PING'), c.call('PING')];
  assert.deepEqual(await a, outcome);
  await assert.rejects(b, (e: Error) => e instanceof ReplyError && e.message === 'ERR no');
  assert.equal(await d, 'abc');
  assert.equal(c.status, 'ready', 'still in step');
  c.disconnect();
});
