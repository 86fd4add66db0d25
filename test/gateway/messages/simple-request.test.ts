// simpleRequest (the common request shape checked without zod) must give exactly what the schema
// gives for what it accepts, and leave to zod everything else: every body zod refuses, and every
// body zod would change (strip a field of).
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { countTokensRequestSchema, messagesRequestSchema } from '../../../gateway/messages/schema.js';
import { simpleRequest } from '../../../gateway/messages/simple-request.js';

const base = { model: 'sim-chat', max_tokens: 20, messages: [{ role: 'user', content: 'Hello there, how are you?' }] };

/** Bodies around the simple shape: each one field changed, added or left out. */
const BODIES: Record<string, unknown>[] = [
  base,
  { ...base, stream: true },
  { ...base, stream: false, system: 'Be brief.', temperature: 0, top_p: 1, top_k: 0 },
  { ...base, temperature: 0.7, top_p: 0.9, top_k: 40 },
  { ...base, temperature: -0 },
  { ...base, messages: [base.messages[0], { role: 'assistant', content: '' }, { role: 'system', content: 's' }, { role: 'user', content: 'x' }] },
  { ...base, model: 'm'.repeat(256) },
  { ...base, max_tokens: Number.MAX_SAFE_INTEGER },
  // Refused by the schema.
  { ...base, model: '' },
  { ...base, model: 'm'.repeat(257) },
  { ...base, model: 5 },
  { ...base, max_tokens: 0 },
  { ...base, max_tokens: -1 },
  { ...base, max_tokens: 1.5 },
  { ...base, max_tokens: 2 ** 53 },
  { ...base, max_tokens: '20' },
  { ...base, max_tokens: null },
  { model: base.model, messages: base.messages },
  { ...base, messages: [] },
  { ...base, messages: {} },
  { ...base, messages: [null] },
  { ...base, messages: [[]] },
  { ...base, messages: ['hi'] },
  { ...base, messages: [{ role: 'tool', content: 'x' }] },
  { ...base, messages: [{ role: 'user' }] },
  { ...base, messages: [{ content: 'x' }] },
  { ...base, messages: [{ role: 'user', content: 5 }] },
  { ...base, messages: [{ role: 'user', content: null }] },
  { ...base, stream: 'true' },
  { ...base, stream: null },
  { ...base, system: 5 },
  { ...base, system: null },
  { ...base, temperature: 1.5 },
  { ...base, temperature: -0.1 },
  { ...base, temperature: '0.5' },
  { ...base, top_p: 2 },
  { ...base, top_k: -1 },
  { ...base, top_k: 1.5 },
  { ...base, top_k: 2 ** 53 },
  // Accepted by the schema with changes or other shapes: zod's to parse.
  { ...base, messages: [{ role: 'user', content: 'x', cache_control: { type: 'ephemeral' } }] },
  { ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'x' }] }] },
  { ...base, system: [{ type: 'text', text: 's' }] },
  { ...base, metadata: { user_id: 'u' } },
  { ...base, stop_sequences: ['x'] },
  { ...base, unknown_field: 1 },
  { ...base, thinking: { type: 'disabled' } },
  JSON.parse(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"__proto__":{"a":1}}`) as Record<string, unknown>,
  JSON.parse(`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x","__proto__":{}}]}`) as Record<string, unknown>,
];

test('simpleRequest accepts only what the schema accepts unchanged, and gives what it gives', () => {
  for (const [required, schema] of [
    [true, messagesRequestSchema],
    [false, countTokensRequestSchema],
  ] as const) {
    let accepted = 0;
    for (const body of BODIES) {
      const json = JSON.parse(JSON.stringify(body)) as Record<string, unknown>;
      const simple = simpleRequest(json, required);
      const parsed = schema.safeParse(json);
      if (simple === undefined) continue;
      accepted++;
      assert.ok(parsed.success, `accepted what the schema refuses: ${JSON.stringify(body)}`);
      assert.deepEqual(simple, parsed.data, JSON.stringify(body));
    }
    assert.equal(accepted, required ? 8 : 9);
  }
});

test('a request parsed by the fast path translates like one parsed by zod', async () => {
  const { toChatRequest } = await import('../../../gateway/messages/translate-request.js');
  const { ThinkingSigner } = await import('../../../gateway/messages/signature.js');
  const signer = new ThinkingSigner('s');
  const entry = { name: 'sim-chat', servedName: 'served' } as Parameters<typeof toChatRequest>[1];
  for (const body of BODIES.slice(0, 8)) {
    const simple = simpleRequest(structuredClone(body), true)!;
    const parsed = messagesRequestSchema.parse(structuredClone(body));
    assert.equal(JSON.stringify(toChatRequest(simple, entry, signer)), JSON.stringify(toChatRequest(parsed, entry, signer)), JSON.stringify(body));
  }
});
