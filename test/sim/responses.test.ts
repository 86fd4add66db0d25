// The sim's POST /v1/responses through the official openai client: text, reasoning, function
// calls and their round trip, max_output_tokens, usage (cached and reasoning tokens), streaming.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type OpenAI from 'openai';
import type { SimServer } from '../../sim/server.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { isVllmError, postJson, simWithClient } from './sim-helpers.js';

let sim: SimServer;
let client: OpenAI;
let reasoner: SimServer;
let reasonerClient: OpenAI;
before(async () => {
  ({ sim, client } = await simWithClient({ model: 'sim-test' }));
  ({ sim: reasoner, client: reasonerClient } = await simWithClient({ model: 'sim-test', reasoning: true }));
});
after(async () => {
  await sim.close();
  await reasoner.close();
});

const WEATHER = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};

test('create: a text answer with usage counted like the same chat request', async () => {
  const r = await client.responses.create({ model: 'sim-test', instructions: 'Be terse.', input: 'Say hello.' });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_/);
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.length > 0);
  assert.equal(r.output[0]!.type, 'message');
  assert.equal(
    r.usage!.input_tokens,
    countChatTokens([
      { role: 'system', content: 'Be terse.' },
      { role: 'user', content: 'Say hello.' },
    ]),
  );
  assert.equal(r.usage!.total_tokens, r.usage!.input_tokens + r.usage!.output_tokens);
  // The same prompt again: prefix cache hits.
  const again = await client.responses.create({ model: 'sim-test', instructions: 'Be terse.', input: 'Say hello.' });
  assert.equal(again.usage!.input_tokens_details.cached_tokens, Math.floor((r.usage!.input_tokens - 1) / 16) * 16);
});

test('function call, then its output as input: a text answer', async () => {
  const r = await client.responses.create({ model: 'sim-test', input: 'Use get_weather for Paris', tools: [WEATHER] });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call');
  assert.equal(call.name, 'get_weather');
  assert.equal(typeof JSON.parse(call.arguments).city, 'string');
  const next = await client.responses.create({
    model: 'sim-test',
    tools: [WEATHER],
    input: [
      { role: 'user', content: 'Use get_weather for Paris' },
      { type: 'function_call', call_id: call.call_id, name: call.name, arguments: call.arguments },
      { type: 'function_call_output', call_id: call.call_id, output: '{"temp": 20}' },
    ],
  });
  assert.equal(next.status, 'completed');
  // A model answers the tool's result: text, not the same call again.
  assert.deepEqual(
    next.output.map((o) => o.type),
    ['message'],
  );
  assert.ok(next.output_text.length > 0);
  // The call and its output are part of the prompt (rendered as an assistant tool call and a tool message).
  assert.equal(
    next.usage!.input_tokens,
    countChatTokens(
      [
        { role: 'user', content: 'Use get_weather for Paris' },
        { role: 'assistant', content: null, tool_calls: [{ id: call.call_id, type: 'function', function: { name: call.name, arguments: call.arguments } }] },
        { role: 'tool', tool_call_id: call.call_id, content: '{"temp": 20}' },
      ],
      [{ type: 'function', function: { name: WEATHER.name, description: WEATHER.description, parameters: WEATHER.parameters } }],
    ),
  );
});

test('reasoning and max_output_tokens: reasoning item, incomplete with its reason', async () => {
  const r = await reasonerClient.responses.create({ model: 'sim-test', input: 'Think.', reasoning: { effort: 'low' } });
  assert.equal(r.output[0]!.type, 'reasoning');
  assert.equal(r.usage!.output_tokens_details.reasoning_tokens, 12);
  const cut = await client.responses.create({ model: 'sim-test', input: 'Talk a lot.', max_output_tokens: 3 });
  assert.equal(cut.status, 'incomplete');
  assert.equal(cut.incomplete_details?.reason, 'max_output_tokens');
  assert.equal(cut.usage!.output_tokens, 3);
});

test('stream: the events the SDK assembles into the same kind of response', async () => {
  const stream = reasonerClient.responses.stream({ model: 'sim-test', input: 'Use get_weather for Oslo', tools: [WEATHER], reasoning: { effort: 'low' } });
  const types = new Set<string>();
  let argDeltas = '';
  stream.on('event', (e) => types.add(e.type));
  stream.on('response.function_call_arguments.delta', (e) => {
    argDeltas += e.delta;
  });
  const final = await stream.finalResponse();
  for (const t of [
    'response.created',
    'response.in_progress',
    'response.output_item.added',
    'response.reasoning_text.delta',
    'response.function_call_arguments.done',
    'response.output_item.done',
    'response.completed',
  ])
    assert.ok(types.has(t), t);
  const call = final.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call' && call.arguments === argDeltas);
  assert.ok(final.usage!.output_tokens > 12);

  const text = client.responses.stream({ model: 'sim-test', input: 'Hello there' });
  let deltas = '';
  text.on('response.output_text.delta', (e) => {
    deltas += e.delta;
  });
  const done = await text.finalResponse();
  assert.equal(done.output_text, deltas);
  assert.equal(done.status, 'completed');
});

test('bad requests: vLLM-shaped 400s', async () => {
  const bad = [
    { model: 'sim-test' },
    { model: 'sim-test', input: [] },
    { model: 'sim-test', input: 'x', tools: [{ type: 'web_search' }] },
    { model: 'sim-test', input: 'x', previous_response_id: 'resp_1' },
    { model: 'sim-test', input: 'x', max_output_tokens: 0 },
  ];
  for (const body of bad) {
    const r = await postJson(`${sim.url}/v1/responses`, body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.ok(isVllmError(r.body, 400), JSON.stringify(r.body));
  }
  const r = await postJson(`${sim.url}/v1/responses`, { model: 'other', input: 'x' });
  assert.equal(r.status, 404);
});
