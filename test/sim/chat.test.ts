// Chat completions through the official openai client: shapes, usage, limits, determinism, errors.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type { SimServer } from '../../sim/server.js';
import { countChatTokens, countTokens } from '../../sim/tokenizer.js';
import { isVllmError, postJson, simWithClient, user } from './sim-helpers.js';

let sim: SimServer;
let client: OpenAI;
before(async () => ({ sim, client } = await simWithClient({ model: 'sim-test', maxModelLen: 4096 })));
after(() => sim.close());

test('non-stream: vLLM shape, model echo, usage matches the chat template', async () => {
  const messages = [{ role: 'system' as const, content: 'You are terse.' }, user('Say something.')];
  const r = await client.chat.completions.create({ model: 'sim-test', messages, user: 'user-123' });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.model, 'sim-test');
  assert.equal(r.choices.length, 1);
  const c = r.choices[0]!;
  assert.equal(c.message.role, 'assistant');
  assert.equal(c.finish_reason, 'stop');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(c.message.content!.length > 0);
  assert.deepEqual(c.message.tool_calls, []);
  assert.equal((c.message as any).reasoning, null, 'a non-reasoning model has no reasoning');
  assert.ok(!('reasoning_content' in c.message), 'current vLLM writes `reasoning` only (PR #33402)');
  assert.equal(r.usage!.prompt_tokens, countChatTokens(messages));
  assert.equal(r.usage!.completion_tokens, countTokens(c.message.content!));
  assert.equal(r.usage!.total_tokens, r.usage!.prompt_tokens + r.usage!.completion_tokens);
  assert.equal(sim.stats.lastBody?.user, 'user-123');
  assert.equal(sim.stats.lastHeaders?.authorization, 'Bearer sk-unused');
});

test('default output length (no max_tokens) is between 16 and 63 tokens and ends with stop', async () => {
  for (const prompt of ['a', 'b', 'c', 'd']) {
    const r = await client.chat.completions.create({ model: 'sim-test', messages: [user(prompt)] });
    const n = r.usage!.completion_tokens;
    assert.ok(n >= 16 && n <= 63, `got ${n}`);
    assert.equal(r.choices[0]!.finish_reason, 'stop');
  }
});

test('max_tokens is honoured exactly, with finish_reason length', async () => {
  for (const max of [1, 3, 10]) {
    const r = await client.chat.completions.create({ model: 'sim-test', messages: [user('Tell me a long story.')], max_tokens: max });
    assert.equal(r.usage!.completion_tokens, max);
    assert.equal(countTokens(r.choices[0]!.message.content!), max);
    assert.equal(r.choices[0]!.finish_reason, 'length');
  }
  const r = await client.chat.completions.create({ model: 'sim-test', messages: [user('x')], max_completion_tokens: 5 });
  assert.equal(r.usage!.completion_tokens, 5);
});

test('ignore_eos generates exactly max_tokens; min_tokens lengthens the answer', async () => {
  const r = await client.chat.completions.create({ model: 'sim-test', messages: [user('x')], max_tokens: 200, ignore_eos: true } as any);
  assert.equal(r.usage!.completion_tokens, 200);
  assert.equal(r.choices[0]!.finish_reason, 'length');
  const m = await client.chat.completions.create({ model: 'sim-test', messages: [user('x')], max_tokens: 300, min_tokens: 150 } as any);
  assert.equal(m.usage!.completion_tokens, 150);
  assert.equal(m.choices[0]!.finish_reason, 'stop');
});

test('stream: role chunk, one token per chunk, finish on the last token, [DONE]', async () => {
  const stream = (await client.chat.completions.create({
    model: 'sim-test',
    messages: [user('x')],
    max_tokens: 20,
    ignore_eos: true,
    stream: true,
  } as any)) as unknown as AsyncIterable<OpenAI.Chat.Completions.ChatCompletionChunk>;
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks.length, 21, 'role chunk + 20 token chunks');
  assert.deepEqual(chunks[0]!.choices[0]!.delta, { role: 'assistant', content: '' });
  const tokens = chunks.slice(1);
  for (const c of tokens) {
    assert.equal(c.object, 'chat.completion.chunk');
    assert.equal(c.model, 'sim-test');
    assert.equal(c.id, chunks[0]!.id);
    assert.equal(countTokens(c.choices[0]!.delta.content!), 1);
    assert.equal(c.usage, undefined, 'no usage without stream_options');
  }
  assert.deepEqual(
    tokens.map((c) => c.choices[0]!.finish_reason),
    [...Array(19).fill(null), 'length'],
  );
});

test('stream and non-stream produce the same text for the same seed and prompt', async () => {
  const body = { model: 'sim-test', messages: [user('determinism')], seed: 7, max_tokens: 30 };
  const a = await client.chat.completions.create(body);
  const b = await client.chat.completions.create(body);
  assert.equal(a.choices[0]!.message.content, b.choices[0]!.message.content);
  let streamed = '';
  for await (const c of await client.chat.completions.create({ ...body, stream: true })) streamed += c.choices[0]?.delta.content ?? '';
  assert.equal(streamed, a.choices[0]!.message.content);
  const other = await client.chat.completions.create({ ...body, seed: 8 });
  assert.notEqual(other.choices[0]!.message.content, a.choices[0]!.message.content);
});

test('stream_options.include_usage adds a final usage chunk with choices: []', async () => {
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  for await (const c of await client.chat.completions.create({
    model: 'sim-test',
    messages: [user('x')],
    max_tokens: 5,
    stream: true,
    stream_options: { include_usage: true },
  }))
    chunks.push(c);
  const last = chunks.at(-1)!;
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage!.completion_tokens, 5);
  assert.equal(last.usage!.prompt_tokens, countChatTokens([user('x')]));
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, undefined);
});

test('continuous_usage_stats puts running usage on every chunk', async () => {
  const chunks: OpenAI.Chat.Completions.ChatCompletionChunk[] = [];
  const opts = { include_usage: true, continuous_usage_stats: true } as OpenAI.Chat.Completions.ChatCompletionStreamOptions;
  for await (const c of await client.chat.completions.create({ model: 'sim-test', messages: [user('x')], max_tokens: 4, stream: true, stream_options: opts }))
    chunks.push(c);
  assert.deepEqual(
    chunks.map((c) => c.usage?.completion_tokens),
    [0, 1, 2, 3, 4, 4],
  );
  for (const c of chunks) assert.equal(c.usage!.total_tokens, c.usage!.prompt_tokens + c.usage!.completion_tokens);
});

test('/tokenize count equals usage.prompt_tokens, system and tools included', async () => {
  const tools = [
    {
      type: 'function' as const,
      function: { name: 'lookup', description: 'Find a thing', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
    },
    { type: 'function' as const, function: { name: 'add', parameters: { type: 'object', properties: { a: { type: 'number' }, b: { type: 'number' } } } } },
  ];
  const messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[] = [
    { role: 'system', content: 'You help with lookups.' },
    user('Find the answer.'),
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'lookup', arguments: '{"q":"answer"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: '42' },
    user('Thanks; and now?'),
  ];
  const r = await client.chat.completions.create({ model: 'sim-test', messages, tools, tool_choice: 'none', max_tokens: 3 });
  const t = await postJson(`${sim.url}/tokenize`, { model: 'sim-test', messages, tools });
  assert.equal(t.status, 200);
  assert.equal(t.body.count, r.usage!.prompt_tokens);
  assert.equal(t.body.count, countChatTokens(messages as any, tools));
  assert.equal(t.body.tokens.length, t.body.count);
  assert.equal(t.body.max_model_len, 4096);
  const noTools = await postJson(`${sim.url}/tokenize`, { messages });
  assert.ok(noTools.body.count < t.body.count, 'tools count as input');
  const prompt = await postJson(`${sim.url}/tokenize`, { model: 'sim-test', prompt: 'Hello, world', return_token_strs: true });
  assert.deepEqual(prompt.body.token_strs, ['<s>', 'Hello', ',', ' world']);
  assert.equal(prompt.body.count, 4);
});

test('/tokenize bad input: 400 or 404 in vLLM shape', async () => {
  assert.ok(isVllmError((await postJson(`${sim.url}/tokenize`, '{bad')).body, 400));
  assert.ok(isVllmError((await postJson(`${sim.url}/tokenize`, { messages: 'nope' })).body, 400));
  assert.ok(isVllmError((await postJson(`${sim.url}/tokenize`, { prompt: 5 })).body, 400));
  const nf = await postJson(`${sim.url}/tokenize`, { model: 'other', prompt: 'x' });
  assert.equal(nf.status, 404);
  assert.ok(isVllmError(nf.body, 404));
});

test('GET /health and /v1/models', async () => {
  const h = await fetch(`${sim.url}/health`);
  assert.equal(h.status, 200);
  await h.arrayBuffer();
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0]!.id, 'sim-test');
  assert.equal(models[0]!.object, 'model');
  assert.equal((models[0] as any).max_model_len, 4096);
});

test('prompt over max_model_len: vLLM 400; max_tokens beyond the room: 400', async () => {
  const long = 'word '.repeat(5000);
  await assert.rejects(client.chat.completions.create({ model: 'sim-test', messages: [user(long)] }), (err: any) => {
    // vLLM's nested error body (since 0.10.1): the client shows its message.
    assert.ok(err instanceof OpenAI.BadRequestError);
    assert.equal(err.status, 400);
    assert.match(err.message, /maximum context length/);
    return true;
  });
  const raw = await postJson(`${sim.url}/v1/chat/completions`, { model: 'sim-test', messages: [user(long)] });
  assert.equal(raw.status, 400);
  assert.ok(isVllmError(raw.body, 400));
  assert.match(raw.body.error.message, /maximum context length is 4096 tokens\. However, your request has \d+ input tokens/);
  const tooMany = await postJson(`${sim.url}/v1/chat/completions`, { model: 'sim-test', messages: [user('x')], max_tokens: 5000 });
  assert.equal(tooMany.status, 400);
  assert.match(tooMany.body.error.message, /'max_tokens' or 'max_completion_tokens' is too large: 5000/);
});

test('unknown model: vLLM 404 body', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'nope', messages: [user('x')] }), OpenAI.NotFoundError);
  const raw = await postJson(`${sim.url}/v1/chat/completions`, { model: 'nope', messages: [user('x')] });
  assert.equal(raw.status, 404);
  assert.ok(isVllmError(raw.body, 404));
  assert.equal(raw.body.error.message, 'The model `nope` does not exist.');
});

test('bad JSON and bad fields: vLLM 400 bodies naming the field', async () => {
  const url = `${sim.url}/v1/chat/completions`;
  const cases: [unknown, string | null][] = [
    ['{not json', null],
    ['[1,2]', null],
    [{ model: 'sim-test' }, 'messages'],
    [{ messages: [] }, 'messages'],
    [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages.0.role'],
    [{ messages: [user('x')], max_tokens: 0 }, 'max_tokens'],
    [{ messages: [user('x')], max_tokens: 1.5 }, 'max_tokens'],
    [{ messages: [user('x')], temperature: -1 }, 'temperature'],
    [{ messages: [user('x')], stream: 'yes' }, 'stream'],
    [{ messages: [user('x')], n: 2 }, 'n'],
    [{ messages: [user('x')], stream_options: { include_usage: true } }, 'stream_options'],
    [{ messages: [user('x')], tool_choice: 'required' }, 'tool_choice'],
    [{ messages: [user('x')], max_tokens: 5, min_tokens: 6 }, 'min_tokens'],
    [{ messages: [user('x')], reasoning_effort: 'extreme' }, 'reasoning_effort'],
    [{ messages: [user('x')], tools: [{ type: 'function', function: {} }] }, 'tools.0.function.name'],
  ];
  for (const [body, param] of cases) {
    const r = await postJson(url, body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.ok(isVllmError(r.body, 400), JSON.stringify(r.body));
    assert.equal(r.body.error.param, param, JSON.stringify(body));
  }
});

test('body over the size limit: 413 in vLLM shape', async () => {
  const small = await simWithClient({ maxBodyBytes: 1024 });
  try {
    const r = await postJson(`${small.sim.url}/v1/chat/completions`, { messages: [user('x'.repeat(2000))] });
    assert.equal(r.status, 413);
    assert.equal(r.body.error.code, 413);
    assert.equal(small.sim.stats.inFlight, 0);
  } finally {
    await small.sim.close();
  }
});

test('unknown path: 404; wrong method: 405', async () => {
  const a = await fetch(`${sim.url}/v1/embeddings`, { method: 'POST', body: '{}' });
  assert.equal(a.status, 404);
  assert.deepEqual(await a.json(), { detail: 'Not Found' });
  const b = await fetch(`${sim.url}/v1/chat/completions`);
  assert.equal(b.status, 405);
  await b.arrayBuffer();
});

test('startCatalogSims: one sim per model without upstreams, with its served name and reasoning', async () => {
  const { startCatalogSims } = await import('../../sim/model-sims.js');
  const { DEFAULT_SIM_MODELS, modelEntrySchema } = await import('../../lib/config.js');
  const models = [...DEFAULT_SIM_MODELS, modelEntrySchema.parse({ name: 'remote', upstreams: ['http://127.0.0.1:1'] })];
  const sims = await startCatalogSims(models, { host: '127.0.0.1', portBase: 0, fast: true });
  try {
    assert.deepEqual(
      [...sims.keys()],
      DEFAULT_SIM_MODELS.map((m) => m.name),
    );
    for (const m of DEFAULT_SIM_MODELS) {
      const replicas = sims.get(m.name)!;
      assert.equal(replicas.length, 1, 'one sim per model by default');
      const r = await postJson(`${replicas[0]!.url}/v1/chat/completions`, { model: m.name, messages: [user('x')], max_tokens: 40 });
      assert.equal(r.status, 200);
      assert.equal(r.body.model, m.name);
      assert.equal(r.body.choices[0].message.reasoning !== null, m.reasoning);
    }
  } finally {
    await Promise.all([...sims.values()].flat().map((s) => s.close()));
  }
});

test('startCatalogSims with replicas: that many sims per model, each serving it on a port of its own', async () => {
  const { startCatalogSims } = await import('../../sim/model-sims.js');
  const { DEFAULT_SIM_MODELS } = await import('../../lib/config.js');
  const sims = await startCatalogSims(DEFAULT_SIM_MODELS, { host: '127.0.0.1', portBase: 0, fast: true, replicas: 3 });
  try {
    const all = [...sims.values()].flat();
    assert.equal(all.length, 3 * DEFAULT_SIM_MODELS.length);
    assert.equal(new Set(all.map((s) => s.url)).size, all.length, 'every replica on its own port');
    for (const m of DEFAULT_SIM_MODELS) {
      for (const s of sims.get(m.name)!) {
        const r = await postJson(`${s.url}/v1/chat/completions`, { model: m.name, messages: [user('x')], max_tokens: 4 });
        assert.equal(r.status, 200);
        assert.equal(r.body.model, m.name);
      }
    }
  } finally {
    await Promise.all([...sims.values()].flat().map((s) => s.close()));
  }
});
