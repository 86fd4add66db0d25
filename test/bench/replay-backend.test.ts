// bench/profile/replay-backend.ts: each flavour's bytes as the backend of a real gateway, for the
// profile's RC_PROFILE_FLAVOUR. The backend answers what the fixtures write; the gateway relays a
// chat stream as those bytes and translates a messages stream to one text_delta with the
// backend's usage, on every flavour.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { createGate } from '../../gateway/gates/index.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { type ReplayBackend, serveFlavour } from '../../bench/profile/replay-backend.js';
import { completionBody, FLAVOURS, streamBody, textPlan } from '../gateway/messages/flavours.js';

const KEY = generateKey();
const backends: ReplayBackend[] = [];
let gw: Gateway;

before(async () => {
  const logger = createLogger('silent');
  for (const f of FLAVOURS) backends.push(await serveFlavour(f));
  gw = await createGateway({
    port: 0,
    logger,
    gate: createGate(
      { modelRpm: 100000, modelTpm: 100_000_000, modelDailyTokens: 100_000_000, redisUrl: '', gateRedisTimeoutMs: 50, gateKeyPrefix: 'replaytest:' },
      { logger },
    ),
    models: FLAVOURS.map((f, i) => modelEntrySchema.parse({ name: f, upstreams: [backends[i]!.url] })),
    keySource: memoryKeySource([{ keyHash: hashKey(KEY), accountId: 1 }]),
    routes: [messagesRoutes({})],
  });
});

after(async () => {
  await gw?.close();
  for (const b of backends) await b.close();
});

const post = (path: string, body: unknown) =>
  fetch(`${gw.url}${path}`, { method: 'POST', headers: { authorization: `Bearer ${KEY}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });

test('the replay backend answers each flavour with its fixture bytes', async () => {
  for (const [i, f] of FLAVOURS.entries()) {
    const url = `${backends[i]!.url}/v1/chat/completions`;
    const stream = await fetch(url, {
      method: 'POST',
      body: JSON.stringify({ stream: true, max_tokens: 3, stream_options: { include_usage: true, continuous_usage_stats: true } }),
    });
    assert.equal(stream.headers.get('content-type'), 'text/event-stream; charset=utf-8');
    assert.equal(await stream.text(), streamBody(f, textPlan(3)), f);
    const whole = await fetch(url, { method: 'POST', body: JSON.stringify({ max_tokens: 4 }) });
    assert.equal(await whole.text(), completionBody(f, textPlan(4, { includeUsage: false, continuousUsage: false })), f);
    assert.equal((await fetch(`${backends[i]!.url}/tokenize`, { method: 'POST', body: '{}' })).status, 404);
  }
});

test('through a gateway: the chat stream relays the bytes; a messages stream is one text_delta with the usage, on every flavour', async () => {
  for (const f of FLAVOURS) {
    const chat = await post('/v1/chat/completions', { model: f, messages: [{ role: 'user', content: 'hi' }], max_tokens: 5, stream: true });
    assert.equal(chat.status, 200);
    // The gateway asked for the usage on the client's behalf: the usage-only event is left out.
    const expected = streamBody(f, textPlan(5, { continuousUsage: false }));
    assert.equal(await chat.text(), expected.replace(/data: \{[^\n]*"choices":\[\],[^\n]*\n\n/, ''), f);

    const res = await post('/v1/messages', { model: f, max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(res.status, 200);
    const out = await res.text();
    assert.equal(out.match(/"text_delta"/g)?.length, 1, `${f}: ${out}`);
    assert.match(out, new RegExp(`"text":${JSON.stringify(textPlan(20).text.join('')).replace(/[?]/g, '\\?')}`), f);
    assert.match(out, /"stop_reason":"max_tokens"/, f);
    assert.match(out, /"usage":\{"input_tokens":21,"output_tokens":20,/, f);
  }
});
