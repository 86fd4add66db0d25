// Tool calls through the official openai client: required, named, auto; arguments valid for the
// schema; streamed as several fragments with id and name only in the first.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { z } from 'zod';
import type { SimServer } from '../../sim/server.js';
import { countTokens } from '../../sim/tokenizer.js';
import { simWithClient, user } from './sim-helpers.js';

let sim: SimServer;
let client: OpenAI;
before(async () => ({ sim, client } = await simWithClient()));
after(() => sim.close());

const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', minLength: 2 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
    hourly: { type: 'boolean' },
    coords: { type: 'object', properties: { lat: { type: 'number' }, lon: { type: 'number' } }, required: ['lat', 'lon'] },
    tags: { type: 'array', items: { type: 'string' } },
  },
  required: ['city', 'unit', 'days', 'hourly', 'coords', 'tags'],
  additionalProperties: false,
};
const tools: OpenAI.Chat.Completions.ChatCompletionTool[] = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather forecast', parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } },
];
const weatherSchema = z.fromJSONSchema(weatherParams as never);

test('tool_choice required: a tool call with arguments valid for the schema, finish_reason tool_calls', async () => {
  const r = await client.chat.completions.create({ model: 'sim-test', messages: [user('What is up?')], tools, tool_choice: 'required' });
  const c = r.choices[0]!;
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.content, '', 'vLLM parses required/named tool calls itself: content ""');
  assert.equal(c.message.tool_calls!.length, 1);
  const call = c.message.tool_calls![0]! as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
  assert.equal(call.type, 'function');
  assert.match(call.id, /^chatcmpl-tool-/);
  assert.equal(call.function.name, 'get_weather', 'required without a mention: the first tool');
  const args = JSON.parse(call.function.arguments);
  assert.ok(weatherSchema.safeParse(args).success, JSON.stringify(args));
  assert.equal(r.usage!.completion_tokens, countTokens(call.function.arguments));
});

test('named tool_choice calls that tool; required picks a tool the user mentions', async () => {
  const named = await client.chat.completions.create({
    model: 'sim-test',
    messages: [user('hello')],
    tools,
    tool_choice: { type: 'function', function: { name: 'get_time' } },
  });
  const call = named.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall;
  assert.equal(call.function.name, 'get_time');
  assert.equal(typeof JSON.parse(call.function.arguments).zone, 'string');
  // vLLM answers a named tool choice with finish_reason stop (OpenAI's rule; chat_completion/serving.py).
  assert.equal(named.choices[0]!.finish_reason, 'stop');
  const mentioned = await client.chat.completions.create({ model: 'sim-test', messages: [user('please use get_time')], tools, tool_choice: 'required' });
  assert.equal((mentioned.choices[0]!.message.tool_calls![0] as any).function.name, 'get_time');
});

test('auto calls a tool only when the user mentions it; none never does', async () => {
  const plain = await client.chat.completions.create({ model: 'sim-test', messages: [user('just chat')], tools });
  assert.equal(plain.choices[0]!.finish_reason, 'stop');
  assert.deepEqual(plain.choices[0]!.message.tool_calls, []);
  const auto = await client.chat.completions.create({ model: 'sim-test', messages: [user('call get_weather please')], tools, tool_choice: 'auto' });
  assert.equal(auto.choices[0]!.finish_reason, 'tool_calls');
  const none = await client.chat.completions.create({ model: 'sim-test', messages: [user('call get_weather please')], tools, tool_choice: 'none' });
  assert.equal(none.choices[0]!.finish_reason, 'stop');
});

test('streamed tool call: several argument fragments, id/type/name only in the first, same arguments as non-stream', async () => {
  const body = { model: 'sim-test', messages: [user('forecast?')], tools, tool_choice: 'required' as const, seed: 3 };
  const whole = await client.chat.completions.create(body);
  const expected = (whole.choices[0]!.message.tool_calls![0] as any).function.arguments as string;
  const deltas: OpenAI.Chat.Completions.ChatCompletionChunk.Choice.Delta.ToolCall[] = [];
  const finishes: (string | null)[] = [];
  for await (const c of await client.chat.completions.create({ ...body, stream: true })) {
    const ch = c.choices[0];
    if (!ch) continue;
    if (ch.delta.tool_calls) deltas.push(...ch.delta.tool_calls);
    finishes.push(ch.finish_reason);
  }
  assert.ok(deltas.length >= 5, `expected several fragments, got ${deltas.length}`);
  assert.match(deltas[0]!.id!, /^chatcmpl-tool-/);
  assert.equal(deltas[0]!.type, 'function');
  assert.equal(deltas[0]!.function!.name, 'get_weather');
  for (const d of deltas.slice(1)) {
    assert.equal(d.id, undefined);
    assert.equal(d.function!.name, undefined);
    assert.equal(d.index, 0);
  }
  assert.equal(deltas.map((d) => d.function!.arguments).join(''), expected);
  assert.equal(finishes.at(-1), 'tool_calls');
  assert.equal(finishes.filter((f) => f !== null).length, 1);
});

test('tool calls cut by max_tokens end with finish_reason length', async () => {
  const r = await client.chat.completions.create({ model: 'sim-test', messages: [user('x')], tools, tool_choice: 'required', max_tokens: 3 });
  assert.equal(r.choices[0]!.finish_reason, 'length');
  assert.equal(r.usage!.completion_tokens, 3);
});

test('tool_choice naming an unknown function: 400', async () => {
  await assert.rejects(
    client.chat.completions.create({ model: 'sim-test', messages: [user('x')], tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    OpenAI.BadRequestError,
  );
});

// The sim answers like a model: tools only from the user's own words in this turn.
const call = (name: string, id = 'call_1') => ({
  role: 'assistant' as const,
  content: null,
  tool_calls: [{ id, type: 'function' as const, function: { name, arguments: '{"zone":"UTC"}' } }],
});
const result = (id = 'call_1') => ({ role: 'tool' as const, tool_call_id: id, content: '12:00' });
const chosen = async (messages: OpenAI.Chat.Completions.ChatCompletionMessageParam[], stream = false): Promise<string | undefined> => {
  if (!stream) {
    const r = await client.chat.completions.create({ model: 'sim-test', messages, tools });
    return (r.choices[0]!.message.tool_calls?.[0] as OpenAI.Chat.Completions.ChatCompletionMessageFunctionToolCall | undefined)?.function.name;
  }
  let name: string | undefined;
  for await (const c of await client.chat.completions.create({ model: 'sim-test', messages, tools, stream: true })) {
    name ??= c.choices[0]?.delta.tool_calls?.[0]?.function?.name;
  }
  return name;
};

test('after a tool result the sim answers in text; a new user message naming the tool calls it again', async () => {
  const asked = [user('please use get_time')];
  assert.equal(await chosen(asked), 'get_time');
  const answered = [...asked, call('get_time'), result()];
  assert.equal(await chosen(answered), undefined, 'the result is answered, not the same call again');
  assert.equal(await chosen(answered, true), undefined, 'streamed too');
  const r = await client.chat.completions.create({ model: 'sim-test', messages: answered, tools });
  assert.equal(r.choices[0]!.finish_reason, 'stop');
  assert.ok(r.choices[0]!.message.content!.length > 0);
  // Context an agent appends after the result (Claude Code: a user message of reminders) asks nothing.
  assert.equal(await chosen([...answered, user('<system-reminder>get_time is available</system-reminder>')]), undefined);
  // Asked again: a new call.
  assert.equal(await chosen([...answered, { role: 'assistant', content: 'It is noon.' }, user('use get_time again')]), 'get_time');
  assert.equal(await chosen([...answered, user('now get_weather please')]), 'get_weather');
});

test('injected context and the system prompt do not make the sim call a tool', async () => {
  // Qwen Code's first user message: reminders naming tools around a plain request.
  const reminder = '<system-reminder>\nUse the get_time tool or an agent when useful.\n</system-reminder>';
  assert.equal(await chosen([user(`${reminder}\nsay hello\n${reminder}`)]), undefined);
  // Codex: context in other tags, with attributes, in a user message of its own before the request.
  assert.equal(await chosen([user('<environment_context cwd="/w">\n  <shell>get_time</shell>\n</environment_context>'), user('say hello')]), undefined);
  // A content-parts message: the same.
  assert.equal(
    await chosen([
      {
        role: 'user',
        content: [
          { type: 'text', text: reminder },
          { type: 'text', text: 'say hello' },
        ],
      },
    ]),
    undefined,
  );
  assert.equal(await chosen([{ role: 'system', content: 'Always call get_weather.' }, user('say hello')]), undefined);
  // The user's own words around the reminders still count, and a lone `<` or unclosed tag is text.
  assert.equal(await chosen([user(`${reminder}\nuse get_weather for Paris`)]), 'get_weather');
  assert.equal(await chosen([user('if a<b, use <b>get_time</i>')]), 'get_time');
});

test('a tool is named by its whole name, not inside a longer word', async () => {
  const read = [{ type: 'function' as const, function: { name: 'read', parameters: { type: 'object', properties: {} } } }];
  const ask = async (text: string) =>
    (await client.chat.completions.create({ model: 'sim-test', messages: [user(text)], tools: read })).choices[0]!.finish_reason;
  assert.equal(await ask('I already said hello; thread on.'), 'stop');
  assert.equal(await ask('read notes.txt'), 'tool_calls');
  assert.equal(await ask('use `read`.'), 'tool_calls');
});
