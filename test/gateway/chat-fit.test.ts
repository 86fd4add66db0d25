// max_tokens fitting on /v1/chat/completions (gateway/chat-fit.ts): off by default (the backend's
// own error passes through, as OpenAI clients expect), on with `x-rc-fit-max-tokens: 1` or the
// catalog entry's `fitMaxTokens`. Real gateway, real sims with a small context, the openai client.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { modelEntrySchema } from '../../lib/config.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { startFixture, type Fixture } from './fixture.js';

const CONTEXT = 200;
let fx: Fixture;
const FIT = { headers: { 'x-rc-fit-max-tokens': '1' } };

before(async () => {
  fx = await startFixture({
    sims: [{ fast: true, maxModelLen: CONTEXT }, { fast: true, maxModelLen: CONTEXT }],
    models: (sims) => [
      modelEntrySchema.parse({ name: 'm', upstreams: [sims[0]!.url] }),
      modelEntrySchema.parse({ name: 'fitted', upstreams: [sims[1]!.url], servedName: 'm', fitMaxTokens: true }),
    ],
  });
});
after(() => fx?.close());

const msgs = (words: number) => [{ role: 'user' as const, content: Array.from({ length: words }, (_, i) => `w${i}`).join(' ') }];

async function status(p: Promise<unknown>): Promise<{ status: number; message: string; code: unknown }> {
  try {
    await p;
    return { status: 200, message: '', code: null };
  } catch (err) {
    assert.ok(err instanceof OpenAI.APIError, String(err));
    return { status: err.status, message: err.message, code: err.code };
  }
}

test('off by default: max_tokens over the context is the backend\'s own 400', async () => {
  const r = await status(fx.client.chat.completions.create({ model: 'm', max_tokens: 1000, messages: msgs(10) }));
  assert.equal(r.status, 400);
});

test('x-rc-fit-max-tokens: max_tokens (and max_completion_tokens) lowered to what is left of the context', async () => {
  const n = countChatTokens(msgs(10));
  const c = await fx.client.chat.completions.create({ model: 'm', max_tokens: 1000, messages: msgs(10) }, FIT);
  assert.equal(c.usage?.prompt_tokens, n);
  assert.equal(fx.sims[0]!.stats.lastBody!.max_tokens, CONTEXT - n);
  await fx.client.chat.completions.create({ model: 'm', max_completion_tokens: 5000, messages: msgs(10) }, FIT);
  assert.equal(fx.sims[0]!.stats.lastBody!.max_completion_tokens, CONTEXT - n);
  // A request that fits is forwarded untouched.
  await fx.client.chat.completions.create({ model: 'm', max_tokens: 7, messages: msgs(10) }, FIT);
  assert.equal(fx.sims[0]!.stats.lastBody!.max_tokens, 7);
  // Streams too; the answer may end by length.
  const stream = await fx.client.chat.completions.create({ model: 'm', max_tokens: 1000, messages: msgs(CONTEXT - 20), stream: true }, FIT);
  let finish: string | null = null;
  for await (const chunk of stream) finish = chunk.choices[0]?.finish_reason ?? finish;
  assert.ok(finish === 'length' || finish === 'stop');
});

test('a prompt alone over the context: 400 context_length_exceeded, "prompt is too long"', async () => {
  const n = countChatTokens(msgs(CONTEXT));
  const before = fx.sims[0]!.stats.requests;
  const r = await status(fx.client.chat.completions.create({ model: 'm', max_tokens: 10, messages: msgs(CONTEXT) }, FIT));
  assert.equal(r.status, 400);
  assert.equal(r.code, 'context_length_exceeded');
  assert.match(r.message, new RegExp(`prompt is too long: ${n} tokens > ${CONTEXT - 1} maximum`));
  assert.equal(fx.sims[0]!.stats.requests, before, 'no completion reached the backend');
});

test('the catalog flag fitMaxTokens applies it without the header', async () => {
  const n = countChatTokens(msgs(10));
  await fx.client.chat.completions.create({ model: 'fitted', max_tokens: 1000, messages: msgs(10) });
  assert.equal(fx.sims[1]!.stats.lastBody!.max_tokens, CONTEXT - n);
  assert.equal(fx.sims[1]!.stats.lastBody!.model, 'm');
  const r = await status(fx.client.chat.completions.create({ model: 'fitted', messages: msgs(CONTEXT) }));
  assert.equal(r.code, 'context_length_exceeded');
});
