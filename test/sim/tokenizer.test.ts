import { test } from 'node:test';
import assert from 'node:assert/strict';
import { applyChatTemplate, canonicalJson, countChatTokens, countPromptTokens, countTokens, encode, SPECIAL, tokenId, tokenize } from '../../sim/tokenizer.js';
import { MAX_GENERATED_STRING, MAX_GENERATED_VALUES, prng, reasoningPieces, textPieces, valueForSchema } from '../../sim/generate.js';

test('tokenize is lossless and countTokens agrees with it', () => {
  const samples = [
    '',
    ' ',
    'Hello, world!',
    '  leading and trailing  ',
    'supercalifragilistic',
    'tabs\tand\nnewlines\n\n',
    'unicode: héllo wörld 日本語 🙂🙂',
    '{"a": [1, 2.5, "x"]}',
    '<|im_start|>user\nhi<|im_end|>',
    '<s><s>',
  ];
  for (const s of samples) {
    const pieces = tokenize(s);
    assert.equal(pieces.join(''), s, JSON.stringify(s));
    assert.equal(countTokens(s), pieces.length, JSON.stringify(s));
    assert.equal(encode(s).length, pieces.length);
  }
});

test('tokenize: words split at 8 characters, punctuation is one token, specials are one token', () => {
  assert.deepEqual(tokenize('Hello, world!'), ['Hello', ',', ' world', '!']);
  assert.deepEqual(tokenize('abcdefghijkl'), ['abcdefgh', 'ijkl']);
  assert.deepEqual(tokenize('<|im_start|>user'), ['<|im_start|>', 'user']);
  assert.deepEqual(tokenize('🙂x'), ['🙂', 'x']);
  assert.equal(countTokens('a b c'), 3);
});

test('token ids are deterministic; special tokens have small reserved ids', () => {
  assert.equal(tokenId(' world'), tokenId(' world'));
  assert.notEqual(tokenId(' world'), tokenId('world'));
  assert.ok(tokenId(SPECIAL.start) < 100);
  assert.ok(tokenId('x') >= 100);
});

test('canonicalJson sorts keys at every level and drops undefined', () => {
  assert.equal(canonicalJson({ b: 1, a: { d: [1, { z: 1, y: 2 }], c: null }, u: undefined }), '{"a":{"c":null,"d":[1,{"y":2,"z":1}]},"b":1}');
  assert.equal(canonicalJson({ a: 1, b: 2 }), canonicalJson({ b: 2, a: 1 }));
});

test('chat template: roles, system with tools, tool calls and tool results; counts follow the text', () => {
  const tools = [
    { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
  ];
  const messages = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Weather in Paris?' },
    { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
    { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
  ];
  const text = applyChatTemplate(messages, tools);
  assert.ok(text.startsWith(`${SPECIAL.bos}${SPECIAL.start}system\nBe brief.\n\n${SPECIAL.tools}\n`));
  assert.ok(text.includes('"name":"get_weather"'));
  assert.ok(text.includes(`${SPECIAL.toolCall}{"arguments":"{\\"city\\":\\"Paris\\"}","name":"get_weather"}${SPECIAL.toolCallEnd}`));
  assert.ok(text.includes(`${SPECIAL.start}tool\n${SPECIAL.toolResponse}call_1\nsunny${SPECIAL.toolResponseEnd}`));
  assert.ok(text.endsWith(`${SPECIAL.start}assistant\n`));
  assert.equal(countChatTokens(messages, tools), countTokens(text));
  // System and tools count: removing either lowers the count.
  assert.ok(countChatTokens(messages.slice(1), tools) < countChatTokens(messages, tools));
  assert.ok(countChatTokens(messages, []) < countChatTokens(messages, tools));
  // Tools without a system message still get a system block.
  assert.ok(applyChatTemplate([{ role: 'user', content: 'hi' }], tools).startsWith(`${SPECIAL.bos}${SPECIAL.start}system\n${SPECIAL.tools}`));
  // Key order of a tool definition does not change the count.
  const reordered = [
    { function: { parameters: { properties: { city: { type: 'string' } }, type: 'object' }, description: 'Weather', name: 'get_weather' }, type: 'function' },
  ];
  assert.equal(countChatTokens(messages, reordered), countChatTokens(messages, tools));
});

test('content parts: text parts join, other parts count as one image token', () => {
  const a = countChatTokens([{ role: 'user', content: [{ type: 'text', text: 'hello' }, { type: 'image_url' }] }]);
  const b = countChatTokens([{ role: 'user', content: 'hello' }]);
  assert.equal(a, b + 1);
});

test('countPromptTokens adds BOS unless told otherwise', () => {
  assert.equal(countPromptTokens('a b'), 3);
  assert.equal(countPromptTokens('a b', false), 2);
});

test('generated text pieces are one token each and re-tokenize to the same count', () => {
  const pieces = textPieces(prng(42), 500);
  assert.equal(pieces.length, 500);
  for (const p of pieces) assert.equal(countTokens(p), 1, JSON.stringify(p));
  assert.equal(countTokens(pieces.join('')), 500);
  assert.deepEqual(textPieces(prng(42), 50), pieces.slice(0, 50));
  const reasoning = reasoningPieces(prng(7), 500);
  for (const p of reasoning) assert.equal(countTokens(p), 1, JSON.stringify(p));
  assert.equal(countTokens(reasoning.join('')), 500);
});

test('valueForSchema honours types, enums, bounds and nesting', () => {
  const schema = {
    type: 'object',
    properties: {
      unit: { type: 'string', enum: ['c', 'f'] },
      days: { type: 'integer', minimum: 1, maximum: 3 },
      tags: { type: 'array', items: { type: 'string' }, minItems: 2, maxItems: 2 },
      nested: { type: 'object', properties: { ok: { type: 'boolean' } } },
      maybe: { anyOf: [{ type: 'null' }, { type: 'number' }] },
      fixed: { const: 'x' },
    },
  };
  for (let seed = 0; seed < 20; seed++) {
    const v = valueForSchema(schema, prng(seed)) as Record<string, any>;
    assert.ok(['c', 'f'].includes(v.unit));
    assert.ok(Number.isInteger(v.days) && v.days >= 1 && v.days <= 3);
    assert.equal(v.tags.length, 2);
    assert.equal(typeof v.nested.ok, 'boolean');
    assert.equal(typeof v.maybe, 'number');
    assert.equal(v.fixed, 'x');
  }
});

test('valueForSchema stays bounded whatever the schema asks for', () => {
  const count = (v: unknown): number => (v !== null && typeof v === 'object' ? 1 + Object.values(v).reduce((n: number, c) => n + count(c), 0) : 1);
  // 1e9 items, 1e9-character strings, arrays of arrays 8 deep with 1000 items each.
  const huge = { type: 'array', minItems: 1e9, items: { type: 'string', minLength: 1e9 } };
  const v = valueForSchema(huge, prng(1)) as string[];
  assert.ok(v.length <= MAX_GENERATED_VALUES);
  assert.ok(v.every((s) => s.length <= MAX_GENERATED_STRING));
  let nested: Record<string, unknown> = { type: 'string' };
  for (let i = 0; i < 8; i++) nested = { type: 'array', minItems: 1000, items: nested };
  assert.ok(count(valueForSchema(nested, prng(2))) <= 2 * MAX_GENERATED_VALUES);
});
