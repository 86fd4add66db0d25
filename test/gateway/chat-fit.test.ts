// max_tokens fitting on /v1/chat/completions (gateway/chat-fit.ts): off by default (the backend's
// own error passes through, as OpenAI clients expect), on with `x-rc-fit-max-tokens: 1` or the
// catalog entry's `fitMaxTokens`. Real gateway, real sims with a small context, the openai client.
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { modelEntrySchema } from '../../lib/config.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { startFixture, type Fixture } from './fixture.js';

const CONTEXT = 200;
let fx: Fixture;
/** A backend without /tokenize: counts what it is asked, answers completions with a canned body. */
let plain: Server;
const plainHits = { tokenize: 0, completions: 0, lastMaxTokens: undefined as unknown };
const FIT = { headers: { 'x-rc-fit-max-tokens': '1' } };

before(async () => {
  plain = createServer((req, res) => {
    let body = '';
    req.on('data', (d: Buffer) => (body += d));
    req.on('end', () => {
      if (req.url === '/tokenize') {
        plainHits.tokenize++;
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"detail":"Not Found"}');
        return;
      }
      plainHits.completions++;
      plainHits.lastMaxTokens = (JSON.parse(body) as { max_tokens?: number }).max_tokens;
      res
        .writeHead(200, { 'content-type': 'application/json' })
        .end(
          '{"id":"x","object":"chat.completion","created":0,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}',
        );
    });
  });
  await new Promise<void>((r) => plain.listen(0, '127.0.0.1', r));
  const plainUrl = `http://127.0.0.1:${(plain.address() as AddressInfo).port}`;
  fx = await startFixture({
    sims: [
      { fast: true, maxModelLen: CONTEXT },
      { fast: true, maxModelLen: CONTEXT },
    ],
    models: (sims) => [
      modelEntrySchema.parse({ name: 'm', upstreams: [sims[0]!.url] }),
      modelEntrySchema.parse({ name: 'fitted', upstreams: [sims[1]!.url], servedName: 'm', fitMaxTokens: true }),
      modelEntrySchema.parse({ name: 'plain', upstreams: [plainUrl], servedName: 'm', fitMaxTokens: true }),
    ],
  });
});
after(async () => {
  await fx?.close();
  await new Promise((r) => plain?.close(r));
});

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

test("off by default: max_tokens over the context is the backend's own 400", async () => {
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

test('a backend without /tokenize: forwarded as it is, and not asked again', async () => {
  for (let i = 0; i < 3; i++) await fx.client.chat.completions.create({ model: 'plain', max_tokens: 100_000, messages: msgs(10) });
  assert.equal(plainHits.completions, 3);
  assert.equal(plainHits.lastMaxTokens, 100_000, 'the backend judges');
  assert.equal(plainHits.tokenize, 1);
});
