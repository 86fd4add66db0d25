// Issue 44 on the dedicated endpoints (gateway/dedicated/relay.ts): requests in flight are bounded
// per instance, per account and per client address (RC_DEDICATED_INFLIGHT_*), and request bodies
// still arriving count against the gateway's upload limits with the instance's own on top
// (RC_DEDICATED_UPLOADS_PER_INSTANCE, RC_DEDICATED_UPLOAD_BYTES_PER_INSTANCE). Past a bound: 429
// `{detail}` naming it, with Retry-After; the other tenant is served; every place and every byte
// is given back however the request ends.
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { heldBackend, openRequest, type HeldBackend, type OpenRequest } from '../held-streams.js';
import { waitFor } from '../helpers.js';
import { answered, detailOf, type SlowUpload, slowUpload, statusOf } from './slow-upload.js';
import { hostPort, OTHER, startGatewayFixture, type GatewayFixture } from './fixture.js';

const STREAM = { model: 'served', messages: [{ role: 'user', content: 'hi' }], stream: true };

async function setup(t: TestContext, o: Parameters<typeof startGatewayFixture>[1]): Promise<{ f: GatewayFixture; backend: HeldBackend }> {
  const f = await startGatewayFixture(t, o);
  const backend = await heldBackend();
  t.after(() => backend.close());
  // Two instances of the owner and one of the other account, all on the held backend.
  f.addRoute('i_a', hostPort(backend.url));
  f.addRoute('i_b', hostPort(backend.url));
  f.addRoute('i_other', hostPort(backend.url), { accountId: OTHER });
  return { f, backend };
}

function stream(f: GatewayFixture, instance: string, key: string, localAddress?: string): Promise<OpenRequest> {
  return openRequest(`${f.gateway.url}/dedicated/${instance}/8000/v1/chat/completions`, STREAM, { authorization: `Bearer ${key}` }, localAddress);
}

function refusedWith(r: OpenRequest, detail: string): void {
  assert.equal(r.status, 429, r.text);
  assert.equal(r.headers['retry-after'], '5');
  assert.deepEqual(JSON.parse(r.text), { detail });
}

test("requests in flight per instance: past the bound 429, the owner's other instance and the other account served; every end frees its place", async (t) => {
  const { f, backend } = await setup(t, { inflight: { perInstance: 2 } });
  const inflight = f.dedicated.inflight;
  const held = [await stream(f, 'i_a', f.ownerKey), await stream(f, 'i_a', f.ownerKey)];
  t.after(() => {
    for (const h of held) h.abort();
  });
  for (const h of held) assert.equal(h.status, 200);
  refusedWith(
    await stream(f, 'i_a', f.ownerKey),
    'Too many requests in flight for this instance: at most 2 (RC_DEDICATED_INFLIGHT_PER_INSTANCE); wait for one to end',
  );
  assert.equal(backend.held.length, 2); // the refused one never reached the instance
  held.push(await stream(f, 'i_b', f.ownerKey), await stream(f, 'i_other', f.otherKey));
  assert.equal(held[2]!.status, 200);
  assert.equal(held[3]!.status, 200);
  assert.deepEqual(inflight.held(), { accounts: 2, addresses: 1, instances: 3, total: 4 });
  // The instance ends one, breaks one off, and the clients of the others go away.
  backend.endOne();
  await waitFor(() => inflight.held().total === 3);
  backend.breakOne();
  await waitFor(() => inflight.held().total === 2);
  for (const h of held) h.abort();
  await waitFor(() => inflight.held().total === 0);
  assert.deepEqual(inflight.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
  // Free again: i_a takes a stream.
  const again = await stream(f, 'i_a', f.ownerKey);
  assert.equal(again.status, 200);
  again.abort();
  await waitFor(() => inflight.held().total === 0);
});

test('requests in flight per account and per address', async (t) => {
  const { f } = await setup(t, { inflight: { perAccount: 2, perAddress: 3 } });
  const inflight = f.dedicated.inflight;
  const held = [await stream(f, 'i_a', f.ownerKey), await stream(f, 'i_b', f.ownerKey)];
  t.after(() => {
    for (const h of held) h.abort();
  });
  refusedWith(
    await stream(f, 'i_b', f.ownerKey),
    'Too many requests in flight for this account: at most 2 (RC_DEDICATED_INFLIGHT_PER_ACCOUNT); wait for one to end',
  );
  held.push(await stream(f, 'i_other', f.otherKey));
  assert.equal(held[2]!.status, 200);
  // The address holds 3: the other account's next one from it is refused, from another address served.
  refusedWith(
    await stream(f, 'i_other', f.otherKey),
    'Too many requests in flight from this address: at most 3 (RC_DEDICATED_INFLIGHT_PER_ADDRESS); wait for one to end',
  );
  const elsewhere = await stream(f, 'i_other', f.otherKey, '127.0.0.2');
  assert.equal(elsewhere.status, 200);
  held.push(elsewhere);
  for (const h of held) h.abort();
  await waitFor(() => inflight.held().total === 0);
});

/** POSTs `size` bytes of JSON to a dedicated endpoint, all but the last `withhold`. */
function startUpload(f: GatewayFixture, instance: string, key: string, size: number, withhold: number): SlowUpload {
  const head = '{"model":"served","messages":[{"role":"user","content":"hi"}],"pad":"';
  const body = Buffer.from(head + 'x'.repeat(size - head.length - 2) + '"}');
  const { hostname, port } = new URL(f.gateway.url);
  return slowUpload(
    hostname,
    Number(port),
    `POST /dedicated/${instance}/8000/v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n`,
    body,
    withhold,
  );
}

test("uploads per instance: slow bodies past the bound 429 and closed, the owner's other instance served; a client that goes frees its place", async (t) => {
  const { f } = await setup(t, { uploads: { uploadsPerInstance: 2 } });
  const uploads = f.gateway.context.uploads;
  const slow = Array.from({ length: 4 }, () => startUpload(f, 'i_a', f.ownerKey, 64 * 1024, 60 * 1024));
  t.after(() => {
    for (const u of slow) u.socket.destroy();
  });
  await waitFor(() => slow.filter(answered).length >= 2, 30_000);
  const refused = slow.filter(answered);
  assert.equal(refused.length, 2);
  const message = 'Too many uploads in flight for this instance: at most 2 (RC_DEDICATED_UPLOADS_PER_INSTANCE)';
  for (const u of refused) {
    assert.equal(statusOf(u), 429);
    assert.match(u.reply, /\r\nretry-after: 5\r\n/i);
    assert.ok(u.reply.toLowerCase().includes(`\r\nx-rc-limit: ${message.toLowerCase()}\r\n`), u.reply);
    assert.equal(detailOf(u), message);
  }
  await waitFor(() => refused.every((u) => u.closed), 10_000); // the rest of their bodies is never read
  await waitFor(() => uploads.held().bytes === 2 * 4 * 1024); // the two held have all they were sent
  assert.deepEqual(uploads.held(), { addresses: 1, accounts: 1, instances: 1, uploads: 2, bytes: 2 * 4 * 1024 });
  // The owner's other instance takes an upload meanwhile, and it completes.
  const other = startUpload(f, 'i_b', f.ownerKey, 64 * 1024, 60 * 1024);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(answered(other), false);
  other.socket.write(other.rest);
  await waitFor(() => answered(other), 30_000);
  assert.equal(statusOf(other), 200);
  other.socket.destroy();
  // The held ones go away: nothing is held any more.
  for (const u of slow) u.socket.destroy();
  await waitFor(() => uploads.held().uploads === 0);
  assert.deepEqual(uploads.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
  assert.equal(f.dedicated.inflight.held().total, 0);
});

test("upload bytes per instance, and the gateway's per-account upload limit on dedicated endpoints", async (t) => {
  const MiB = 1024 * 1024;
  const { f } = await setup(t, { uploads: { bytesPerInstance: 2 * MiB, uploadsPerAccount: 5 } });
  const uploads = f.gateway.context.uploads;
  // 1 MiB bodies withholding their last byte: two fit the instance's 2 MiB.
  const big = Array.from({ length: 4 }, () => startUpload(f, 'i_a', f.ownerKey, MiB, 1));
  t.after(() => {
    for (const u of big) u.socket.destroy();
  });
  await waitFor(() => big.filter(answered).length >= 2, 30_000);
  for (const u of big.filter(answered)) {
    assert.equal(statusOf(u), 429);
    assert.equal(detailOf(u), 'Too many request body bytes in flight for this instance: at most 2097152 (RC_DEDICATED_UPLOAD_BYTES_PER_INSTANCE)');
  }
  // The account holds 2 of its 5: three slow bodies to i_b, and the last one is refused for the account.
  const small = Array.from({ length: 4 }, () => startUpload(f, 'i_b', f.ownerKey, 64 * 1024, 60 * 1024));
  t.after(() => {
    for (const u of small) u.socket.destroy();
  });
  await waitFor(() => small.filter(answered).length >= 1, 30_000);
  const refused = small.filter(answered);
  assert.equal(refused.length, 1);
  assert.equal(detailOf(refused[0]!), 'Too many uploads in flight for this account: at most 5 (RC_GATEWAY_UPLOADS_PER_ACCOUNT)');
  // The held ones complete when their last bytes come, and the instance answers them.
  const held = [...big, ...small].filter((u) => !answered(u));
  assert.equal(held.length, 5);
  for (const u of held) u.socket.write(u.rest);
  await waitFor(() => held.every(answered), 30_000);
  for (const u of held) assert.equal(statusOf(u), 200);
  await waitFor(() => uploads.held().uploads === 0 && f.dedicated.inflight.held().total === 0);
  assert.deepEqual(uploads.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
});
