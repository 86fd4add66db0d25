// The sim's model of vLLM's automatic prefix caching: a repeated prompt prefix is reported as
// usage.prompt_tokens_details.cached_tokens, in whole blocks of 16 tokens, never the last token,
// with the report on (vLLM's --enable-prompt-tokens-details: `promptTokensDetails`).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import type OpenAI from 'openai';
import { PrefixCache } from '../../sim/prefix-cache.js';
import type { SimServer } from '../../sim/server.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { simWithClient, user } from './sim-helpers.js';

let sim: SimServer;
let client: OpenAI;
let plainSim: SimServer;
let plainClient: OpenAI;
before(async () => {
  ({ sim, client } = await simWithClient({ model: 'sim-test', promptTokensDetails: true }));
  ({ sim: plainSim, client: plainClient } = await simWithClient({ model: 'sim-test', prefixCaching: false, promptTokensDetails: true }));
});
after(async () => {
  await sim.close();
  await plainSim.close();
});

const ids = (n: number, offset = 0) => Array.from({ length: n }, (_, i) => i + offset);

test('PrefixCache: whole blocks of the common prefix, never the last token, LRU eviction', () => {
  const c = new PrefixCache(16, 4);
  assert.equal(c.lookup(ids(40)), 0, 'first sight: nothing cached');
  assert.equal(c.lookup(ids(40)), 32, 'the same 40 tokens: 2 full blocks');
  assert.equal(c.lookup(ids(32)), 16, 'exactly 2 blocks: the last token is computed, so 1 block counts');
  assert.equal(c.lookup([...ids(20), 999, ...ids(30, 21)]), 16, 'a change in block 2: only block 1');
  assert.equal(c.lookup([7, ...ids(47)]), 0, 'a change in the first token: nothing (blocks chain)');
  assert.equal(c.lookup(ids(15)), 0, 'shorter than a block');
  // Capacity 4 blocks: after new prompts the oldest blocks are gone.
  c.lookup(ids(64, 1000));
  assert.equal(c.lookup(ids(40)), 0);
});

test("a repeated prompt reports cached_tokens (non-stream, and in the stream's final usage only)", async () => {
  const messages = [{ role: 'system' as const, content: 'You are terse. '.repeat(20) }, user('Say something.')];
  const n = countChatTokens(messages);
  const first = await client.chat.completions.create({ model: 'sim-test', messages });
  assert.equal(first.usage!.prompt_tokens, n);
  assert.equal(first.usage!.prompt_tokens_details, null, 'nothing cached: no details (as vLLM)');
  const second = await client.chat.completions.create({ model: 'sim-test', messages });
  assert.equal(second.usage!.prompt_tokens_details?.cached_tokens, Math.floor((n - 1) / 16) * 16);

  const stream = (await client.chat.completions.create({
    model: 'sim-test',
    messages,
    stream: true,
    stream_options: { include_usage: true, continuous_usage_stats: true },
  } as never)) as unknown as AsyncIterable<any>;
  const usages: any[] = [];
  for await (const chunk of stream) if (chunk.usage) usages.push(chunk.usage);
  assert.equal(usages.at(-1).prompt_tokens_details.cached_tokens, Math.floor((n - 1) / 16) * 16);
  assert.ok(
    usages.slice(0, -1).every((u) => u.prompt_tokens_details === undefined),
    'continuous usage carries no prompt details',
  );

  // A longer conversation with the same start: the shared blocks are cached.
  const longer = [...messages, { role: 'assistant' as const, content: 'Something.' }, user('More.')];
  const third = await client.chat.completions.create({ model: 'sim-test', messages: longer });
  const cached = third.usage!.prompt_tokens_details?.cached_tokens ?? 0;
  assert.ok(cached >= Math.floor((n - 8) / 16) * 16 && cached % 16 === 0 && cached < countChatTokens(longer), String(cached));
});

test('without --enable-prompt-tokens-details (the default) nothing is reported, cached or not', async () => {
  const { sim: quiet, client: quietClient } = await simWithClient({ model: 'sim-test' });
  try {
    const messages = [user('Repeat me quietly. '.repeat(30))];
    await quietClient.chat.completions.create({ model: 'sim-test', messages });
    const again = await quietClient.chat.completions.create({ model: 'sim-test', messages });
    assert.equal(again.usage!.prompt_tokens_details, null);
    assert.ok(quiet.stats.prefixCacheHits > 0, 'the cache served them all the same');
  } finally {
    await quiet.close();
  }
});

test('prefixCaching: false reports nothing cached', async () => {
  const messages = [user('Repeat me. '.repeat(30))];
  await plainClient.chat.completions.create({ model: 'sim-test', messages });
  const again = await plainClient.chat.completions.create({ model: 'sim-test', messages });
  assert.equal(again.usage!.prompt_tokens_details, null);
});
