// Issue 44: streams on the shared model routes are bounded per account and per client address
// (gateway/request/held-streams.ts). Past a bound the stream is refused with 429
// stream_limit_exceeded in the route's shape, Retry-After and a message naming the limit; another
// account (or address) is still served, and every place is given back however its stream ends
// (the backend's end, the backend breaking off, the client going away).
import assert from 'node:assert/strict';
import { test, type TestContext } from 'node:test';
import { MemoryBus } from '../../lib/bus.js';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import type { StreamLimitSettings } from '../../gateway/request/held-streams.js';
import { heldBackend, openRequest, type HeldBackend, type OpenRequest } from '../held-streams.js';
import { waitFor } from '../helpers.js';

interface Setup {
  gateway: Gateway;
  backend: HeldBackend;
  keyA: string;
  keyB: string;
}

async function setup(t: TestContext, streams: Partial<StreamLimitSettings>, o: { trustProxy?: boolean } = {}): Promise<Setup> {
  const logger = createLogger('silent');
  const backend = await heldBackend();
  const keyA = generateKey();
  const keyB = generateKey();
  const bus = new MemoryBus();
  const gateway = await createGateway({
    port: 0,
    // maxContext given and fitting off: no call to the backend but the model call itself.
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [backend.url], maxContext: 100_000, fitMaxTokens: false })],
    keySource: memoryKeySource([
      { keyHash: hashKey(keyA), accountId: 1 },
      { keyHash: hashKey(keyB), accountId: 2 },
    ]),
    bus,
    logger,
    limits: { streams: { perAccount: 100, perAddress: 100, ...streams } },
    routes: [messagesRoutes()],
    trustProxy: o.trustProxy,
  });
  t.after(async () => {
    await gateway.close();
    await backend.close();
    await bus.close();
  });
  return { gateway, backend, keyA, keyB };
}

const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, stream: true };
const MESSAGES = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, stream: true };
const RESPONSES = { model: 'm', input: 'hi', max_output_tokens: 5, stream: true };
const auth = (key: string) => ({ authorization: `Bearer ${key}` });

function chatStream(gw: Gateway, key: string, localAddress?: string): Promise<OpenRequest> {
  return openRequest(`${gw.url}/v1/chat/completions`, CHAT, auth(key), localAddress);
}

test('streams per account: past the bound 429 stream_limit_exceeded on every route, another account served; each end gives its place back', async (t) => {
  const { gateway, backend, keyA, keyB } = await setup(t, { perAccount: 3 });
  const streams = gateway.context.streams;
  // Three streams of account 1, one per route: held open by the backend.
  const held = [
    await chatStream(gateway, keyA),
    await openRequest(`${gateway.url}/v1/messages`, MESSAGES, { 'x-api-key': keyA, 'anthropic-version': '2023-06-01' }),
    await openRequest(`${gateway.url}/v1/responses`, RESPONSES, auth(keyA)),
  ];
  t.after(() => {
    for (const h of held) h.abort();
  });
  for (const h of held) assert.equal(h.status, 200, h.text);
  assert.equal(backend.held.length, 3);
  assert.deepEqual(streams.held(), { accounts: 1, addresses: 0, instances: 0, total: 3 }); // 3 streams: far below half the address bound

  // A fourth, on each route: refused in the route's shape, the limit named.
  const message = 'Too many streams for this account: at most 3 (RC_GATEWAY_STREAMS_PER_ACCOUNT); wait for one to end';
  const chat = await chatStream(gateway, keyA);
  assert.equal(chat.status, 429);
  assert.equal(chat.headers['retry-after'], '5');
  assert.equal(chat.headers['x-rc-limit'], message);
  assert.deepEqual(JSON.parse(chat.text), { error: { message, type: 'rate_limit_error', param: null, code: 'stream_limit_exceeded' } });
  const messages = await openRequest(`${gateway.url}/v1/messages`, MESSAGES, { 'x-api-key': keyA, 'anthropic-version': '2023-06-01' });
  assert.equal(messages.status, 429);
  assert.equal(messages.headers['retry-after'], '5');
  assert.deepEqual(JSON.parse(messages.text), { type: 'error', error: { type: 'rate_limit_error', message } });
  const responses = await openRequest(`${gateway.url}/v1/responses`, RESPONSES, auth(keyA));
  assert.equal(responses.status, 429);
  assert.equal(JSON.parse(responses.text).error.code, 'stream_limit_exceeded');
  // Nothing refused reached the backend, and nothing refused holds a place.
  assert.equal(backend.held.length, 3);
  assert.equal(streams.held().total, 3);

  // A non-stream request of the same account is not a stream: answered.
  const whole = await openRequest(`${gateway.url}/v1/chat/completions`, { ...CHAT, stream: false }, auth(keyA));
  await waitFor(() => whole.ended);
  assert.equal(whole.status, 200);
  // Another account streams meanwhile.
  const other = await chatStream(gateway, keyB);
  assert.equal(other.status, 200);
  assert.match(other.text, /"content":"first"/);
  other.abort();
  await waitFor(() => streams.held().total === 3);

  // The backend ends one normally: its place is free, and account 1 streams again.
  backend.endOne();
  await waitFor(() => streams.held().total === 2);
  const again = await chatStream(gateway, keyA);
  assert.equal(again.status, 200);
  held.push(again);
  assert.equal(streams.held().total, 3);
  // The backend breaks one off mid-stream: freed.
  backend.breakOne();
  await waitFor(() => streams.held().total === 2);
  // The clients go away: freed, and the backend's requests are cancelled.
  for (const h of held) h.abort();
  await waitFor(() => streams.held().total === 0);
  assert.deepEqual(streams.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
  await waitFor(() => backend.held.length === 0);
});

test('streams per address: past the bound the address is refused whatever the account, another address is served; addresses read only past half the bound', async (t) => {
  const { gateway, keyA, keyB } = await setup(t, { perAddress: 4 });
  const streams = gateway.context.streams;
  // The first two (half the bound) are not counted per address: no address is read.
  const held = [await chatStream(gateway, keyA), await chatStream(gateway, keyB)];
  t.after(() => {
    for (const h of held) h.abort();
  });
  assert.deepEqual(streams.held(), { accounts: 2, addresses: 0, instances: 0, total: 2 });
  // From then on the address is counted, and may open the other half.
  held.push(await chatStream(gateway, keyA), await chatStream(gateway, keyB));
  for (const h of held) assert.equal(h.status, 200);
  assert.deepEqual(streams.held(), { accounts: 2, addresses: 1, instances: 0, total: 4 });
  const refused = await chatStream(gateway, keyB);
  assert.equal(refused.status, 429);
  assert.equal(JSON.parse(refused.text).error.message, 'Too many streams from this address: at most 4 (RC_GATEWAY_STREAMS_PER_ADDRESS); wait for one to end');
  // Another address (loopback 127.0.0.2), same accounts: served.
  const elsewhere = await chatStream(gateway, keyA, '127.0.0.2');
  assert.equal(elsewhere.status, 200);
  held.push(elsewhere);
  assert.deepEqual(streams.held(), { accounts: 2, addresses: 2, instances: 0, total: 5 });
  for (const h of held) h.abort();
  await waitFor(() => streams.held().total === 0);
  assert.deepEqual(streams.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
});

test('behind a reverse proxy (RC_TRUST_PROXY): clients are counted by the last X-Forwarded-For entry, not as the proxy; without it, everyone through the proxy is one address', async (t) => {
  const PAST_PROXY = 'Too many streams from this address: at most 2 (RC_GATEWAY_STREAMS_PER_ADDRESS); wait for one to end';
  for (const trustProxy of [true, false]) {
    const { gateway, keyA } = await setup(t, { perAddress: 2 }, { trustProxy });
    // Every request comes from 127.0.0.1, the proxy; the proxy appended the client's address.
    const via = (xff: string) => openRequest(`${gateway.url}/v1/chat/completions`, CHAT, { ...auth(keyA), 'x-forwarded-for': xff });
    const held = [await via('198.51.100.1'), await via('203.0.113.9, 198.51.100.1')];
    t.after(() => {
      for (const h of held) h.abort();
    });
    for (const h of held) assert.equal(h.status, 200);
    // Another client through the same proxy: its own bound when trusted, the proxy's (full) when not.
    const other = await via('198.51.100.2');
    held.push(other);
    if (!trustProxy) {
      assert.equal(other.status, 429);
      assert.equal(JSON.parse(other.text).error.message, PAST_PROXY);
      continue;
    }
    assert.equal(other.status, 200);
    // The first client again, whatever it wrote before the proxy's entry: refused.
    const again = await via('198.51.100.77, 198.51.100.1');
    held.push(again);
    assert.equal(again.status, 429);
    assert.equal(JSON.parse(again.text).error.message, PAST_PROXY);
  }
});

test('a stream refused before it holds a place (bad max_tokens, unknown model) takes none; a stream whose backend is down gives its place back', async (t) => {
  const { gateway, backend, keyA } = await setup(t, { perAccount: 1 });
  const streams = gateway.context.streams;
  const bad = await openRequest(`${gateway.url}/v1/chat/completions`, { ...CHAT, max_tokens: 0 }, auth(keyA));
  assert.equal(bad.status, 400);
  const unknown = await openRequest(`${gateway.url}/v1/chat/completions`, { ...CHAT, model: 'nope' }, auth(keyA));
  assert.equal(unknown.status, 400);
  assert.equal(streams.held().total, 0);
  // The backend gone: 502, and the place is free again.
  await backend.close();
  const down = await chatStream(gateway, keyA);
  await waitFor(() => down.ended);
  assert.equal(down.status, 502);
  await waitFor(() => streams.held().total === 0);
});

test('per process: two gateway replicas each hold their own bound (README "Limits and replicas")', async (t) => {
  const one = await setup(t, { perAccount: 1 });
  const two = await setup(t, { perAccount: 1 });
  const held = [await chatStream(one.gateway, one.keyA)];
  t.after(() => {
    for (const h of held) h.abort();
  });
  assert.equal(held[0]!.status, 200);
  assert.equal((await chatStream(one.gateway, one.keyA)).status, 429);
  // The same account (id 1) on the other replica: its own count.
  held.push(await chatStream(two.gateway, two.keyA));
  assert.equal(held[1]!.status, 200);
  assert.equal((await chatStream(two.gateway, two.keyA)).status, 429);
  for (const h of held) h.abort();
  await waitFor(() => one.gateway.context.streams.held().total === 0 && two.gateway.context.streams.held().total === 0);
});
