// The sim's KV cache (sim/kv-cache.ts, sim/prefix-cache.ts): a capacity in blocks, LRU eviction
// of cached blocks nobody runs on, the blocks of running requests counted as usage and never
// evicted, and the cache probe that reads it without changing it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { KvCache } from '../../sim/kv-cache.js';
import { PrefixCache } from '../../sim/prefix-cache.js';
import { startSim } from '../../sim/server.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { waitFor } from '../helpers.js';
import { postJson, scrape, simWithClient, startStream, user } from './sim-helpers.js';

const ids = (n: number, offset = 0) => Array.from({ length: n }, (_, i) => i + offset);

test('PrefixCache: at capacity the least recently used blocks go first (a lookup makes blocks recent)', () => {
  const c = new PrefixCache(16, 4);
  const a = ids(40);
  const b = ids(40, 1000);
  c.lookup(a);
  c.lookup(b);
  assert.equal(c.size, 4);
  c.lookup(a); // a is now more recent than b
  c.lookup(ids(40, 2000)); // two new blocks: b's two go
  assert.equal(c.size, 4);
  assert.equal(c.peek(a), 32, 'a stayed');
  assert.equal(c.peek(b), 0, 'b, the least recently used, was evicted');
});

test('KvCache: a running request holds its prompt and output blocks (usage); freed, they stay cached, tail first out', () => {
  const kv = new KvCache(4, 16, true);
  const held = kv.admit(48, ids(48), 10); // 3 full prompt blocks + ceil(58 / 16) - 3 = 1 more
  assert.equal(held.cachedTokens, 0);
  assert.equal(kv.usedBlocks, 4);
  assert.equal(kv.usage, 1);
  held.release();
  assert.equal(kv.usedBlocks, 0);
  assert.equal(kv.usage, 0);
  assert.equal(kv.peek(ids(49)), 48, 'freed blocks stay cached');
  // A new request needs 2 blocks beyond its 1 prompt block (cached from now on): 4 - 2 = 2
  // cached blocks may stay. The freed prompt's tail blocks go first, its first block stays.
  const other = kv.admit(17, ids(17, 500), 31);
  assert.equal(kv.usedBlocks, 3);
  assert.equal(kv.peek(ids(49)), 16, 'blocks 2 and 3 of the old prompt evicted, block 1 kept');
  other.release();
});

test('KvCache: blocks of running requests are never evicted; usage reads 1 when they exceed the capacity', () => {
  const kv = new KvCache(2, 16, true);
  const a = kv.admit(33, ids(33), 0);
  const b = kv.admit(33, ids(33, 100), 0);
  assert.equal(kv.usedBlocks, 6);
  assert.equal(kv.usage, 1);
  assert.equal(kv.peek(ids(33)), 32, 'the running prompt is still cached');
  a.release();
  b.release();
  assert.equal(kv.usedBlocks, 0);
  const none = new KvCache(10, 16, false);
  const c = none.admit(40, undefined, 8);
  assert.equal(c.cachedTokens, 0);
  assert.equal(none.usedBlocks, 3, 'without prefix caching the blocks are counted all the same');
});

test('a running stream counts its blocks in kv_cache_usage_perc; they are freed when it ends', async () => {
  const sim = await startSim({ model: 'sim-test', ttftMs: 0, tokensPerSecond: 5, kvCacheBlocks: 100 });
  try {
    const messages = [user('Count the blocks of this prompt, please.')];
    const n = countChatTokens(messages);
    // 50 tokens at 5 per second: still running when scraped, however loaded the machine.
    const s = startStream(sim.url, { messages, max_tokens: 50, ignore_eos: true });
    await waitFor(() => s.events.length >= 2);
    const m = await scrape(sim.url);
    assert.equal(m.value('vllm:kv_cache_usage_perc'), Math.ceil((n + 50) / 16) / 100);
    assert.equal(m.value('vllm:num_requests_running'), 1);
    s.abort();
    await waitFor(() => sim.stats.inFlight === 0);
    assert.equal((await scrape(sim.url)).value('vllm:kv_cache_usage_perc'), 0);
  } finally {
    await sim.close();
  }
});

/** A one-message chat of 33 to 47 tokens (two full blocks), starting with `tag`. */
function twoBlockPrompt(tag: string) {
  let words = '';
  while (countChatTokens([user(`${tag}${words}`)]) < 36) words += ' w';
  const messages = [user(`${tag}${words}`)];
  const n = countChatTokens(messages);
  assert.ok(n >= 33 && n <= 47, String(n));
  return messages;
}

test('POST /rc/cache-probe: cached and prompt tokens of a prompt, leaving the cache and its LRU order unchanged', async () => {
  // 6 blocks: three two-block prompts, each also holding 1 block for its output while it runs.
  const { sim } = await simWithClient({ kvCacheBlocks: 6 });
  try {
    const [a, b, c] = ['Alpha', 'Bravo', 'Charlie'].map(twoBlockPrompt) as [any, any, any];
    const probe = async (messages: unknown) => (await postJson(`${sim.url}/rc/cache-probe`, { messages })).body;
    const generate = (messages: unknown) => postJson(`${sim.url}/v1/chat/completions`, { model: 'sim-test', messages, max_tokens: 1 });
    assert.deepEqual(await probe(a), { cached_tokens: 0, prompt_tokens: countChatTokens(a) });
    await generate(a);
    await generate(b);
    const stats = { ...sim.stats };
    assert.deepEqual(await probe(a), { cached_tokens: 32, prompt_tokens: countChatTokens(a) });
    assert.equal(sim.stats.prefixCacheQueries, stats.prefixCacheQueries, 'a probe is no query');
    assert.equal(sim.stats.requests, stats.requests);
    // c needs 3 blocks: one of the 4 cached goes, the least recent: a's (the probe did not make
    // a recent; had it, b's would have gone). a freed its tail first: a keeps its first block.
    await generate(c);
    assert.equal((await probe(a)).cached_tokens, 16);
    assert.equal((await probe(b)).cached_tokens, 32);
    assert.equal((await probe(c)).cached_tokens, 32);
    assert.equal((await postJson(`${sim.url}/rc/cache-probe`, { model: 'other', messages: a })).status, 404);
    assert.equal((await postJson(`${sim.url}/rc/cache-probe`, { messages: 'x' })).status, 400);
  } finally {
    await sim.close();
  }
  const { sim: plain } = await simWithClient({ prefixCaching: false });
  try {
    const messages = [user('Repeat me. '.repeat(30))];
    await postJson(`${plain.url}/v1/chat/completions`, { model: 'sim-test', messages });
    assert.equal((await postJson(`${plain.url}/rc/cache-probe`, { messages })).body.cached_tokens, 0);
  } finally {
    await plain.close();
  }
});
