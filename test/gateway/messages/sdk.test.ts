// The messages routes end to end: the official @anthropic-ai/sdk client, unmodified, against a
// real gateway (uWS) in front of real simulated vLLM backends, with the real in-memory gates.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { createServer, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { modelEntrySchema } from '../../../lib/config.js';
import { generateKey, hashKey } from '../../../lib/keys.js';
import { createLogger } from '../../../lib/log.js';
import { createGate, type LimitGate } from '../../../gateway/gates/index.js';
import { memoryKeySource } from '../../../gateway/auth/keys.js';
import { createGateway, type Gateway } from '../../../gateway/server.js';
import { messagesRoutes } from '../../../gateway/messages/routes.js';
import { startSim, type SimServer } from '../../../sim/server.js';
import { waitFor } from '../../helpers.js';

const KEY = generateKey();
const LIMITED_KEY = generateKey();
let chatSim: SimServer;
let reasonSim: SimServer;
let noTokenize: HttpServer;
let gw: Gateway;
let gate: LimitGate;
let client: Anthropic;

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'Current weather for a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};

before(async () => {
  const logger = createLogger('silent');
  chatSim = await startSim({ model: 'served-chat', fast: true, logger });
  reasonSim = await startSim({ model: 'sim-reasoner', reasoning: true, fast: true, logger });
  // A backend without /tokenize: everything is 404.
  noTokenize = createServer((req, res) => {
    req.resume();
    res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"Not Found"}');
  });
  await new Promise<void>((r) => noTokenize.listen(0, '127.0.0.1', r));
  const plainUrl = `http://127.0.0.1:${(noTokenize.address() as AddressInfo).port}`;
  gate = createGate(
    { modelRpm: 1000, modelTpm: 10_000_000, modelDailyTokens: 100_000_000, redisUrl: '', gateRedisTimeoutMs: 50, gateKeyPrefix: 'msgtest:' },
    { logger },
  );
  (gate as unknown as { limits: { set(id: number, o: unknown): void } }).limits.set(2, { rpm: 1 });
  gw = await createGateway({
    port: 0,
    logger,
    gate,
    models: [
      modelEntrySchema.parse({ name: 'sim-chat', upstreams: [chatSim.url], servedName: 'served-chat' }),
      modelEntrySchema.parse({ name: 'sim-reasoner', upstreams: [reasonSim.url], reasoning: true, efforts: ['high'] }),
      modelEntrySchema.parse({ name: 'no-tokenize', upstreams: [plainUrl] }),
    ],
    keySource: memoryKeySource([
      { keyHash: hashKey(KEY), accountId: 1 },
      { keyHash: hashKey(LIMITED_KEY), accountId: 2 },
    ]),
    limits: { maxBodyBytes: 256 * 1024 },
    routes: [messagesRoutes({ thinkingSecret: 'test-secret', pingIntervalMs: 100 })],
  });
  client = new Anthropic({ baseURL: `${gw.url}/api`, apiKey: KEY, maxRetries: 0 });
});

after(async () => {
  await gw?.close();
  await gate?.close();
  await chatSim?.close();
  await reasonSim?.close();
  await new Promise((r) => noTokenize?.close(r));
});

/** Asserts the call fails with `status` and the protocol error `type`; returns the message. */
async function apiError(p: Promise<unknown>, status: number, type: string): Promise<string> {
  try {
    await p;
  } catch (err) {
    assert.ok(err instanceof Anthropic.APIError, String(err));
    assert.equal(err.status, status);
    const body = err.error as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, type);
    return body.error.message;
  }
  assert.fail(`expected a ${status} ${type}`);
}

test('create: a text answer with the catalog name, end_turn and all four usage integers', async () => {
  const msg = await client.messages.create({ model: 'sim-chat', max_tokens: 200, messages: [{ role: 'user', content: 'Hello there' }] });
  assert.match(msg.id, /^msg_/);
  assert.equal(msg.type, 'message');
  assert.equal(msg.role, 'assistant');
  assert.equal(msg.model, 'sim-chat');
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0]!.type, 'text');
  assert.ok((msg.content[0] as Anthropic.TextBlock).text.length > 0);
  assert.equal(msg.stop_reason, 'end_turn');
  assert.equal(msg.stop_sequence, null);
  for (const k of ['input_tokens', 'output_tokens', 'cache_creation_input_tokens', 'cache_read_input_tokens'] as const) {
    assert.ok(Number.isInteger(msg.usage[k]), k);
  }
  assert.ok(msg.usage.input_tokens > 0 && msg.usage.output_tokens > 0);
  // The backend got the served name, and neither stop sequences nor our fields it lacks.
  assert.equal(chatSim.stats.lastBody?.model, 'served-chat');
});

test('stream() with finalMessage(): events assemble into the same kind of message; real input_tokens up front', async () => {
  const stream = client.messages.stream({
    model: 'sim-chat',
    max_tokens: 200,
    system: 'Be brief.',
    stop_sequences: ['\n\nHuman:'],
    messages: [{ role: 'user', content: 'Tell me something' }],
  });
  const types: string[] = [];
  let startInput = -1;
  stream.on('streamEvent', (ev) => {
    types.push(ev.type);
    if (ev.type === 'message_start') startInput = ev.message.usage.input_tokens;
  });
  const msg = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.equal(types.at(-2), 'message_delta');
  assert.equal(msg.content.length, 1);
  assert.equal(msg.content[0]!.type, 'text');
  assert.equal(msg.stop_reason, 'end_turn');
  assert.ok(startInput > 0);
  assert.equal(startInput, msg.usage.input_tokens);
  assert.ok(msg.usage.output_tokens > 0);
  assert.equal(chatSim.stats.lastBody?.stop, undefined);
  assert.deepEqual(chatSim.stats.lastBody?.stream_options, { include_usage: true, continuous_usage_stats: true });
});

test('the /v1/messages path without /api, with x-api-key or Bearer, any version header', async () => {
  const variants: Record<string, string>[] = [
    { 'x-api-key': KEY, 'msgproto-version': '2023-06-01' },
    { authorization: `Bearer ${KEY}`, 'anthropic-version': '1999-01-01' },
  ];
  for (const headers of variants) {
    const r = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'sim-chat', max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.status, 200);
    assert.equal(((await r.json()) as { type: string }).type, 'message');
  }
});

test('forced tool use, non-stream and stream: tool_use with the input parsed', async () => {
  const params = {
    model: 'sim-chat',
    max_tokens: 200,
    tools: [WEATHER_TOOL],
    tool_choice: { type: 'tool' as const, name: 'get_weather' },
    messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
  };
  const msg = await client.messages.create(params);
  assert.equal(msg.stop_reason, 'tool_use');
  const tu = msg.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
  assert.ok(tu);
  assert.equal(tu.name, 'get_weather');
  assert.equal(typeof (tu.input as { city: unknown }).city, 'string');
  assert.deepEqual(chatSim.stats.lastBody?.tool_choice, { type: 'function', function: { name: 'get_weather' } });

  const streamed = await client.messages.stream(params).finalMessage();
  assert.equal(streamed.stop_reason, 'tool_use');
  const stu = streamed.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
  assert.ok(stu);
  assert.equal(stu.name, 'get_weather');
  assert.equal(typeof (stu.input as { city: unknown }).city, 'string');
});

test('tool_result round trip with two parallel results: consecutive tool messages, in order', async () => {
  const msg = await client.messages.create({
    model: 'sim-chat',
    max_tokens: 100,
    tools: [WEATHER_TOOL],
    messages: [
      { role: 'user', content: 'Weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'call_p', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'call_r', name: 'get_weather', input: { city: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'call_p', content: '18C sunny' },
          { type: 'tool_result', tool_use_id: 'call_r', content: [{ type: 'text', text: '24C' }] },
        ],
      },
    ],
  });
  assert.equal(msg.type, 'message');
  const sent = chatSim.stats.lastBody?.messages as { role: string; tool_call_id?: string; content: unknown }[];
  assert.deepEqual(sent.slice(-2), [
    { role: 'tool', tool_call_id: 'call_p', content: '18C sunny' },
    { role: 'tool', tool_call_id: 'call_r', content: '24C' },
  ]);
});

test('reasoning model with effort low: a signed thinking block that round-trips; a forged one is refused', async () => {
  const params = {
    model: 'sim-reasoner',
    max_tokens: 400,
    output_config: { effort: 'low' as const },
    messages: [{ role: 'user' as const, content: 'Think about it' }],
  };
  const msg = await client.messages.create(params);
  assert.equal(reasonSim.stats.lastBody?.reasoning_effort, 'low');
  const thinking = msg.content[0] as Anthropic.ThinkingBlock;
  assert.equal(thinking.type, 'thinking');
  assert.ok(thinking.thinking.length > 0);
  assert.ok(thinking.signature.length > 0);
  assert.equal(msg.content[1]!.type, 'text');

  const streamed = await client.messages.stream(params).finalMessage();
  const sThinking = streamed.content[0] as Anthropic.ThinkingBlock;
  assert.equal(sThinking.type, 'thinking');
  assert.ok(sThinking.signature.length > 0);

  const history = (block: Anthropic.ThinkingBlock) =>
    client.messages.create({
      ...params,
      messages: [
        { role: 'user', content: 'Think about it' },
        { role: 'assistant', content: [block, { type: 'text', text: 'Done.' }] },
        { role: 'user', content: 'And again?' },
      ],
    });
  const again = await history(sThinking);
  assert.equal(again.type, 'message');
  const sent = reasonSim.stats.lastBody?.messages as { role: string; content: unknown }[];
  assert.deepEqual(sent[1], { role: 'assistant', content: 'Done.' }, 'the thinking block is not sent to the backend');
  const message = await apiError(history({ ...sThinking, thinking: `${sThinking.thinking} (edited)` }), 400, 'invalid_request_error');
  assert.match(message, /invalid signature in thinking block/);
});

test('thinking disabled: the backend is told, and no thinking block comes back', async () => {
  const msg = await client.messages.create({
    model: 'sim-reasoner',
    max_tokens: 200,
    thinking: { type: 'disabled' },
    messages: [{ role: 'user', content: 'Quick' }],
  });
  assert.deepEqual(reasonSim.stats.lastBody?.chat_template_kwargs, { enable_thinking: false });
  assert.ok(msg.content.every((b) => b.type !== 'thinking'));
});

test('max_tokens stop, stream and non-stream', async () => {
  const params = { model: 'sim-chat', max_tokens: 2, messages: [{ role: 'user' as const, content: 'Write a long essay' }] };
  const msg = await client.messages.create(params);
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.usage.output_tokens, 2);
  const streamed = await client.messages.stream(params).finalMessage();
  assert.equal(streamed.stop_reason, 'max_tokens');
  assert.equal(streamed.usage.output_tokens, 2);
});

test('count_tokens equals usage.input_tokens of the same request (system and tools included)', async () => {
  const params = {
    model: 'sim-chat',
    system: [{ type: 'text' as const, text: 'You are terse.' }],
    tools: [WEATHER_TOOL],
    messages: [{ role: 'user' as const, content: [{ type: 'text' as const, text: 'How warm is Lisbon today?' }] }],
  };
  const counted = await client.messages.countTokens(params).withResponse();
  assert.equal(counted.response.headers.get('x-rc-token-count'), 'exact');
  const msg = await client.messages.create({ ...params, max_tokens: 50 });
  assert.equal(counted.data.input_tokens, msg.usage.input_tokens);
  const bare = await client.messages.countTokens({ model: 'sim-chat', messages: params.messages });
  assert.ok(bare.input_tokens < counted.data.input_tokens, 'system and tools count as input');
  // A backend without /tokenize: an estimate, marked so.
  const est = await client.messages.countTokens({ model: 'no-tokenize', messages: params.messages }).withResponse();
  assert.equal(est.response.headers.get('x-rc-token-count'), 'estimate');
  assert.ok(est.data.input_tokens > 0);
});

test('validation errors: 400 invalid_request_error with a clear message', async () => {
  const base = { model: 'sim-chat', max_tokens: 10, messages: [{ role: 'user' as const, content: 'x' }] };
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ ...base, temperature: 1.5 }, /^temperature: must be between 0 and 1/],
    [{ ...base, model: 'nope' }, /^Requested model nope not supported$/],
    [{ ...base, max_tokens: undefined }, /^max_tokens: /],
    [{ ...base, messages: undefined }, /^messages: /],
    [{ ...base, thinking: { type: 'enabled', budget_tokens: 2048 } }, /^thinking\.budget_tokens: not supported/],
    [{ ...base, model: 'sim-reasoner', output_config: { effort: 'turbo' } }, /"turbo" is not supported by model sim-reasoner/],
    [
      { ...base, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } }] }] },
      /unsupported content block type "document"/,
    ],
    [{ ...base, tool_choice: { type: 'tool', name: 'get_weather' } }, /tool_choice: requires tools/],
    [{ ...base, top_p: 2 }, /^top_p: /],
  ];
  for (const [body, pattern] of cases) {
    const message = await apiError(client.messages.create(body as never), 400, 'invalid_request_error');
    assert.match(message, pattern, JSON.stringify(body));
  }
  // count_tokens validates the same way.
  assert.match(await apiError(client.messages.countTokens({ ...base, temperature: 3 } as never), 400, 'invalid_request_error'), /^temperature: /);
});

test('raw bad inputs: not JSON, not an object, too large, wrong method', async () => {
  const post = (body: string, path = '/v1/messages') =>
    fetch(`${gw.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-api-key': KEY }, body });
  const expect = async (r: Response, status: number, type: string) => {
    assert.equal(r.status, status);
    const body = (await r.json()) as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error');
    assert.equal(body.error.type, type);
    assert.ok(body.error.message.length > 0);
  };
  await expect(await post('{"model":'), 400, 'invalid_request_error');
  await expect(await post('[1,2]'), 400, 'invalid_request_error');
  await expect(await post('{"model":"sim-chat"}', '/v1/messages/count_tokens'), 400, 'invalid_request_error');
  await expect(
    await post(JSON.stringify({ model: 'sim-chat', max_tokens: 5, messages: [{ role: 'user', content: 'x'.repeat(300 * 1024) }] })),
    413,
    'request_too_large',
  );
  await expect(await fetch(`${gw.url}/api/v1/messages`, { headers: { 'x-api-key': KEY } }), 405, 'invalid_request_error');
});

test('authentication: missing and invalid keys are 401 authentication_error', async () => {
  const params = { model: 'sim-chat', max_tokens: 5, messages: [{ role: 'user' as const, content: 'x' }] };
  // The official client refuses to send without a key: a raw request.
  const r = await fetch(`${gw.url}/api/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(params) });
  assert.equal(r.status, 401);
  assert.deepEqual(await r.json(), { type: 'error', error: { type: 'authentication_error', message: 'Unauthorized: No API key provided.' } });
  const badKey = new Anthropic({ baseURL: `${gw.url}/api`, apiKey: generateKey(), maxRetries: 0 });
  await apiError(badKey.messages.create(params), 401, 'authentication_error');
  await apiError(badKey.messages.countTokens(params), 401, 'authentication_error');
});

test('gates: usage settled with the real token counts; over the limit is 429 rate_limit_error with Retry-After', async () => {
  const before = await gate.readUsage(1);
  const msg = await client.messages.stream({ model: 'sim-chat', max_tokens: 30, messages: [{ role: 'user', content: 'count me' }] }).finalMessage();
  const afterUsage = await gate.readUsage(1);
  assert.equal(afterUsage.tokens_used - before.tokens_used, msg.usage.input_tokens + msg.usage.output_tokens);
  assert.equal(afterUsage.tokens_reserved, 0);

  const limited = new Anthropic({ baseURL: `${gw.url}/api`, apiKey: LIMITED_KEY, maxRetries: 0 });
  const params = { model: 'sim-chat', max_tokens: 5, messages: [{ role: 'user' as const, content: 'x' }] };
  await limited.messages.create(params);
  try {
    await limited.messages.create(params);
    assert.fail('expected 429');
  } catch (err) {
    assert.ok(err instanceof Anthropic.RateLimitError, String(err));
    assert.equal((err.error as { error: { type: string } }).error.type, 'rate_limit_error');
    assert.ok(Number(err.headers?.get('retry-after')) >= 1);
  }
});

test('backend errors pass through with their status in the protocol shape', async () => {
  chatSim.setFault({ kind: '500', count: 1 });
  await apiError(client.messages.create({ model: 'sim-chat', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), 500, 'api_error');
  chatSim.setFault({ kind: '429', count: 1, retryAfterS: 7 });
  try {
    await client.messages.stream({ model: 'sim-chat', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }).finalMessage();
    assert.fail('expected 429');
  } catch (err) {
    assert.ok(err instanceof Anthropic.RateLimitError, String(err));
    assert.equal(err.headers?.get('retry-after'), '7');
  }
  // max_tokens beyond the context window is lowered to fit (gateway/admission/context-fit.ts), not the backend's 400.
  const msg = await client.messages.stream({ model: 'sim-chat', max_tokens: 1_000_000, messages: [{ role: 'user', content: 'x' }] }).finalMessage();
  assert.equal(msg.stop_reason, 'end_turn');
  assert.ok((chatSim.stats.lastBody?.max_tokens as number) < 32768);
});

test('a backend cut mid-stream becomes an error event; the SDK raises it', async () => {
  chatSim.setFault({ kind: 'close-mid-stream', count: 1, afterChunks: 2 });
  const stream = client.messages.stream({ model: 'sim-chat', max_tokens: 100, messages: [{ role: 'user', content: 'go' }] });
  const types: string[] = [];
  stream.on('streamEvent', (ev) => types.push(ev.type));
  await assert.rejects(stream.finalMessage(), (err: unknown) => {
    assert.ok(err instanceof Anthropic.APIError, String(err));
    assert.equal((err.error as { error: { type: string } }).error.type, 'api_error');
    return true;
  });
  assert.equal(types[0], 'message_start');
});

test('pings while the backend is silent; a client that goes away aborts the backend request', async () => {
  chatSim.setFault({ kind: 'stall-during', count: 1, afterChunks: 1 });
  const abortedBefore = chatSim.stats.aborted;
  const ac = new AbortController();
  const r = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST',
    signal: ac.signal,
    headers: { 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify({ model: 'sim-chat', max_tokens: 100, stream: true, messages: [{ role: 'user', content: 'stall' }] }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type') ?? '', /^text\/event-stream/);
  const reader = r.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  while (!/event: ping\ndata: \{"type":"ping"\}\n\n/.test(text)) {
    const { value, done } = await reader.read();
    assert.equal(done, false, `stream ended before a ping: ${text}`);
    text += decoder.decode(value, { stream: true });
  }
  assert.ok(text.startsWith('event: message_start\n'), text);
  ac.abort();
  await reader.cancel().catch(() => {});
  await waitFor(() => chatSim.stats.aborted > abortedBefore);
  await waitFor(() => gw.context.admission.inflight === 0);
});
