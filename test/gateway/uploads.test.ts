// Issue 44: request bodies in flight are bounded per client address and per account
// (lib/upload-limits.ts). Clients that declare large bodies and withhold the last byte hit the
// limit (429 upload_limit_exceeded with Retry-After, in the route's shape), what they held is freed
// when they go, and another client (another account, or another address) is still answered.
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { MemoryBus } from '../../lib/bus.js';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { DEFAULT_UPLOAD_LIMITS, type UploadLimitSettings } from '../../lib/upload-limits.js';
import { startSim } from '../../sim/server.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { waitFor } from '../helpers.js';

async function gatewayWith(t: TestContext, uploads: Partial<UploadLimitSettings>): Promise<{ gateway: Gateway; keyA: string; keyB: string }> {
  const logger = createLogger('silent');
  const sim = await startSim({ model: 'm', logger, fast: true });
  const keyA = generateKey();
  const keyB = generateKey();
  const bus = new MemoryBus();
  const gateway = await createGateway({
    port: 0,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url] })],
    keySource: memoryKeySource([
      { keyHash: hashKey(keyA), accountId: 1 },
      { keyHash: hashKey(keyB), accountId: 2 },
    ]),
    bus,
    logger,
    limits: { uploads: { ...DEFAULT_UPLOAD_LIMITS, ...uploads } },
    routes: [messagesRoutes()],
  });
  t.after(async () => {
    await gateway.close();
    await sim.close();
    await bus.close();
  });
  return { gateway, keyA, keyB };
}

/** A chat body of exactly `size` bytes (padded with an unused field). */
function chatBody(size: number): Buffer {
  const head = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"pad":"';
  return Buffer.from(head + 'x'.repeat(size - head.length - 2) + '"}');
}

interface Upload {
  socket: Socket;
  /** Everything the gateway answered so far. */
  reply: string;
  closed: boolean;
  rest: Buffer;
}

/** Sends the head and all but the last `withhold` bytes of `body`, from `localAddress`. */
function startUpload(url: string, path: string, key: string, body: Buffer, withhold: number, localAddress = '127.0.0.1'): Upload {
  const { hostname, port } = new URL(url);
  const socket = connect({ host: hostname, port: Number(port), localAddress });
  const u: Upload = { socket, reply: '', closed: false, rest: body.subarray(body.length - withhold) };
  socket.on('connect', () => {
    socket.write(
      `POST ${path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nx-api-key: ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    );
    socket.write(body.subarray(0, body.length - withhold));
  });
  socket.on('data', (d: Buffer) => (u.reply += d.toString('latin1')));
  socket.on('close', () => (u.closed = true));
  socket.on('error', () => {});
  return u;
}

const status = (reply: string): number => Number(/^HTTP\/1\.1 (\d{3})/.exec(reply)?.[1] ?? 0);
const bodyOf = (reply: string): unknown => JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4));
const hasBody = (reply: string): boolean => {
  const end = reply.indexOf('\r\n\r\n');
  const len = /content-length: (\d+)/i.exec(reply);
  return end >= 0 && len !== null && reply.length >= end + 4 + Number(len[1]);
};

async function chat(url: string, key: string, localAddress = '127.0.0.1'): Promise<number> {
  const u = startUpload(url, '/v1/chat/completions', key, chatBody(200), 0, localAddress);
  await waitFor(() => hasBody(u.reply) || u.closed);
  u.socket.destroy();
  return status(u.reply);
}

test('bytes in flight per account: withheld last bytes hit the limit, another account is answered', async (t) => {
  const MiB = 1024 * 1024;
  const { gateway, keyA, keyB } = await gatewayWith(t, { bytesPerAccount: 2 * MiB });
  // 8 uploads of 1 MiB, each withholding its last byte: at most 2 fit in 2 MiB.
  const uploads = Array.from({ length: 8 }, () => startUpload(gateway.url, '/v1/chat/completions', keyA, chatBody(MiB), 1));
  t.after(() => {
    for (const u of uploads) u.socket.destroy();
  });
  await waitFor(() => uploads.filter((u) => hasBody(u.reply)).length >= 6, 30_000);
  const refused = uploads.filter((u) => hasBody(u.reply));
  for (const u of refused) {
    assert.equal(status(u.reply), 429);
    assert.match(u.reply, /\r\nretry-after: 5\r\n/i);
    assert.match(
      u.reply,
      /\r\nx-rc-limit: Too many request body bytes in flight for this account: at most 2097152 \(RC_GATEWAY_UPLOAD_BYTES_PER_ACCOUNT\)\r\n/i,
    );
    assert.deepEqual((bodyOf(u.reply) as { error: { code: string; type: string } }).error.code, 'upload_limit_exceeded');
    assert.deepEqual((bodyOf(u.reply) as { error: { code: string; type: string } }).error.type, 'rate_limit_error');
  }
  await waitFor(() => refused.every((u) => u.closed), 10_000); // closed: the rest of their bodies is never read
  // While the account's uploads hold its budget, another account (same address) is answered.
  assert.equal(await chat(gateway.url, keyB), 200);
  // The uploads still held complete when their last byte comes.
  const held = uploads.filter((u) => !hasBody(u.reply));
  assert.ok(held.length <= 2, `${held.length} held`);
  for (const u of held) u.socket.write(u.rest);
  await waitFor(() => held.every((u) => hasBody(u.reply)), 30_000);
  for (const u of held) assert.equal(status(u.reply), 200);
  // Whole: the account's budget is free again.
  assert.equal(await chat(gateway.url, keyA), 200);
});

test('uploads in flight per address: slow bodies hit the limit, another address is answered; a client that goes frees its place', async (t) => {
  const { gateway, keyA } = await gatewayWith(t, { uploadsPerAddress: 4 });
  // Bodies that send 1 KiB of a declared 64 KiB and stop.
  const body = chatBody(64 * 1024);
  const uploads = Array.from({ length: 6 }, () => startUpload(gateway.url, '/v1/chat/completions', keyA, body.subarray(0), body.length - 1024));
  t.after(() => {
    for (const u of uploads) u.socket.destroy();
  });
  await waitFor(() => uploads.filter((u) => hasBody(u.reply)).length >= 2, 30_000);
  const refused = uploads.filter((u) => hasBody(u.reply));
  assert.equal(refused.length, 2);
  for (const u of refused) {
    assert.equal(status(u.reply), 429);
    assert.match(u.reply, /x-rc-limit: Too many uploads in flight from this address: at most 4 \(RC_GATEWAY_UPLOADS_PER_ADDRESS\)/i);
  }
  // Another address (loopback 127.0.0.2), same account: answered.
  assert.equal(await chat(gateway.url, keyA, '127.0.0.2'), 200);
  // A slow body from this address now is refused too, in the messages shape on /v1/messages ...
  const messages = startUpload(gateway.url, '/v1/messages', keyA, body, body.length - 1024);
  await waitFor(() => hasBody(messages.reply), 30_000);
  assert.equal(status(messages.reply), 429);
  assert.match(messages.reply, /\r\nretry-after: 5\r\n/i);
  assert.equal((bodyOf(messages.reply) as { type: string; error: { type: string } }).error.type, 'rate_limit_error');
  messages.socket.destroy();
  // ... until the slow clients go: what they held is freed with their connections.
  for (const u of uploads) u.socket.destroy();
  await waitFor(async () => {
    const u = startUpload(gateway.url, '/v1/chat/completions', keyA, body, body.length - 1024);
    await new Promise((r) => setTimeout(r, 50));
    const free = !hasBody(u.reply);
    if (free) u.socket.write(u.rest);
    await waitFor(() => hasBody(u.reply), 30_000);
    u.socket.destroy();
    return free && status(u.reply) === 200;
  }, 30_000);
});
