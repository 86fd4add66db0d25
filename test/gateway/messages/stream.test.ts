// Golden tests of the streaming translator: representative vLLM-style chunk sequences in, the
// exact messages-protocol event sequence out.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ThinkingSigner } from '../../../gateway/messages/signature.js';
import { jsonString, KEEPALIVE_COMMENT, PING_EVENT, StreamTranslator, textDeltaEvent, type ChatChunk } from '../../../gateway/messages/stream.js';

const signer = new ThinkingSigner('test-secret');

type Delta = NonNullable<NonNullable<ChatChunk['choices']>[number]['delta']>;
const usage = (p: number, c: number) => ({ prompt_tokens: p, completion_tokens: c, total_tokens: p + c });
/** A vLLM chunk with continuous usage stats. */
const chunk = (delta: Delta, u: ReturnType<typeof usage>, finish: string | null = null): ChatChunk => ({
  choices: [{ delta, finish_reason: finish }],
  usage: u,
});

/** Runs chunks (then [DONE]) through a translator; returns the SSE text. */
function run(chunks: (ChatChunk | string)[], opts: { thinking?: boolean; inputTokens?: number } = {}): string {
  const t = new StreamTranslator({ model: 'sim-chat', signer, ...opts });
  let out = '';
  for (const c of chunks) out += typeof c === 'string' ? t.pushData(c) : t.push(c);
  return out;
}

/** Splits SSE text into events, checking the framing of each: `event: X\ndata: {...type: X}\n\n`. */
function events(text: string): Record<string, unknown>[] {
  assert.ok(text.endsWith('\n\n'), 'stream text ends with a blank line');
  return text
    .slice(0, -2)
    .split('\n\n')
    .map((block) => {
      const m = /^event: ([a-z_]+)\ndata: (.*)$/s.exec(block);
      assert.ok(m, `event framing: ${JSON.stringify(block)}`);
      const data = JSON.parse(m[2]!) as Record<string, unknown>;
      assert.equal(data.type, m[1], 'event name equals data.type');
      return data;
    });
}

const ID = /^msg_[A-Za-z0-9_-]+$/;
function start(input: number, output = 0) {
  return {
    type: 'message_start',
    message: {
      id: 'msg_X',
      type: 'message',
      role: 'assistant',
      model: 'sim-chat',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: input, output_tokens: output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    },
  };
}
/** Replaces the random message id after checking its shape. */
function normalize(evs: Record<string, unknown>[]): Record<string, unknown>[] {
  const first = evs[0] as { type: string; message: { id: string } };
  assert.equal(first.type, 'message_start');
  assert.match(first.message.id, ID);
  first.message.id = 'msg_X';
  return evs;
}
const blockStart = (index: number, content_block: unknown) => ({ type: 'content_block_start', index, content_block });
const delta = (index: number, d: unknown) => ({ type: 'content_block_delta', index, delta: d });
const stop = (index: number) => ({ type: 'content_block_stop', index });
const msgDelta = (stop_reason: string, input: number, output: number) => ({
  type: 'message_delta',
  delta: { stop_reason, stop_sequence: null },
  usage: { input_tokens: input, output_tokens: output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
});
const msgStop = { type: 'message_stop' };

test('plain text: no empty leading block, real input_tokens in message_start', () => {
  const out = run([
    chunk({ role: 'assistant', content: '' } as Delta, usage(12, 0)),
    chunk({ content: 'Hel' }, usage(12, 1)),
    chunk({ content: 'lo "world"' }, usage(12, 2)),
    chunk({ content: '' }, usage(12, 3), 'stop'),
    { choices: [], usage: usage(12, 3) },
    '[DONE]',
  ]);
  assert.deepEqual(normalize(events(out)), [
    start(12),
    blockStart(0, { type: 'text', text: '' }),
    delta(0, { type: 'text_delta', text: 'Hel' }),
    delta(0, { type: 'text_delta', text: 'lo "world"' }),
    stop(0),
    msgDelta('end_turn', 12, 3),
    msgStop,
  ]);
});

test('tool call arguments split across fragments: input_json_delta per fragment', () => {
  const out = run([
    chunk({ role: 'assistant', content: '' } as Delta, usage(30, 0)),
    chunk({ tool_calls: [{ index: 0, id: 'call_1', function: { name: 'get_weather', arguments: '' } }] }, usage(30, 1)),
    chunk({ tool_calls: [{ index: 0, function: { arguments: '{"ci' } }] }, usage(30, 2)),
    chunk({ tool_calls: [{ index: 0, function: { arguments: 'ty": "Par' } }] }, usage(30, 3)),
    chunk({ tool_calls: [{ index: 0, function: { arguments: 'is"}' } }] }, usage(30, 4)),
    chunk({}, usage(30, 5), 'tool_calls'),
    '[DONE]',
  ]);
  assert.deepEqual(normalize(events(out)), [
    start(30),
    blockStart(0, { type: 'tool_use', id: 'call_1', name: 'get_weather', input: {} }),
    delta(0, { type: 'input_json_delta', partial_json: '{"ci' }),
    delta(0, { type: 'input_json_delta', partial_json: 'ty": "Par' }),
    delta(0, { type: 'input_json_delta', partial_json: 'is"}' }),
    stop(0),
    msgDelta('tool_use', 30, 5),
    msgStop,
  ]);
});

test('reasoning, then text, then a tool call: signature_delta closes the thinking block', () => {
  const out = run([
    chunk({ role: 'assistant', content: '' } as Delta, usage(50, 0)),
    // vLLM versions send reasoning_content, newer ones reasoning, some both with the same text.
    chunk({ reasoning_content: 'Let me ', reasoning: 'Let me ' }, usage(50, 1)),
    chunk({ reasoning: 'think.' }, usage(50, 2)),
    chunk({ content: 'Checking.' }, usage(50, 3)),
    chunk({ tool_calls: [{ index: 0, id: 'call_9', function: { name: 'lookup', arguments: '{"q": 1}' } }] }, usage(50, 4)),
    chunk({}, usage(50, 5), 'tool_calls'),
    '[DONE]',
  ]);
  assert.deepEqual(normalize(events(out)), [
    start(50),
    blockStart(0, { type: 'thinking', thinking: '', signature: '' }),
    delta(0, { type: 'thinking_delta', thinking: 'Let me ' }),
    delta(0, { type: 'thinking_delta', thinking: 'think.' }),
    delta(0, { type: 'signature_delta', signature: signer.sign('Let me think.') }),
    stop(0),
    blockStart(1, { type: 'text', text: '' }),
    delta(1, { type: 'text_delta', text: 'Checking.' }),
    stop(1),
    blockStart(2, { type: 'tool_use', id: 'call_9', name: 'lookup', input: {} }),
    delta(2, { type: 'input_json_delta', partial_json: '{"q": 1}' }),
    stop(2),
    msgDelta('tool_use', 50, 5),
    msgStop,
  ]);
  assert.ok(signer.verify('Let me think.', signer.sign('Let me think.')));
});

test('thinking disabled: reasoning deltas are dropped', () => {
  const out = run([chunk({ reasoning: 'hmm' }, usage(5, 1)), chunk({ content: 'Hi' }, usage(5, 2), 'stop'), '[DONE]'], { thinking: false });
  assert.deepEqual(normalize(events(out)), [
    start(5, 1),
    blockStart(0, { type: 'text', text: '' }),
    delta(0, { type: 'text_delta', text: 'Hi' }),
    stop(0),
    msgDelta('end_turn', 5, 2),
    msgStop,
  ]);
});

test('two parallel tool calls: two tool_use blocks in order, contiguous indices', () => {
  const out = run([
    chunk({ role: 'assistant', content: '' } as Delta, usage(40, 0)),
    chunk({ tool_calls: [{ index: 0, id: 'call_a', function: { name: 'f', arguments: '{"x"' } }] }, usage(40, 1)),
    chunk({ tool_calls: [{ index: 0, function: { arguments: ': 1}' } }] }, usage(40, 2)),
    chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'g', arguments: '' } }] }, usage(40, 3)),
    chunk({ tool_calls: [{ index: 1, function: { arguments: '{"y": 2}' } }] }, usage(40, 4)),
    chunk({}, usage(40, 5), 'tool_calls'),
    '[DONE]',
  ]);
  assert.deepEqual(normalize(events(out)), [
    start(40),
    blockStart(0, { type: 'tool_use', id: 'call_a', name: 'f', input: {} }),
    delta(0, { type: 'input_json_delta', partial_json: '{"x"' }),
    delta(0, { type: 'input_json_delta', partial_json: ': 1}' }),
    stop(0),
    blockStart(1, { type: 'tool_use', id: 'call_b', name: 'g', input: {} }),
    delta(1, { type: 'input_json_delta', partial_json: '{"y": 2}' }),
    stop(1),
    msgDelta('tool_use', 40, 5),
    msgStop,
  ]);
});

test('finish_reason length: stop_reason max_tokens', () => {
  const out = run([chunk({ content: 'a' }, usage(7, 1)), chunk({ content: 'b' }, usage(7, 2), 'length'), { choices: [], usage: usage(7, 2) }, '[DONE]']);
  assert.deepEqual(normalize(events(out)), [
    start(7, 1),
    blockStart(0, { type: 'text', text: '' }),
    delta(0, { type: 'text_delta', text: 'a' }),
    delta(0, { type: 'text_delta', text: 'b' }),
    stop(0),
    msgDelta('max_tokens', 7, 2),
    msgStop,
  ]);
});

test('other finish reasons: content_filter is refusal, unknown is end_turn', () => {
  for (const [finish, expected] of [
    ['content_filter', 'refusal'],
    ['abort', 'end_turn'],
    ['stop', 'end_turn'],
  ] as const) {
    const evs = events(run([chunk({ content: 'x' }, usage(1, 1), finish), '[DONE]']));
    assert.equal((evs.at(-2) as { delta: { stop_reason: string } }).delta.stop_reason, expected);
  }
});

test('an upstream error mid-stream: an error event, then nothing more', () => {
  const t = new StreamTranslator({ model: 'sim-chat', signer });
  let out = t.push(chunk({ content: 'partial' }, usage(9, 1)));
  out += t.pushData(JSON.stringify({ error: { object: 'error', message: 'backend exploded', type: 'InternalServerError', code: 500 } }));
  assert.equal(t.done, true);
  out += t.pushData('[DONE]');
  out += t.end();
  assert.deepEqual(normalize(events(out)), [
    start(9, 1),
    blockStart(0, { type: 'text', text: '' }),
    delta(0, { type: 'text_delta', text: 'partial' }),
    { type: 'error', error: { type: 'api_error', message: 'backend exploded' } },
  ]);
});

test('error types from the backend code; malformed chunk is an api_error', () => {
  const t1 = new StreamTranslator({ model: 'm', signer });
  assert.deepEqual(events(t1.pushData('{"object":"error","message":"busy","code":503}')), [
    { type: 'error', error: { type: 'overloaded_error', message: 'busy' } },
  ]);
  const t2 = new StreamTranslator({ model: 'm', signer });
  assert.deepEqual(events(t2.pushData('{not json')), [
    { type: 'error', error: { type: 'api_error', message: 'The model backend sent a malformed stream chunk' } },
  ]);
});

test('without usage on chunks, message_start uses the given input token count', () => {
  const out = run([{ choices: [{ delta: { content: 'x' }, finish_reason: 'stop' }] }, { choices: [], usage: usage(21, 1) }, '[DONE]'], { inputTokens: 20 });
  const evs = normalize(events(out));
  assert.deepEqual(evs[0], start(20));
  assert.deepEqual(evs.at(-2), msgDelta('end_turn', 21, 1));
});

test('cached prompt tokens: input_tokens excludes them, cache_read_input_tokens reports them', () => {
  const u = { prompt_tokens: 100, completion_tokens: 2, prompt_tokens_details: { cached_tokens: 64 } };
  const evs = events(run([{ choices: [{ delta: { content: 'x' }, finish_reason: 'stop' }], usage: u }, '[DONE]']));
  const expected = { input_tokens: 36, output_tokens: 2, cache_creation_input_tokens: 0, cache_read_input_tokens: 64 };
  assert.deepEqual((evs[0] as { message: { usage: unknown } }).message.usage, expected);
  assert.deepEqual((evs.at(-2) as { usage: unknown }).usage, expected);
});

test('reportedUsage feeds the gate; ping and keep-alive are well-formed', () => {
  const t = new StreamTranslator({ model: 'm', signer });
  assert.equal(t.reportedUsage, undefined);
  t.push(chunk({ content: 'x' }, usage(3, 4)));
  assert.deepEqual(t.reportedUsage, { inputTokens: 3, outputTokens: 4, cachedTokens: 0 });
  assert.deepEqual(events(PING_EVENT), [{ type: 'ping' }]);
  assert.match(KEEPALIVE_COMMENT, /^:[^\n]*\n\n$/);
});

test('jsonString is JSON.stringify of a string, escapes, control characters and lone surrogates included; so is a text_delta event', () => {
  const cases = [
    '',
    'a',
    ' token',
    'é日本語🎉',
    'q"uote',
    'back\\slash',
    'new\nline',
    'tab\t',
    '\u0000\u001f\u007f',
    '\ud800 lone',
    'lone \udfff',
    '\ud83c\udf89',
    '</script>',
    '\u2028\u2029',
  ];
  for (const c of cases) assert.equal(jsonString(c), JSON.stringify(c), JSON.stringify(c));
  // The text_delta event, from its kept head (indices below 16) and built whole (above).
  for (const index of [0, 1, 15, 16, 300]) {
    for (const c of cases) {
      const event = `event: content_block_delta\ndata: ${JSON.stringify({ type: 'content_block_delta', index, delta: { type: 'text_delta', text: c } })}\n\n`;
      assert.equal(textDeltaEvent(index, c), event, JSON.stringify(c));
    }
  }
});

test('message ids: msg_ and 16 base64url characters, distinct across refills of the random pool', () => {
  const ids = new Set<string>();
  for (let i = 0; i < 300; i++) {
    const start = new StreamTranslator({ model: 'm', signer }).pushData('[DONE]');
    const id = /"id":"(msg_[^"]*)"/.exec(start)?.[1];
    assert.match(id ?? '', /^msg_[A-Za-z0-9_-]{16}$/);
    ids.add(id!);
  }
  assert.equal(ids.size, 300);
});
