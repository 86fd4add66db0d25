// The sim as a GPU server a router can tell apart: prefill time from the uncached prompt tokens,
// a bounded batch (maxNumSeqs) with a FIFO queue, and vLLM's /metrics after known traffic.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { Pace } from '../../sim/pace.js';
import { startSim } from '../../sim/server.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { waitFor } from '../helpers.js';
import { postJson, scrape, simWithClient, startStream, user } from './sim-helpers.js';

test('Pace: the first token after ttftMs + uncached / prefillTokensPerSecond, then one per 1 / tokensPerSecond', () => {
  const pace = new Pace({ ttftMs: 80, tokensPerSecond: 50, prefillTokensPerSecond: 1000, fast: false });
  assert.equal(pace.firstTokenMs(0), 80);
  assert.equal(pace.firstTokenMs(500), 580);
  assert.equal(pace.tokenDueMs(500, 3), 640);
  assert.equal(pace.wholeAnswerDelayMs(500, 4), 640, 'a non-stream answer: when its last token is due');
  assert.equal(pace.wholeAnswerDelayMs(0, 0), 80);
});

test('the prefill delay comes from the uncached prompt tokens: a repeated prompt prefills only its last block', async () => {
  const sim = await startSim({ model: 'sim-test', ttftMs: 5, tokensPerSecond: 1e6, prefillTokensPerSecond: 4000, promptTokensDetails: true });
  try {
    const messages = [user('A long shared prefix. '.repeat(40))];
    const n = countChatTokens(messages);
    const body = { model: 'sim-test', messages, max_tokens: 2 };
    const t0 = performance.now();
    const first = await postJson(`${sim.url}/v1/chat/completions`, body);
    // Guaranteed by construction: the answer is not sent before its computed time.
    assert.ok(performance.now() - t0 >= (n * 1000) / 4000 - 2);
    assert.equal(sim.stats.lastFirstTokenMs, 5 + (n * 1000) / 4000, 'nothing cached: all n tokens prefilled');
    const second = await postJson(`${sim.url}/v1/chat/completions`, body);
    const cached = second.body.usage.prompt_tokens_details.cached_tokens;
    assert.equal(first.body.usage.prompt_tokens_details, null);
    assert.equal(cached, Math.floor((n - 1) / 16) * 16);
    assert.equal(sim.stats.lastFirstTokenMs, 5 + ((n - cached) * 1000) / 4000, 'only the uncached tokens prefilled');
  } finally {
    await sim.close();
  }
  const { sim: fast } = await simWithClient({ prefillTokensPerSecond: 1 });
  try {
    await postJson(`${fast.url}/v1/chat/completions`, { model: 'sim-test', messages: [user('x '.repeat(200))] });
    assert.equal(fast.stats.lastFirstTokenMs, 0, 'fast: no delays at all');
  } finally {
    await fast.close();
  }
});

test("recordFirstTokens keeps each generation's engine time to first token, its wait for a batch slot included; off, nothing is kept", async () => {
  const sim = await startSim({ model: 'sim-test', ttftMs: 5, tokensPerSecond: 20, prefillTokensPerSecond: 4000, maxNumSeqs: 1, recordFirstTokens: true });
  try {
    const messages = [user('A prompt to prefill. '.repeat(20))];
    const body = { model: 'sim-test', messages, max_tokens: 2 };
    // Two at once with one batch slot: the second waits for the first, which lasts at least its
    // ttftMs and one token interval (5 + 50 ms: timers never fire early); its own 5 ms come on top.
    await Promise.all([postJson(`${sim.url}/v1/chat/completions`, body), postJson(`${sim.url}/v1/chat/completions`, body)]);
    const [first, second] = sim.stats.firstTokenMs!;
    // A streamed answer names its own figure.
    const r = await fetch(`${sim.url}/v1/chat/completions`, { method: 'POST', body: JSON.stringify({ ...body, stream: true }) });
    await r.text();
    assert.equal(Number(r.headers.get('x-sim-first-token-ms')), Number(sim.stats.firstTokenMs!.at(-1)!.toFixed(1)));
    assert.equal(sim.stats.firstTokenMs!.length, 3);
    const n = countChatTokens(messages);
    assert.ok(first! >= 5 + (n * 1000) / 4000, `the first: at least its computed time (${first})`);
    assert.ok(second! >= 5 + 50 + 5, `the second: its wait for the slot comes on top (${second})`);
  } finally {
    await sim.close();
  }
  const plain = await startSim({ model: 'sim-test', fast: true });
  try {
    await postJson(`${plain.url}/v1/chat/completions`, { model: 'sim-test', messages: [user('hi')] });
    assert.equal(plain.stats.firstTokenMs, undefined);
  } finally {
    await plain.close();
  }
});

test('maxNumSeqs 1: a second request waits (running 1, waiting 1) and starts, in arrival order, when the first ends', async () => {
  const sim = await startSim({ model: 'sim-test', ttftMs: 0, tokensPerSecond: 5, maxNumSeqs: 1 });
  try {
    const body = (text: string) => ({ messages: [user(text)], max_tokens: 50, ignore_eos: true });
    const a = startStream(sim.url, body('first'));
    await waitFor(() => a.events.length >= 2);
    const b = startStream(sim.url, body('second'));
    await waitFor(() => sim.stats.waiting === 1);
    const c = startStream(sim.url, body('third'));
    await waitFor(() => sim.stats.waiting === 2);
    const m = await scrape(sim.url);
    assert.equal(m.value('vllm:num_requests_running'), 1);
    assert.equal(m.value('vllm:num_requests_waiting'), 2);
    assert.equal(b.events.length + c.events.length, 0, 'waiting requests get nothing yet');
    a.abort();
    await waitFor(() => b.events.length >= 1);
    assert.equal(c.events.length, 0, 'first come, first served');
    assert.equal(sim.stats.running, 1);
    assert.equal(sim.stats.waiting, 1);
    b.abort();
    await waitFor(() => c.events.length >= 1);
    c.abort();
    await waitFor(() => sim.stats.inFlight === 0);
    assert.equal(sim.stats.peakRunning, 1);
    assert.equal(sim.stats.running, 0);
  } finally {
    await sim.close();
  }
});

test('a waiting client that goes away leaves the queue; the next one takes the slot', async () => {
  const sim = await startSim({ model: 'sim-test', ttftMs: 0, tokensPerSecond: 5, maxNumSeqs: 1 });
  try {
    const body = { messages: [user('x')], max_tokens: 50, ignore_eos: true };
    const a = startStream(sim.url, body);
    await waitFor(() => a.events.length >= 2);
    const gone = startStream(sim.url, body);
    await waitFor(() => sim.stats.waiting === 1);
    const next = startStream(sim.url, body);
    await waitFor(() => sim.stats.waiting === 2);
    gone.abort();
    await waitFor(() => sim.stats.waiting === 1 && sim.stats.aborted === 1);
    assert.equal(sim.stats.running, 1, 'the first still runs');
    assert.equal((await scrape(sim.url)).value('vllm:num_requests_waiting'), 1);
    a.abort();
    await waitFor(() => next.events.length >= 1);
    assert.equal(gone.events.length, 0, 'the one that left never ran');
    assert.equal(sim.stats.waiting, 0);
    next.abort();
    await waitFor(() => sim.stats.inFlight === 0);
  } finally {
    await sim.close();
  }
});

test('close() ends waiting requests too, and none of them starts afterwards', async () => {
  const sim = await startSim({ model: 'sim-test', ttftMs: 0, tokensPerSecond: 5, maxNumSeqs: 1 });
  const body = { messages: [user('x')], max_tokens: 50, ignore_eos: true };
  const a = startStream(sim.url, body);
  await waitFor(() => a.events.length >= 2);
  const b = startStream(sim.url, body);
  await waitFor(() => sim.stats.waiting === 1);
  await sim.close();
  assert.equal(sim.stats.inFlight, 0);
  assert.equal(sim.stats.waiting, 0);
  await Promise.all([a.done, b.done]);
  assert.equal(b.events.length, 0);
});

test('GET /metrics: vLLM names, labels, types and values after known traffic', async () => {
  const { sim } = await simWithClient({ model: 'sim-test', kvCacheBlocks: 1000 });
  try {
    const messages = [user('Metrics, please. '.repeat(10))];
    const n = countChatTokens(messages);
    for (let i = 0; i < 2; i++) await postJson(`${sim.url}/v1/chat/completions`, { model: 'sim-test', messages });
    const hits = Math.floor((n - 1) / 16) * 16;
    const m = await scrape(sim.url);
    assert.equal(m.contentType, 'text/plain; version=0.0.4; charset=utf-8');
    assert.equal(m.value('vllm:num_requests_running'), 0);
    assert.equal(m.value('vllm:num_requests_waiting'), 0);
    assert.equal(m.value('vllm:kv_cache_usage_perc'), 0);
    assert.equal(m.value('vllm:prefix_cache_queries_total'), 2 * n, 'every prompt token is a query');
    assert.equal(m.value('vllm:prefix_cache_hits_total'), hits);
    assert.ok(m.value('vllm:prefix_cache_queries_created')! > 1e9);
    assert.deepEqual([sim.stats.prefixCacheQueries, sim.stats.prefixCacheHits], [2 * n, hits]);
    const labels = '{model_name="sim-test",engine="0"}';
    for (const line of [
      '# TYPE vllm:num_requests_running gauge',
      `vllm:num_requests_running${labels} 0.0`,
      '# TYPE vllm:num_requests_waiting gauge',
      '# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.',
      '# TYPE vllm:kv_cache_usage_perc gauge',
      '# TYPE vllm:prefix_cache_queries_total counter',
      `vllm:prefix_cache_queries_total${labels} ${2 * n}.0`,
      '# TYPE vllm:prefix_cache_hits_total counter',
      `vllm:prefix_cache_hits_total${labels} ${hits}.0`,
      '# TYPE vllm:prefix_cache_hits_created gauge',
    ])
      assert.ok(m.text.split('\n').includes(line), line);
  } finally {
    await sim.close();
  }
  const { sim: plain } = await simWithClient({ prefixCaching: false });
  try {
    await postJson(`${plain.url}/v1/chat/completions`, { model: 'sim-test', messages: [user('x')] });
    assert.equal((await scrape(plain.url)).value('vllm:prefix_cache_queries_total'), 0, 'no prefix caching: no queries, as vLLM');
  } finally {
    await plain.close();
  }
});

test('instanceName: streamed answers name their sim in x-sim-instance; without it, no such header', async () => {
  const named = await startSim({ model: 'sim-test', fast: true, instanceName: 'sim-3' });
  const plain = await startSim({ model: 'sim-test', fast: true });
  try {
    const body = { model: 'sim-test', messages: [user('hello')], max_tokens: 2, stream: true };
    const a = await postJson(`${named.url}/v1/chat/completions`, body);
    const b = await postJson(`${plain.url}/v1/chat/completions`, body);
    assert.equal(a.status, 200);
    assert.equal(a.headers.get('x-sim-instance'), 'sim-3');
    assert.equal(b.status, 200);
    assert.equal(b.headers.get('x-sim-instance'), null);
  } finally {
    await named.close();
    await plain.close();
  }
});
