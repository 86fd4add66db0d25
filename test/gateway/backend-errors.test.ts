// Backend errors reach each client in its protocol's shape, with the backend's status and message
// (issue #28): vLLM's flat `{"object":"error","message",...}` body, which the openai SDK cannot
// read (`body.error` is absent: Qwen Code showed "400 status code (no body)"), OpenAI's nested
// shape (kept, missing fields filled) and a body that is not JSON, on chat completions (stream
// and not), /v1/responses and /v1/messages. The backend is a raw HTTP server answering what each
// case sets; the clients are the official `openai` and `@anthropic-ai/sdk` packages.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { post } from './fixture.js';
import { rawServer } from './raw-server.js';

const KEY = generateKey();
let backend: Awaited<ReturnType<typeof rawServer>>;
let gw: Gateway;
let openai: OpenAI;
let anthropic: Anthropic;

/** What the backend answers to the next generation requests. */
let answer: { status: number; headers: Record<string, string>; body: string } = { status: 500, headers: {}, body: '' };

before(async () => {
  backend = await rawServer((r) => {
    const path = r.head.split(' ')[1];
    // No /tokenize (the messages route may ask to fit max_tokens): FastAPI's 404, as vLLM without it.
    const a = path === '/tokenize' ? { status: 404, headers: { 'content-type': 'application/json' }, body: '{"detail":"Not Found"}' } : answer;
    const body = Buffer.from(a.body);
    const head = [`HTTP/1.1 ${a.status} X`, ...Object.entries(a.headers).map(([k, v]) => `${k}: ${v}`), `content-length: ${body.length}`, '', ''].join('\r\n');
    r.socket.write(Buffer.concat([Buffer.from(head, 'latin1'), body]));
  });
  gw = await createGateway({
    port: 0,
    logger: createLogger('silent'),
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [backend.url], maxContext: 1_000_000 })],
    keySource: memoryKeySource([{ keyHash: hashKey(KEY), accountId: 1 }]),
    routes: [messagesRoutes({ thinkingSecret: 'test-secret' })],
  });
  openai = new OpenAI({ apiKey: KEY, baseURL: `${gw.url}/v1`, maxRetries: 0 });
  anthropic = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
});

after(async () => {
  await gw?.close();
  await backend?.close();
});

const JSON_TYPE = { 'content-type': 'application/json' };
const CONTEXT_MESSAGE =
  "This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens. Please reduce the length of the input messages.";
const LONG_TEXT = `upstream proxy failure ${'x'.repeat(5000)}`;

interface Case {
  name: string;
  status: number;
  headers: Record<string, string>;
  body: string;
  /** What every client must read. */
  message: string;
  /** What a messages client reads instead, when the protocol has its own words for the error. */
  messagesMessage?: string;
  /** The chat shape's error object the openai client must see (fields compared). */
  chat: Record<string, unknown>;
}

const CASES: Case[] = [
  {
    name: "vLLM's flat ErrorResponse",
    status: 400,
    headers: JSON_TYPE,
    body: JSON.stringify({ object: 'error', message: CONTEXT_MESSAGE, type: 'BadRequestError', param: 'messages', code: 400 }),
    message: CONTEXT_MESSAGE,
    // A prompt past the context, in the words coding agents read to compact (backends/context-overflow.ts).
    messagesMessage: 'prompt is too long: 40000 tokens > 32767 maximum',
    chat: { message: CONTEXT_MESSAGE, type: 'BadRequestError', param: 'messages', code: 400 },
  },
  {
    name: 'the nested shape with every field',
    status: 400,
    headers: JSON_TYPE,
    body: JSON.stringify({ error: { message: 'max_tokens is too large', type: 'invalid_request_error', param: 'max_tokens', code: 'too_large', extra: 1 } }),
    message: 'max_tokens is too large',
    chat: { message: 'max_tokens is too large', type: 'invalid_request_error', param: 'max_tokens', code: 'too_large', extra: 1 },
  },
  {
    name: 'the nested shape with only a message',
    status: 400,
    headers: JSON_TYPE,
    body: JSON.stringify({ error: { message: 'bad tools' } }),
    message: 'bad tools',
    chat: { message: 'bad tools', type: 'invalid_request_error', param: null, code: null },
  },
  {
    name: 'plain text',
    status: 400,
    headers: { 'content-type': 'text/plain' },
    body: 'Bad Request: prompt too long\n',
    message: 'Bad Request: prompt too long',
    chat: { message: 'Bad Request: prompt too long', type: 'invalid_request_error', param: null, code: null },
  },
  {
    name: 'a long text body (cut)',
    status: 502,
    headers: { 'content-type': 'text/html' },
    body: LONG_TEXT,
    message: `${LONG_TEXT.slice(0, 1000)}...`,
    chat: { message: `${LONG_TEXT.slice(0, 1000)}...`, type: 'api_error', param: null, code: null },
  },
  {
    name: "FastAPI's detail",
    status: 404,
    headers: JSON_TYPE,
    body: '{"detail":"Not Found"}',
    message: 'Not Found',
    chat: { message: 'Not Found', type: 'not_found_error', param: null, code: null },
  },
];

/** The openai call fails with the case's status and the chat shape's error object. */
async function expectOpenAIError(label: string, c: Case, call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, `${label}: ${String(err)}`);
    assert.equal(err.status, c.status, label);
    assert.deepEqual(err.error, c.chat, label);
    assert.equal(err.message, `${c.status} ${c.message}`, label);
    return;
  }
  assert.fail(`${label}: no error`);
}

/** The anthropic call fails with the case's status and the messages shape. */
async function expectAnthropicError(label: string, c: Case, call: () => Promise<unknown>): Promise<void> {
  try {
    await call();
  } catch (err) {
    assert.ok(err instanceof Anthropic.APIError, `${label}: ${String(err)}`);
    assert.equal(err.status, c.status, label);
    const body = err.error as { type: string; error: { type: string; message: string } };
    assert.equal(body.type, 'error', label);
    assert.equal(body.error.message, c.messagesMessage ?? c.message, label);
    return;
  }
  assert.fail(`${label}: no error`);
}

const HELLO = [{ role: 'user' as const, content: 'Say hello' }];

for (const c of CASES) {
  test(`a backend error in ${c.name} reaches every client in its protocol's shape, status and message kept`, async () => {
    answer = { status: c.status, headers: c.headers, body: c.body };
    await expectOpenAIError('chat', c, () => openai.chat.completions.create({ model: 'm', messages: HELLO }));
    await expectOpenAIError('chat stream', c, async () => {
      const s = await openai.chat.completions.create({ model: 'm', messages: HELLO, stream: true });
      for await (const _ of s) {
        // drained
      }
    });
    await expectOpenAIError('responses', c, () => openai.responses.create({ model: 'm', input: 'Say hello' }));
    await expectOpenAIError('responses stream', c, () => openai.responses.stream({ model: 'm', input: 'Say hello' }).finalResponse());
    await expectAnthropicError('messages', c, () => anthropic.messages.create({ model: 'm', max_tokens: 16, messages: HELLO }));
    await expectAnthropicError('messages stream', c, () => anthropic.messages.stream({ model: 'm', max_tokens: 16, messages: HELLO }).finalMessage());
    assert.equal(gw.context.admission.inflight, 0);
  });
}

test("a rewritten error keeps the backend's headers (Retry-After), gets a JSON content type", async () => {
  answer = { status: 429, headers: { 'content-type': 'text/plain', 'retry-after': '9', 'x-request-id': 'req-1' }, body: 'slow down' };
  for (const path of ['/v1/chat/completions', '/v1/responses']) {
    const body = path === '/v1/responses' ? { model: 'm', input: 'x' } : { model: 'm', messages: HELLO };
    const r = await post(`${gw.url}${path}`, JSON.stringify(body), { authorization: `Bearer ${KEY}` });
    assert.equal(r.status, 429, path);
    assert.equal(r.headers.get('retry-after'), '9', path);
    assert.equal(r.headers.get('x-request-id'), 'req-1', path);
    assert.match(r.headers.get('content-type') ?? '', /^application\/json/, path);
    assert.deepEqual(r.json, { error: { message: 'slow down', type: 'rate_limit_error', param: null, code: null } }, path);
  }
});

test('an empty error body gets a message naming the status', async () => {
  answer = { status: 503, headers: {}, body: '' };
  const r = await post(`${gw.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), { authorization: `Bearer ${KEY}` });
  assert.equal(r.status, 503);
  assert.deepEqual(r.json, { error: { message: 'The model backend answered HTTP 503 without a message', type: 'api_error', param: null, code: null } });
});

test('a successful body is relayed as the backend wrote it (bytes untouched)', async () => {
  const completion =
    '{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4},"object_extra":  "spaces kept"}';
  answer = { status: 200, headers: JSON_TYPE, body: completion };
  const r = await post(`${gw.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), { authorization: `Bearer ${KEY}` });
  assert.equal(r.status, 200);
  assert.equal(r.text, completion);
});
