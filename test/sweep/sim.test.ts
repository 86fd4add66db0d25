// Bad-input sweep of the simulated backend (what every other surface relays to): every route,
// bad bodies and fields, framing, methods, paths, and clients that disconnect mid-stream. Its
// errors are vLLM's (`{object: "error", message, type, param, code}`, FastAPI's `{detail}` for
// 404/405); never a 5xx for bad input.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { startSim, type SimServer } from '../../sim/server.js';
import { waitFor } from '../helpers.js';
import {
  assertRefused,
  BAD_BODIES,
  BAD_VALUES,
  deepObjects,
  exchange,
  Failures,
  invalidUtf8Json,
  request,
  requestBytes,
  seeded,
  withField,
} from './harness.js';

let fast: SimServer;
let paced: SimServer;
before(async () => {
  fast = await startSim({ model: 'm', fast: true, maxBodyBytes: 256 * 1024 });
  paced = await startSim({ model: 'm', reasoning: true, ttftMs: 5, tokensPerSecond: 200 });
});
after(async () => {
  await fast?.close();
  await paced?.close();
});

const json = { 'content-type': 'application/json' };
const CHAT = { model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 };
const TOKENIZE = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };
const PROMPT = { model: 'm', prompt: 'hi' };
const ANY_ANSWER = [200, 400, 404, 413];

const ROUTES: [string, Record<string, unknown>, string[]][] = [
  [
    '/v1/chat/completions',
    CHAT,
    [
      'model',
      'messages',
      'max_tokens',
      'max_completion_tokens',
      'min_tokens',
      'stream',
      'stream_options',
      'seed',
      'temperature',
      'top_p',
      'n',
      'stop',
      'tools',
      'tool_choice',
      'reasoning_effort',
      'chat_template_kwargs',
      'ignore_eos',
    ],
  ],
  ['/tokenize', TOKENIZE, ['model', 'messages', 'tools', 'add_generation_prompt', 'return_token_strs']],
  ['/tokenize', PROMPT, ['prompt', 'add_special_tokens']],
];

async function assertServing(): Promise<void> {
  for (const s of [fast, paced]) {
    const r = await request(s.port, 'POST', '/v1/chat/completions', { headers: json, body: JSON.stringify(CHAT) });
    assert.equal(r.status, 200, r.body);
  }
}

test('bad bodies and fields on every route: 4xx in the vLLM shape', async () => {
  const f = new Failures();
  for (const [path, good, fields] of ROUTES) {
    for (const [name, body] of BAD_BODIES) {
      const label = `${path} body ${name}`;
      await f.check(label, async () =>
        assertRefused(label, await request(fast.port, 'POST', path, { headers: json, body }), { status: [400], shapes: ['vllm'] }),
      );
    }
    for (const field of [...fields, 'zz_unknown']) {
      for (const [name, value] of BAD_VALUES) {
        const label = `${path} ${field}=${name}`;
        await f.check(label, async () =>
          assertRefused(label, await request(fast.port, 'POST', path, { headers: json, body: withField(good, field, value) }), {
            status: ANY_ANSWER,
            shapes: ['vllm'],
          }),
        );
      }
      const label = `${path} ${field} invalid UTF-8`;
      await f.check(label, async () =>
        assertRefused(label, await request(fast.port, 'POST', path, { headers: json, body: invalidUtf8Json(good, field) }), {
          status: ANY_ANSWER,
          shapes: ['vllm'],
        }),
      );
    }
  }
  // Nested values the sim walks (tool schemas generate arguments; the chat template renders them).
  const deepSchema = `{"model":"m","messages":[{"role":"user","content":"call f"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":${deepObjects(10_000)}}}]}`;
  const schema300 = `{"model":"m","messages":[{"role":"user","content":"call f"}],"tool_choice":"required","tools":[{"type":"function","function":{"name":"f","parameters":${'{"type":"object","properties":{"a":'.repeat(100)}{"type":"string"}${'}}'.repeat(100)}}}]}`;
  for (const [name, path, body] of [
    ['10k-deep tool parameters', '/v1/chat/completions', deepSchema],
    ['10k-deep tool parameters (tokenize)', '/tokenize', deepSchema],
    ['100-deep tool schema (generates arguments)', '/v1/chat/completions', schema300],
    [
      'tool with recursive-looking $ref',
      '/v1/chat/completions',
      JSON.stringify({
        ...CHAT,
        tool_choice: 'required',
        tools: [{ type: 'function', function: { name: 'f', parameters: { $ref: '#', type: 'object', properties: { a: { $ref: '#' } } } } }],
      }),
    ],
    [
      'tool schema with huge bounds',
      '/v1/chat/completions',
      JSON.stringify({
        ...CHAT,
        tool_choice: 'required',
        tools: [
          {
            type: 'function',
            function: {
              name: 'f',
              parameters: { type: 'object', properties: { a: { type: 'array', minItems: 1e9, items: { type: 'string', minLength: 1e9 } } } },
            },
          },
        ],
      }),
    ],
    [
      'tool schema with odd types',
      '/v1/chat/completions',
      JSON.stringify({
        ...CHAT,
        tool_choice: 'required',
        tools: [{ type: 'function', function: { name: 'f', parameters: { type: ['object', 7], properties: [1, 2], enum: 'x', anyOf: {}, allOf: null } } }],
      }),
    ],
    ['huge max_tokens', '/v1/chat/completions', JSON.stringify({ ...CHAT, max_tokens: 2 ** 31 })],
    ['huge min_tokens', '/v1/chat/completions', JSON.stringify({ ...CHAT, max_tokens: null, min_tokens: 1e9, ignore_eos: true })],
    ['huge seed', '/v1/chat/completions', JSON.stringify({ ...CHAT, seed: Number.MAX_SAFE_INTEGER })],
    ['negative seed', '/v1/chat/completions', JSON.stringify({ ...CHAT, seed: -Number.MAX_SAFE_INTEGER })],
    ['unknown x-sim-fault', '/v1/chat/completions', JSON.stringify(CHAT)],
  ] as [string, string, string][]) {
    const label = `${path} ${name}`;
    const headers = name === 'unknown x-sim-fault' ? { ...json, 'x-sim-fault': 'nope; after=x' } : json;
    await f.check(label, async () => assertRefused(label, await request(fast.port, 'POST', path, { headers, body }), { status: ANY_ANSWER, shapes: ['vllm'] }));
  }
  f.assertNone();
  await assertServing();
});

test('generated bodies (seeded)', async () => {
  const f = new Failures();
  const rand = seeded(99);
  const pick = <T>(a: readonly T[]): T => a[Math.floor(rand() * a.length)]!;
  for (let i = 0; i < 100; i++) {
    const [path, good, fields] = pick(ROUTES);
    let body = JSON.stringify(good);
    const op = Math.floor(rand() * 3);
    if (op === 0) body = body.slice(0, Math.floor(rand() * body.length));
    else if (op === 1) {
      const at = Math.floor(rand() * body.length);
      body = body.slice(0, at) + pick(['"', '{', ']', ',', '\\', '\u0000']) + body.slice(at);
    } else body = withField(good, pick(fields), pick(BAD_VALUES)[1]);
    const label = `generated #${i} ${path} ${body.slice(0, 80)}`;
    await f.check(label, async () =>
      assertRefused(label, await request(fast.port, 'POST', path, { headers: json, body }), { status: ANY_ANSWER, shapes: ['vllm'] }),
    );
  }
  f.assertNone();
  await assertServing();
});

test('methods, paths and framing', async () => {
  const f = new Failures();
  for (const path of ['/v1/chat/completions', '/tokenize', '/v1/models', '/health', '/version']) {
    for (const m of ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS']) {
      const label = `${m} ${path}`;
      await f.check(label, async () =>
        assertRefused(label, await request(fast.port, m, path, { headers: json, body: m === 'GET' ? undefined : JSON.stringify(CHAT) }), {
          status: [200, 400, 405],
          shapes: ['vllm'],
        }),
      );
    }
  }
  for (const path of [
    '/v1/../v1/models',
    '/v1/models/',
    '/v1/chat/completions/',
    '/%00',
    '/v1/chat%2Fcompletions',
    '/' + 'x'.repeat(3000),
    '/v1/embeddings',
    '/v1/completions',
  ]) {
    const label = `POST ${path.slice(0, 50)}`;
    await f.check(label, async () =>
      assertRefused(label, await request(fast.port, 'POST', path, { headers: json, body: '{}' }), { status: [404, 405], shapes: ['vllm'] }),
    );
  }
  const big = JSON.stringify({ ...CHAT, pad: 'x'.repeat(300 * 1024) });
  const good = JSON.stringify(CHAT);
  for (const path of ['/v1/chat/completions', '/tokenize']) {
    const cases: [string, () => Promise<import('./harness.js').RawReply | undefined>, number[]][] = [
      ['oversized', () => request(fast.port, 'POST', path, { headers: json, body: big }), [413]],
      ['oversized chunked', () => request(fast.port, 'POST', path, { headers: json, body: big, chunked: true }), [413]],
      ['declared oversized', () => exchange(fast.port, [requestBytes('POST', path, { headers: json, contentLength: 1024 * 1024 })]), [413]],
      ['chunked', () => request(fast.port, 'POST', path, { headers: json, body: good, chunked: true }), [200]],
      ['length shorter', () => exchange(fast.port, [requestBytes('POST', path, { headers: json, body: good, contentLength: 4 })]), [400]],
      ['no body', () => exchange(fast.port, [requestBytes('POST', path, { headers: json, contentLength: null })]), [400]],
    ];
    for (const [name, send, status] of cases) {
      const label = `${path} ${name}`;
      await f.check(label, async () => assertRefused(label, await send(), { status, shapes: ['vllm'] }));
    }
  }
  f.assertNone();
  await assertServing();
});

test('a client that disconnects at every phase of a paced stream', async () => {
  const body = JSON.stringify({ ...CHAT, stream: true, max_tokens: 40, stream_options: { include_usage: true } });
  const head = requestBytes('POST', '/v1/chat/completions', { headers: json, body });
  const headEnd = head.indexOf('\r\n\r\n') + 4;
  for (const part of [head.subarray(0, 10), head.subarray(0, headEnd), head.subarray(0, headEnd + 7)]) {
    assert.equal(await exchange(paced.port, [part], { timeoutMs: 100 }), undefined);
  }
  const aborted = paced.stats.aborted;
  await exchange(paced.port, [head], { timeoutMs: 5000, onHead: (s) => s.destroy() });
  await exchange(paced.port, [head], { timeoutMs: 5000, onHead: (s) => s.once('data', () => s.destroy()) });
  await waitFor(() => paced.stats.aborted >= aborted + 2, 5000);
  await waitFor(() => paced.stats.inFlight === 0, 5000);
  await assertServing();
});
