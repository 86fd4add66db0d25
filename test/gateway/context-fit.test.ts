// Issue #28: max tokens fitted into the model's context by default on every protocol
// (gateway/admission/context-fit.ts, gateway/admission/model-call.ts). Coding agents send max_tokens 32,000 to 32k
// models; the backend answered 400 (`32000 > 32768 - 15136`). Now: a prompt that fits gets the
// largest max tokens that fits, a prompt alone too long a 400 naming both numbers in the
// protocol's shape, `fitMaxTokens: false` (or `x-rc-fit-max-tokens: 0`) the backend's own error.
// The common case makes no /tokenize call; a backend whose /tokenize cannot count (404, or a
// malformed 200) is asked once. Real gateway, real sims with a small context.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { post, startFixture, type Fixture } from './fixture.js';

const CONTEXT = 200;
/** A large context for the common case (bound + max tokens fit it: no count). */
const LARGE = 32768;
let fx: Fixture;
/** Backends that cannot count: /tokenize answers 404, or a 200 that is not a count. */
let plain: Server;
let odd: Server;
const hits = {
  plain: { tokenize: 0, completions: 0, lastMaxTokens: undefined as unknown },
  odd: { tokenize: 0, completions: 0, lastMaxTokens: undefined as unknown },
};

const COMPLETION =
  '{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}';

async function backend(h: (typeof hits)['plain'], tokenize: [number, string]): Promise<Server> {
  const s = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d));
    req.on('end', () => {
      if (req.method === 'GET') {
        // No /v1/models (the gateway asks it once for the context): FastAPI's 404.
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"Not Found"}');
        return;
      }
      if (req.url === '/tokenize') {
        h.tokenize++;
        res.writeHead(tokenize[0], { 'content-type': 'application/json' }).end(tokenize[1]);
        return;
      }
      h.completions++;
      h.lastMaxTokens = (JSON.parse(body) as { max_tokens?: number }).max_tokens;
      res.writeHead(200, { 'content-type': 'application/json' }).end(COMPLETION);
    });
  });
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return s;
}
const urlOf = (s: Server) => `http://127.0.0.1:${(s.address() as AddressInfo).port}`;

before(async () => {
  plain = await backend(hits.plain, [404, '{"detail":"Not Found"}']);
  odd = await backend(hits.odd, [200, '<html>a proxy page</html>']);
  fx = await startFixture({
    sims: [
      { fast: true, maxModelLen: CONTEXT },
      { fast: true, maxModelLen: CONTEXT },
      { fast: true, maxModelLen: LARGE },
    ],
    models: (sims) => [
      modelEntrySchema.parse({ name: 'm', upstreams: [sims[0]!.url] }),
      modelEntrySchema.parse({ name: 'unfitted', upstreams: [sims[1]!.url], servedName: 'm', fitMaxTokens: false }),
      modelEntrySchema.parse({ name: 'large', upstreams: [sims[2]!.url], servedName: 'm', maxContext: LARGE }),
      modelEntrySchema.parse({ name: 'plain', upstreams: [urlOf(plain)], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'odd', upstreams: [urlOf(odd)], servedName: 'm' }),
    ],
    routes: [messagesRoutes()],
  });
});
after(async () => {
  await fx?.close();
  await new Promise((r) => plain?.close(r));
  await new Promise((r) => odd?.close(r));
});

const text = (words: number) => Array.from({ length: words }, (_, i) => `w${i}`).join(' ');
const msgs = (words: number) => [{ role: 'user' as const, content: text(words) }];

type Protocol = 'chat' | 'messages' | 'responses';
const PROTOCOLS: Protocol[] = ['chat', 'messages', 'responses'];

/** A request of `words` words asking for `max` output tokens on `protocol`. */
function send(protocol: Protocol, model: string, words: number, max: number, headers: Record<string, string> = {}) {
  const g = fx.gateway.url;
  if (protocol === 'chat')
    return post(`${g}/v1/chat/completions`, JSON.stringify({ model, max_tokens: max, messages: msgs(words) }), {
      authorization: `Bearer ${fx.key}`,
      ...headers,
    });
  if (protocol === 'messages')
    return post(`${g}/v1/messages`, JSON.stringify({ model, max_tokens: max, messages: msgs(words) }), {
      'x-api-key': fx.key,
      'anthropic-version': '2023-06-01',
      ...headers,
    });
  return post(`${g}/v1/responses`, JSON.stringify({ model, max_output_tokens: max, input: text(words) }), { authorization: `Bearer ${fx.key}`, ...headers });
}

/** The max tokens the sim received (a responses request keeps its own field name). */
const forwardedMax = (simIndex: number, protocol: Protocol) =>
  fx.sims[simIndex]!.stats.lastBody![protocol === 'responses' ? 'max_output_tokens' : 'max_tokens'];

for (const protocol of PROTOCOLS) {
  test(`${protocol}: a prompt that fits with max tokens that do not gets the largest max tokens that fits`, async () => {
    const n = countChatTokens(msgs(10)); // a string input is one user message, as on chat
    const r = await send(protocol, 'm', 10, 1000);
    assert.equal(r.status, 200, r.text);
    assert.equal(forwardedMax(0, protocol), CONTEXT - n);
    // Asking for less than fits: forwarded untouched.
    const small = await send(protocol, 'm', 10, 7);
    assert.equal(small.status, 200, small.text);
    assert.equal(forwardedMax(0, protocol), 7);
  });

  test(`${protocol}: a prompt alone too long is a 400 naming both numbers, in the protocol's shape`, async () => {
    const n = countChatTokens(msgs(CONTEXT));
    const before = fx.sims[0]!.stats.requests;
    const r = await send(protocol, 'm', CONTEXT, 10);
    assert.equal(r.status, 400, r.text);
    const message = `prompt is too long: ${n} tokens > ${CONTEXT - 1} maximum`;
    if (protocol === 'messages') assert.deepEqual(r.json, { type: 'error', error: { type: 'invalid_request_error', message } });
    else
      assert.deepEqual(r.json, {
        error: { message, type: 'invalid_request_error', param: protocol === 'chat' ? 'messages' : 'input', code: 'context_length_exceeded' },
      });
    assert.equal(fx.sims[0]!.stats.requests, before, 'no completion reached the backend');
  });

  test(`${protocol}: catalog fitMaxTokens false, or x-rc-fit-max-tokens: 0, passes the backend's own error`, async () => {
    const tokenize = fx.sims[1]!.stats.tokenizeRequests;
    const r = await send(protocol, 'unfitted', 10, 1000);
    assert.equal(r.status, 400, r.text);
    // The backend's own words; on messages the protocol's words for them (backends/context-overflow.ts).
    const words = protocol === 'messages' ? /input length and `max_tokens` exceed context limit: \d+ \+ 1000 > 200,/ : /is too large: 1000/;
    assert.match(r.text, words);
    const off = await send(protocol, 'm', 10, 1000, { 'x-rc-fit-max-tokens': '0' });
    assert.equal(off.status, 400, off.text);
    assert.match(off.text, words);
    assert.equal(fx.sims[1]!.stats.tokenizeRequests, tokenize, 'nothing was counted');
  });

  test(`${protocol}: the common case (bytes bound + max tokens within the context) makes no /tokenize call`, async () => {
    const sim = fx.sims[2]!;
    const before = sim.stats.tokenizeRequests;
    for (let i = 0; i < 3; i++) {
      const r = await send(protocol, 'large', 50, 4000);
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(sim.stats.tokenizeRequests, before);
    assert.equal(forwardedMax(2, protocol), 4000);
  });
}

test('an agent-like request (max_tokens 32000, a prompt of a few thousand tokens, a 32k model) is fitted, not refused', async () => {
  const sim = fx.sims[2]!;
  const r = await send('chat', 'large', 3000, 32000);
  assert.equal(r.status, 200, r.text);
  assert.equal(sim.stats.lastBody!.max_tokens, LARGE - r.json.usage.prompt_tokens);
});

test('a backend without /tokenize (404) or with a malformed 200: forwarded as it is, and asked once', async () => {
  for (const [name, h] of [
    ['plain', hits.plain],
    ['odd', hits.odd],
  ] as const) {
    for (let i = 0; i < 3; i++) {
      const r = await post(`${fx.gateway.url}/v1/chat/completions`, JSON.stringify({ model: name, max_tokens: 100_000, messages: msgs(10) }), {
        authorization: `Bearer ${fx.key}`,
      });
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(h.completions, 3);
    assert.equal(h.lastMaxTokens, 100_000, 'the backend judges');
    assert.equal(h.tokenize, 1, `${name}: /tokenize asked once`);
  }
});

test('responses: instructions, message items and a function call are counted as the backend renders them', async () => {
  const input = [
    { role: 'user', content: [{ type: 'input_text', text: 'What is the weather?' }] },
    { type: 'function_call', call_id: 'c1', name: 'weather', arguments: '{"city":"Paris"}' },
    { type: 'function_call_output', call_id: 'c1', output: 'sunny' },
  ];
  const tools = [
    { type: 'function', name: 'weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
  ];
  const r = await post(`${fx.gateway.url}/v1/responses`, JSON.stringify({ model: 'm', instructions: 'Be brief.', input, tools, max_output_tokens: 1000 }), {
    authorization: `Bearer ${fx.key}`,
  });
  assert.equal(r.status, 200, r.text);
  const n = countChatTokens(
    [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'What is the weather?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'sunny' },
    ],
    [{ type: 'function', function: { name: 'weather', description: 'Weather of a city', parameters: tools[0]!.parameters } }],
  );
  assert.equal(r.json.usage.input_tokens, n);
  assert.equal(fx.sims[0]!.stats.lastBody!.max_output_tokens, CONTEXT - n);
});
