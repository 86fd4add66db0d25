// The fast path of the stream translator (textChunk, for the plain chunk shapes) must read what
// JSON.parse reads (for every field the translator reads), leave every other shape and every
// malformed chunk to JSON.parse, and translate exactly as the parsed chunk translates.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { type ChunkFields, textChunk, textChunksAt, type TextChunk, usageOf } from '../../../gateway/messages/chunk-parse.js';
import { ThinkingSigner } from '../../../gateway/messages/signature.js';
import { StreamTranslator, type ChatChunk } from '../../../gateway/messages/stream.js';
import type { ChatUsage } from '../../../gateway/messages/translate-response.js';

/** A vLLM text-token chunk with continuous usage, as vLLM serializes it. */
const vllm = (contentJson: string, p = 21, c = 2) =>
  `{"id":"chatcmpl-fb93","object":"chat.completion.chunk","created":1795243335,"model":"m","choices":[{"index":0,"delta":{"content":${contentJson}},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":${p},"total_tokens":${p + c},"completion_tokens":${c}}}`;

/** What the translator reads of a plain chunk, from JSON.parse's object: textChunk must give the same. */
function read(c: ChatChunk): TextChunk {
  const choice = c.choices?.[0];
  // The counts the translator reads: not the total, nor the extras SGLang and current vLLM add.
  const { total_tokens: _, reasoning_tokens: _r, completion_tokens_details: _d, ...usage } = c.usage as Record<string, unknown>;
  return { content: choice?.delta?.content ?? undefined, finish: choice?.finish_reason ?? null, usage };
}

/** The events of `chunks` (then [DONE]) through pushData, and through push of JSON.parse's objects. */
function bothWays(chunks: string[]): { viaText: string; viaObjects: string; usage: StreamTranslator['reportedUsage'] } {
  const signer = new ThinkingSigner('s');
  const a = new StreamTranslator({ model: 'm', signer });
  const b = new StreamTranslator({ model: 'm', signer });
  let viaText = '';
  let viaObjects = '';
  for (const c of chunks) {
    viaText += a.pushData(c);
    viaObjects += b.push(JSON.parse(c) as ChatChunk);
  }
  viaText += a.pushData('[DONE]');
  viaObjects += b.pushData('[DONE]');
  assert.deepEqual(a.reportedUsage, b.reportedUsage);
  // The message ids are random: an id (in message_start) is checked for its shape, then left out.
  const noId = (s: string) => s.replace(/"id":"msg_[A-Za-z0-9_-]{16}"/, '"id":"msg_"');
  for (const s of [viaText, viaObjects]) assert.equal(s.includes('"id":"msg_'), /"id":"msg_[A-Za-z0-9_-]{16}"/.test(s));
  return { viaText: noId(viaText), viaObjects: noId(viaObjects), usage: a.reportedUsage };
}

test('text-token chunks read the same as JSON.parse, escapes and unicode included', () => {
  const contents = ['"With"', '""', '" re\\u00e9\\n\\"q\\\\"', '"\\\\"', '"日本語 🎉"', '"a\\/b\\tc"', '"\\ud83c\\udf89"'];
  for (const content of contents) {
    const data = vllm(content, 1234, 0);
    assert.deepEqual(textChunk(data), read(JSON.parse(data) as ChatChunk), data);
    const { viaText, viaObjects } = bothWays([data]);
    assert.equal(viaText, viaObjects, data);
  }
});

test('the first, finish and usage-only chunks of vLLM read the same as JSON.parse', () => {
  const head = '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m",';
  const shapes = [
    `${head}"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":21,"total_tokens":21,"completion_tokens":0}}`,
    // A null content (llama.cpp's and SGLang's first delta) is no text, as JSON.parse reads it.
    `${head}"choices":[{"index":0,"delta":{"role":"assistant","content":null},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":21,"total_tokens":21,"completion_tokens":0}}`,
    `${head}"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}`,
    `${head}"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}`,
    `${head}"choices":[{"index":0,"delta":{"content":"\\n"},"logprobs":null,"finish_reason":"stop","stop_reason":128001}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}`,
    `${head}"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":"</s>"}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1}}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1,"prompt_tokens_details":null}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}`,
    // Counts of every length read as JSON.parse reads them, past a double's exact integers too.
    `${head}"choices":[],"usage":{"prompt_tokens":999999999999999,"total_tokens":3,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":98765432109876543210}}}`,
  ];
  for (const data of shapes) {
    assert.deepEqual(textChunk(data), read(JSON.parse(data) as ChatChunk), data);
    const { viaText, viaObjects } = bothWays([data]);
    assert.equal(viaText, viaObjects, data);
  }
  const { viaText, viaObjects } = bothWays(shapes);
  assert.equal(viaText, viaObjects);
});

test('other shapes go through JSON.parse and read the same', () => {
  const other = [
    '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"hm"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}',
    '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}',
    '{"error":{"message":"boom","code":503}}',
    vllm('"a"').replace('"usage":{"prompt_tokens":21,', '"usage":{"prompt_tokens":21,"prompt_tokens_details":{"cached_tokens":5},'),
    vllm('"a"').replace('"model":"m"', '"model":"m","error":"late"'),
    vllm('"a"').replace('"object":"chat.completion.chunk"', '"object":"error"'),
    vllm('"a"').replace('"finish_reason":null', '"finish_reason":"Stop"'),
  ];
  for (const data of other) {
    assert.equal(textChunk(data), undefined, data);
    const { viaText, viaObjects } = bothWays([data]);
    assert.equal(viaText, viaObjects, data);
  }
});

test('malformed chunks throw like JSON.parse', () => {
  const bad = [
    vllm('"bad \\x escape"'),
    vllm('"raw \n newline"'),
    vllm('"a"', 1, 1).replace('"completion_tokens":1', '"completion_tokens":01'),
    vllm('"a"').slice(0, -1),
    vllm('"a"') + 'x',
  ];
  for (const data of bad) {
    assert.throws(() => JSON.parse(data), data);
    assert.equal(textChunk(data), undefined, data);
    const t = new StreamTranslator({ model: 'm', signer: new ThinkingSigner('s') });
    assert.match(t.pushData(data), /^event: error\ndata: .*"The model backend sent a malformed stream chunk"/, data);
    assert.equal(t.done, true);
  }
});

test('a serialized stream translates exactly like the parsed one', () => {
  const chunks = [
    '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":21,"total_tokens":21,"completion_tokens":0}}',
    vllm('"Hello"', 21, 1),
    vllm('" wor\\u006cd \\"q\\""', 21, 2),
    vllm('"\\n"', 21, 3),
    '{"id":"x","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"!"},"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":21,"total_tokens":25,"completion_tokens":4}}',
  ];
  const { viaText, viaObjects, usage } = bothWays(chunks);
  assert.equal(viaText, viaObjects);
  assert.ok(viaText.includes('"id":"msg_"'));
  assert.match(viaText, /"text":" world \\"q\\""/);
  assert.deepEqual(usage, { inputTokens: 21, outputTokens: 4, cachedTokens: 0 });
});

/** textChunksAt and usageOf of `data` as the second event of a read, against JSON.parse of it. */
function readInPlace(data: string): { fields: ChunkFields | undefined; end: number; escaped: boolean; usage: ChatUsage | undefined } {
  const before = `data: ${vllm('"first"')}\n\n`;
  const s = `${before}data: ${data}\n\ndata: [DONE]\n\n`;
  const read: { c: ChunkFields; plain: boolean }[] = [];
  const end = textChunksAt(s, before.length, (c, plain) => read.push({ c, plain }));
  assert.ok(read.length <= 1, data);
  const fields = read[0]?.c;
  if (fields) assert.equal(fields.end, end);
  return { fields, end, escaped: read[0]?.plain === false, usage: fields && usageOf(fields.text, fields.end) };
}

test('chunks read in place (textChunksAt, usageOf) read what JSON.parse reads, with adversarial contents', () => {
  const contents = [
    '"plain"',
    '""',
    // The text of the chunk's own keys inside the content: escaped quotes, never the real keys.
    '"\\"usage\\":{\\"prompt_tokens\\":9}"',
    '"usage\\":"',
    '"\\"},\\"logprobs\\":null,\\"finish_reason\\":\\"stop\\"}],\\"usage\\":{}}"',
    '"data: {\\"id\\":\\"chatcmpl-1\\",\\"object\\":\\"chat.completion.chunk\\""',
    // Backslashes and quotes at the content's ends.
    '"\\\\"',
    '"\\""',
    '"a\\\\\\""',
    '"\\\\\\\\"',
    // Escapes that decode beyond ASCII, and a surrogate pair.
    '"caf\\u00e9 \\ud83c\\udf89"',
    '"\\n\\t\\r\\b\\f\\/"',
  ];
  for (const content of contents) {
    const data = vllm(content, 17, 3);
    const parsed = JSON.parse(data) as ChatChunk;
    const { fields, end, escaped, usage } = readInPlace(data);
    assert.ok(fields, data);
    assert.equal(fields.content, parsed.choices![0]!.delta!.content, data);
    assert.equal(fields.finish, null, data);
    assert.equal(escaped, content.includes('\\'), data);
    assert.deepEqual(usage, read(parsed).usage, data);
    assert.equal(end, `data: ${vllm('"first"')}\n\ndata: ${data}\n\n`.length, data);
  }
  // A stop reason named like the usage key, and details of every kind.
  const head = '{"id":"x","object":"chat.completion.chunk","created":1,"model":"usage",';
  for (const data of [
    `${head}"choices":[{"index":0,"delta":{"content":"\\"usage\\":"},"logprobs":null,"finish_reason":"stop","stop_reason":"usage"}],"usage":{"prompt_tokens":2,"total_tokens":3,"completion_tokens":1}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":null}}`,
    // Counts of one digit and of every length, past a double's exact integers too (usageOf reads them backwards).
    `${head}"choices":[],"usage":{"prompt_tokens":0,"total_tokens":0,"completion_tokens":0,"prompt_tokens_details":{"cached_tokens":0}}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":999999999999999,"total_tokens":3,"completion_tokens":12345678901234567,"prompt_tokens_details":{"cached_tokens":98765432109876543210}}}`,
    `${head}"choices":[{"index":0,"delta":{"content":"1"},"logprobs":null,"finish_reason":"length","stop_reason":12}],"usage":{"prompt_tokens":98765432109876543210,"total_tokens":1000000,"completion_tokens":9,"prompt_tokens_details":null}}`,
    // The extras after the counts (usageOf steps over them from the end): current vLLM's
    // completion details (an object, empty, or null), SGLang's reasoning tokens, both.
    `${head}"choices":[],"usage":{"prompt_tokens":21,"total_tokens":23,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":0}}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":21,"total_tokens":23,"completion_tokens":12,"completion_tokens_details":{}}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":21,"total_tokens":23,"completion_tokens":2,"completion_tokens_details":null}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":7,"accepted_prediction_tokens":null}}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":null,"completion_tokens_details":null}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":123,"reasoning_tokens":45}}`,
    `${head}"choices":[],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2},"reasoning_tokens":1,"completion_tokens_details":{"reasoning_tokens":1}}}`,
  ]) {
    const parsed = JSON.parse(data) as ChatChunk;
    const { fields, usage } = readInPlace(data);
    assert.ok(fields, data);
    assert.deepEqual({ content: fields.content, finish: fields.finish, usage }, read(parsed), data);
  }
  // llama.cpp's chunk (keys sorted) with its usage in either order: usageOf tells its order by the
  // key before the last count (llama.cpp's total_tokens) and reads it by the regex.
  const llama = '{"choices":[],"created":1,"id":"x","model":"m","object":"chat.completion.chunk","usage":';
  for (const usageJson of [
    '{"completion_tokens":3,"prompt_tokens":5,"total_tokens":8}',
    '{"completion_tokens":30,"prompt_tokens":5,"prompt_tokens_details":{"cached_tokens":4},"total_tokens":35}',
    '{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0}',
  ]) {
    const data = `${llama}${usageJson}}`;
    const { fields, usage } = readInPlace(data);
    assert.ok(fields, data);
    assert.deepEqual({ content: fields.content, finish: fields.finish, usage }, read(JSON.parse(data) as ChatChunk), data);
  }
});

test('chunks of other shapes or malformed are not read in place', () => {
  const other = [
    vllm('"bad \\x escape"'),
    vllm('"bad \\u00e escape"'),
    vllm('"raw \u0001 control"'),
    vllm('"a"').replace('"content":"a"', '"content":"a","extra":1'),
    vllm('"a"').replace('{"index":0,"delta":', '{"delta":').replace(',"logprobs"', ',"index":0,"logprobs"'),
    vllm('"a"').replace('"model":"m",', '"model":"m","system_fingerprint":"fp",'),
    vllm('"a"').replace('"id":"chatcmpl-fb93","object":"chat.completion.chunk"', '"object":"chat.completion.chunk","id":"chatcmpl-fb93"'),
    vllm('"a"').replace('"finish_reason":null', '"finish_reason":null,"stop_reason":null,"x":1'),
    vllm('"a"').replace('"content":"a"', '"content":"a" '),
    vllm('"a"').replace('"choices":[{', '"choices":[{"index":0,"delta":{"content":"a"},"logprobs":null,"finish_reason":null},{'),
  ];
  for (const data of other) assert.equal(readInPlace(data).fields, undefined, data);
});
