// Request and non-stream response translation: every rule of the issue, good and bad inputs.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { modelEntrySchema } from '../../../lib/config.js';
import { MessagesError } from '../../../gateway/messages/errors.js';
import { countTokensRequestSchema, describeIssue, messagesRequestSchema } from '../../../gateway/messages/schema.js';
import { ThinkingSigner } from '../../../gateway/messages/signature.js';
import { chatRequestJson, toChatRequest } from '../../../gateway/messages/translate-request.js';
import { toMessagesResponse } from '../../../gateway/messages/translate-response.js';

const signer = new ThinkingSigner('s3cret');
const chat = modelEntrySchema.parse({ name: 'sim-chat', servedName: 'org/served' });
const reasoner = modelEntrySchema.parse({ name: 'sim-reasoner', reasoning: true, efforts: ['high'] });
const noTools = modelEntrySchema.parse({ name: 'plain', tools: false });

const base = { model: 'sim-chat', max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] };

/**
 * Parses and translates; returns the chat request or throws the MessagesError. Every request
 * translated here is also serialized by chatRequestJson, which must write what JSON.stringify
 * does, as the relays send it (non-stream; stream with its options).
 */
function translate(body: Record<string, unknown>, model = chat) {
  const parsed = messagesRequestSchema.safeParse(body);
  if (!parsed.success) throw new MessagesError(400, describeIssue(parsed.error, body));
  const t = toChatRequest(parsed.data, model, signer);
  const c = structuredClone(t.chat);
  assert.equal(chatRequestJson(c), JSON.stringify(c));
  c.stream = true;
  c.stream_options = { include_usage: true, continuous_usage_stats: true };
  assert.equal(chatRequestJson(c), JSON.stringify(c));
  return t;
}
function rejects(body: Record<string, unknown>, pattern: RegExp, model = chat): void {
  assert.throws(
    () => translate(body, model),
    (err: unknown) => {
      assert.ok(err instanceof MessagesError, String(err));
      assert.equal(err.status, 400);
      assert.equal(err.type, 'invalid_request_error');
      assert.match(err.message, pattern);
      return true;
    },
  );
}

test('minimal request: served model name, max_tokens, string content', () => {
  const t = translate(base);
  assert.deepEqual(t.chat, { model: 'org/served', max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(t.stickyKey, undefined);
  assert.equal(t.thinking, true);
});

test('required fields and their types', () => {
  rejects({ messages: base.messages, max_tokens: 1 }, /^model: /);
  rejects({ model: 'm', max_tokens: 1 }, /^messages: /);
  rejects({ model: 'm', max_tokens: 1, messages: [] }, /^messages: /);
  rejects({ model: 'm', messages: base.messages }, /^max_tokens: /);
  rejects({ ...base, max_tokens: 0 }, /^max_tokens: /);
  rejects({ ...base, max_tokens: 1.5 }, /^max_tokens: /);
  rejects({ ...base, messages: [{ role: 'robot', content: 'x' }] }, /^messages\.0\.role: /);
  rejects({ ...base, messages: [{ role: 'user', content: 5 }] }, /^messages\.0\.content: /);
  rejects({ ...base, stream: 'yes' }, /^stream: /);
  // count_tokens takes the same body without max_tokens
  assert.equal(countTokensRequestSchema.safeParse({ model: 'm', messages: base.messages }).success, true);
});

test('temperature within 0..1; top_p and top_k passed on', () => {
  rejects({ ...base, temperature: 1.5 }, /^temperature: must be between 0 and 1/);
  rejects({ ...base, temperature: -0.1 }, /^temperature: must be between 0 and 1/);
  const t = translate({ ...base, temperature: 1, top_p: 0.9, top_k: 40 });
  assert.equal(t.chat.temperature, 1);
  assert.equal(t.chat.top_p, 0.9);
  assert.equal(t.chat.top_k, 40);
  rejects({ ...base, top_k: -1 }, /^top_k: /);
});

test('system as a string or text blocks; stop_sequences accepted and not forwarded', () => {
  assert.deepEqual(translate({ ...base, system: 'Be brief.' }).chat.messages[0], { role: 'system', content: 'Be brief.' });
  const t = translate({
    ...base,
    system: [
      { type: 'text', text: 'A', cache_control: { type: 'ephemeral' } },
      { type: 'text', text: 'B' },
    ],
    stop_sequences: ['END'],
  });
  assert.deepEqual(t.chat.messages[0], { role: 'system', content: 'A\nB' });
  assert.equal('stop' in t.chat, false);
  rejects({ ...base, system: [{ type: 'image', source: { type: 'url', url: 'http://x' } }] }, /^system\.0\.type: /);
  rejects({ ...base, system: 7 }, /^system: /);
});

test('content blocks: text, images (base64 and url)', () => {
  const t = translate({
    ...base,
    messages: [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is this?' },
          { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0K' } },
          { type: 'image', source: { type: 'url', url: 'https://example.com/a.jpg' } },
        ],
      },
    ],
  });
  assert.deepEqual(t.chat.messages, [
    {
      role: 'user',
      content: [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0K' } },
        { type: 'image_url', image_url: { url: 'https://example.com/a.jpg' } },
      ],
    },
  ]);
  rejects({ ...base, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'f' } }] }] }, /unsupported .*"file"/);
});

test('an unsupported block type is a 400 that names it', () => {
  rejects(
    { ...base, messages: [{ role: 'user', content: [{ type: 'document', source: {} }] }] },
    /^messages\.0\.content\.0: unsupported content block type "document"$/,
  );
  rejects(
    { ...base, messages: [{ role: 'assistant', content: [{ type: 'redacted_thinking', data: 'x' }] }] },
    /unsupported content block type "redacted_thinking"/,
  );
  rejects(
    { ...base, messages: [{ role: 'user', content: [{ type: 'tool_use', id: 'a', name: 'f', input: {} }] }] },
    /tool_use blocks are not allowed in user messages/,
  );
  rejects(
    { ...base, messages: [{ role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'a' }] }] },
    /tool_result blocks are not allowed in assistant messages/,
  );
});

test('tool_use in assistant turns -> tool_calls; tool_results -> consecutive tool messages in order', () => {
  const t = translate({
    ...base,
    tools: [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    messages: [
      { role: 'user', content: 'Weather in Paris and Rome?' },
      {
        role: 'assistant',
        content: [
          { type: 'text', text: 'Checking.' },
          { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
          { type: 'tool_use', id: 'call_2', name: 'get_weather', input: { city: 'Rome' } },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'call_1', content: '18C' },
          {
            type: 'tool_result',
            tool_use_id: 'call_2',
            content: [
              { type: 'text', text: 'no' },
              { type: 'text', text: 'data' },
            ],
            is_error: true,
          },
          { type: 'text', text: 'Summarize.' },
        ],
      },
    ],
  });
  assert.deepEqual(t.chat.messages, [
    { role: 'user', content: 'Weather in Paris and Rome?' },
    {
      role: 'assistant',
      content: 'Checking.',
      tool_calls: [
        { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
        { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'call_1', content: '18C' },
    { role: 'tool', tool_call_id: 'call_2', content: 'Error: no\ndata' },
    { role: 'user', content: 'Summarize.' },
  ]);
  assert.deepEqual(t.chat.tools, [
    {
      type: 'function',
      function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
    },
  ]);
  // An assistant turn of tool calls only has null content.
  const only = translate({ ...base, messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'c', name: 'f', input: {} }] }] });
  assert.deepEqual(only.chat.messages[0], {
    role: 'assistant',
    content: null,
    tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }],
  });
  rejects({ ...base, messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'c', name: 'f', input: 'x' }] }] }, /^messages\.0\.content\.0\.input: /);
});

test('tools and tool_choice: auto, any, tool, none', () => {
  const tools = [{ name: 'f', input_schema: { type: 'object' } }];
  assert.equal(translate({ ...base, tools, tool_choice: { type: 'auto' } }).chat.tool_choice, 'auto');
  assert.equal(translate({ ...base, tools, tool_choice: { type: 'any' } }).chat.tool_choice, 'required');
  assert.equal(translate({ ...base, tools, tool_choice: { type: 'none' } }).chat.tool_choice, 'none');
  const named = translate({ ...base, tools, tool_choice: { type: 'tool', name: 'f', disable_parallel_tool_use: true } }).chat;
  assert.deepEqual(named.tool_choice, { type: 'function', function: { name: 'f' } });
  assert.equal(named.parallel_tool_calls, false);
  rejects({ ...base, tools, tool_choice: { type: 'tool', name: 'g' } }, /no tool named "g"/);
  rejects({ ...base, tool_choice: { type: 'any' } }, /tool_choice: requires tools/);
  rejects({ ...base, tools, tool_choice: { type: 'sometimes' } }, /unsupported tool_choice type "sometimes"/);
  rejects({ ...base, tools: [{ name: 'f' }] }, /^tools\.0\.input_schema: /);
  rejects({ ...base, tools }, /does not support tool calling/, noTools);
});

test('thinking: budget_tokens rejected; disabled and adaptive map to reasoning controls', () => {
  rejects({ ...base, thinking: { type: 'enabled', budget_tokens: 2048 } }, /^thinking\.budget_tokens: not supported/, reasoner);
  rejects({ ...base, thinking: { type: 'sometimes' } }, /unsupported thinking type "sometimes"/);
  const off = translate({ ...base, thinking: { type: 'disabled' } }, reasoner);
  assert.deepEqual(off.chat.chat_template_kwargs, { enable_thinking: false });
  assert.equal(off.thinking, false);
  const adaptive = translate({ ...base, thinking: { type: 'adaptive' } }, reasoner);
  assert.equal(adaptive.thinking, true);
  assert.equal(adaptive.chat.chat_template_kwargs, undefined);
  assert.equal(translate({ ...base, thinking: { type: 'disabled' } }, chat).chat.chat_template_kwargs, undefined);
});

test('output_config.effort: ignored without reasoning; on a reasoning model sent, or mapped to the nearest accepted tier', () => {
  assert.equal(translate({ ...base, output_config: { effort: 'low' } }, reasoner).chat.reasoning_effort, 'low');
  assert.equal(translate({ ...base, output_config: { effort: 'high' } }, reasoner).chat.reasoning_effort, 'high');
  // Beyond the model's own tiers: the nearest accepted one (ties to the lower tier).
  assert.equal(translate({ ...base, output_config: { effort: 'max' } }, reasoner).chat.reasoning_effort, 'high');
  assert.equal(translate({ ...base, output_config: { effort: 'xhigh' } }, reasoner).chat.reasoning_effort, 'high');
  assert.equal(translate({ ...base, output_config: { effort: 'minimal' } }, reasoner).chat.reasoning_effort, 'low');
  const lowMedium = modelEntrySchema.parse({ name: 'lm', reasoning: true });
  assert.equal(translate({ ...base, output_config: { effort: 'high' } }, lowMedium).chat.reasoning_effort, 'medium');
  // A model without reasoning ignores any tier, even one we do not know: nothing is forwarded.
  for (const effort of ['low', 'medium', 'high', 'max', 'turbo']) {
    assert.equal(translate({ ...base, output_config: { effort } }, chat).chat.reasoning_effort, undefined, effort);
  }
  // An unknown tier on a reasoning model is refused, naming the accepted tiers.
  rejects(
    { ...base, output_config: { effort: 'turbo' } },
    /output_config\.effort: "turbo" is not supported by model sim-reasoner \(accepted: low, medium, high\)/,
    reasoner,
  );
});

test('metadata.user_id: sticky key and user', () => {
  const t = translate({ ...base, metadata: { user_id: 'u-42' } });
  assert.equal(t.stickyKey, 'u-42');
  assert.equal(t.chat.user, 'u-42');
  rejects({ ...base, metadata: { user_id: 5 } }, /^metadata\.user_id: /);
  // Any string form: Claude Code sends a JSON document, longer than 256 characters with its ids.
  const json = JSON.stringify({ device_id: 'd'.repeat(64), account_uuid: '', session_id: 's'.repeat(300) });
  assert.equal(translate({ ...base, metadata: { user_id: json } }).stickyKey, json);
});

test('thinking blocks in history: signature checked, block dropped', () => {
  const thought = 'I should greet.';
  const history = (signature: string) => ({
    ...base,
    messages: [
      { role: 'user', content: 'Hi' },
      {
        role: 'assistant',
        content: [
          { type: 'thinking', thinking: thought, signature },
          { type: 'text', text: 'Hello!' },
        ],
      },
      { role: 'user', content: 'Again' },
    ],
  });
  const ok = translate(history(signer.sign(thought)), reasoner);
  assert.deepEqual(ok.chat.messages[1], { role: 'assistant', content: 'Hello!' });
  rejects(history('bm90IGEgc2lnbmF0dXJl'), /^messages\.1\.content\.0: invalid signature in thinking block$/, reasoner);
  rejects(history(new ThinkingSigner('other-secret').sign(thought)), /invalid signature/, reasoner);
  rejects(history(''), /invalid signature/, reasoner);
});

test('non-stream response: blocks in order, stop reasons, usage', () => {
  const r = toMessagesResponse(
    {
      choices: [
        {
          message: {
            content: 'Answer',
            reasoning_content: 'Thinking...',
            tool_calls: [
              { id: 'call_1', function: { name: 'f', arguments: '{"a":1}' } },
              { id: 'call_2', function: { name: 'g', arguments: 'not json' } },
            ],
          },
          finish_reason: 'tool_calls',
        },
      ],
      usage: { prompt_tokens: 20, completion_tokens: 9, prompt_tokens_details: { cached_tokens: 4 } },
    },
    'sim-reasoner',
    signer,
  );
  assert.match(r.id, /^msg_/);
  assert.deepEqual(
    { ...r, id: 'msg_X' },
    {
      id: 'msg_X',
      type: 'message',
      role: 'assistant',
      model: 'sim-reasoner',
      content: [
        { type: 'thinking', thinking: 'Thinking...', signature: signer.sign('Thinking...') },
        { type: 'text', text: 'Answer' },
        { type: 'tool_use', id: 'call_1', name: 'f', input: { a: 1 } },
        { type: 'tool_use', id: 'call_2', name: 'g', input: {} },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 16, output_tokens: 9, cache_creation_input_tokens: 0, cache_read_input_tokens: 4 },
    },
  );
  const reasons = ['stop', 'length', 'tool_calls', 'content_filter', 'weird', null].map((f) =>
    toMessagesResponse({ choices: [{ message: { content: 'x', reasoning: 'r' }, finish_reason: f }] }, 'm', signer, false),
  );
  assert.deepEqual(
    reasons.map((x) => x.stop_reason),
    ['end_turn', 'max_tokens', 'tool_use', 'refusal', 'end_turn', 'end_turn'],
  );
  assert.deepEqual(reasons[0]!.content, [{ type: 'text', text: 'x' }], 'thinking disabled drops reasoning');
  assert.deepEqual(reasons[0]!.usage, { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 });
});
