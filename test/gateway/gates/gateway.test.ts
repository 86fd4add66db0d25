// The gates inside a real gateway (in process) in front of a real sim: x-ratelimit-* headers on
// admitted responses, the 429 bodies of both surfaces, and reconciliation with the real usage.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { FakeClock } from '../../../lib/clock.js';
import { createGate, gateMetrics } from '../../../gateway/gates/index.js';
import { startFixture, post, HELLO, type FixtureOptions } from '../fixture.js';
import { modelEntrySchema } from '../../../lib/config.js';
import { generateKey, hashKey } from '../../../lib/keys.js';
import { createLogger } from '../../../lib/log.js';
import { startSim } from '../../../sim/server.js';
import { createGateway } from '../../../gateway/server.js';
import { memoryKeySource } from '../../../gateway/auth/keys.js';
import { messagesRoutes } from '../../../gateway/messages/routes.js';
import { gateConfig } from './fixtures.js';
import { waitFor } from '../../helpers.js';

const BIG = 1_000_000_000;

/** A gateway in process in front of a sim, its gates with these limits on a fake clock; closed after the test. */
async function gatedFixture(t: TestContext, limits: { rpm: number; tpm: number }, options: Omit<FixtureOptions, 'gate'> = {}) {
  const clock = new FakeClock();
  const gate = createGate(gateConfig({ ...limits, daily: BIG }), { clock });
  const f = await startFixture({ ...options, gate });
  t.after(async () => {
    await f.close();
    await gate.close();
  });
  return { clock, gate, f };
}

test('concurrent responses each carry their own x-ratelimit-* line (the line is written through a reused buffer)', async (t) => {
  const { f } = await gatedFixture(t, { rpm: 40, tpm: BIG });
  const url = `${f.gateway.url}/v1/chat/completions`;
  const auth = { authorization: `Bearer ${f.key}` };
  // Twelve at once, streams and whole bodies mixed: each line is as long as the others (two-digit
  // counts), so every one is written through the same scratch bytes.
  const replies = await Promise.all(
    Array.from({ length: 12 }, (_, i) => post(url, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 4, stream: i % 2 === 0 }), auth)),
  );
  const remaining = replies.map((r) => {
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-ratelimit-limit-requests'), '40');
    return Number(r.headers.get('x-ratelimit-remaining-requests'));
  });
  assert.deepEqual(
    remaining.sort((a, b) => a - b),
    Array.from({ length: 12 }, (_, i) => 28 + i),
  );
});

test('chat completions: headers on success, 429 naming the gate, usage reconciled', async (t) => {
  const { clock, gate, f } = await gatedFixture(t, { rpm: 2, tpm: BIG });
  const url = `${f.gateway.url}/v1/chat/completions`;
  const auth = { authorization: `Bearer ${f.key}` };
  const body = JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 16 });

  const ok = await post(url, body, auth);
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.headers.get('x-ratelimit-limit-requests'), '2');
  assert.equal(ok.headers.get('x-ratelimit-remaining-requests'), '1');
  assert.equal(ok.headers.get('x-ratelimit-limit-tokens'), String(BIG));
  assert.ok(ok.headers.get('x-ratelimit-reset-requests'));
  const usage = ok.json.usage as { prompt_tokens: number; completion_tokens: number };

  // A stream: its usage is reconciled too.
  const stream = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 8, stream: true, stream_options: { include_usage: true } });
  let streamUsage: { prompt_tokens: number; completion_tokens: number } | undefined;
  for await (const chunk of stream) if (chunk.usage) streamUsage = chunk.usage;
  assert.ok(streamUsage);

  const refused = await post(url, body, auth);
  assert.equal(refused.status, 429);
  assert.equal(refused.headers.get('retry-after'), '30');
  assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
  assert.equal(refused.json.error.code, 'request_rate_limit_exceeded');
  assert.equal(refused.json.error.message, 'Model API rate limit exceeded; please retry later');
  assert.equal(refused.json.error.type, 'rate_limit_error');
  assert.match(gateMetrics(), /rc_gate_denied_total\{code="request_rate_limit_exceeded"\} [1-9]/);

  const expected = usage.prompt_tokens + usage.completion_tokens + streamUsage.prompt_tokens + streamUsage.completion_tokens;
  const u = await waitFor(async () => {
    const x = await gate.readUsage(f.accountId);
    return x.tokens_reserved === 0 ? x : undefined;
  });
  assert.equal(u!.tokens_used, expected);
  assert.equal(u!.requests, 2);
  assert.deepEqual(Object.keys(u!.by_model), ['m']);

  clock.advance(30_000);
  assert.equal((await post(url, body, auth)).status, 200);
});

test('messages: the 429 is messages-shaped and the daily cap has its own code', async (t) => {
  const clock = new FakeClock(Date.UTC(2026, 0, 1, 12));
  const gate = createGate(gateConfig({ rpm: BIG, tpm: BIG, daily: 1000 }), { clock });
  const logger = createLogger('silent');
  const sim = await startSim({ model: 'm', fast: true, logger });
  const key = generateKey();
  const gateway = await createGateway({
    port: 0,
    logger,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url] })],
    keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: 5 }]),
    gate,
    routes: [messagesRoutes()],
  });
  t.after(async () => {
    await gateway.close();
    await sim.close();
    await gate.close();
  });
  const url = `${gateway.url}/v1/messages`;
  const headers = { 'x-api-key': key, 'msgproto-version': '2023-06-01' };
  const body = (maxTokens: number) => JSON.stringify({ model: 'm', max_tokens: maxTokens, messages: [{ role: 'user', content: 'Hi' }] });

  const ok = await post(url, body(16), headers);
  assert.equal(ok.status, 200, ok.text);
  assert.equal(ok.headers.get('x-ratelimit-limit-requests'), String(BIG));
  const used = ok.json.usage.input_tokens + ok.json.usage.output_tokens;
  const u = await waitFor(async () => {
    const x = await gate.readUsage(5);
    return x.tokens_reserved === 0 ? x : undefined;
  });
  assert.equal(u!.tokens_used, used);

  const refused = await post(url, body(5000), headers); // the reservation alone passes the cap
  assert.equal(refused.status, 429, refused.text);
  assert.equal(refused.headers.get('retry-after'), String(12 * 3600));
  assert.equal(refused.headers.get('x-ratelimit-limit-tokens'), String(BIG));
  assert.deepEqual(refused.json, { type: 'error', error: { type: 'rate_limit_error', message: 'Model API rate limit exceeded; please retry later' } });
});

test('a stream the client cuts short gives back what it did not use', async (t) => {
  const { gate, f } = await gatedFixture(t, { rpm: BIG, tpm: 10_000 }, { sims: [{ ttftMs: 0, tokensPerSecond: 200 }] });
  const controller = new AbortController();
  const stream = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 4000, stream: true, ignore_eos: true } as never, {
    signal: controller.signal,
  });
  let chunks = 0;
  try {
    for await (const _ of stream as unknown as AsyncIterable<unknown>) if (++chunks === 3) controller.abort();
  } catch {
    // the abort may surface as an error or as the end of the iteration
  }
  // At least 3: an event that arrived in the same read as the third is yielded before the abort bites.
  assert.ok(chunks >= 3, `read ${chunks} chunks`);
  const u = await waitFor(async () => {
    const x = await gate.readUsage(f.accountId);
    return x.tokens_reserved === 0 ? x : undefined;
  });
  assert.ok(u!.tokens_used < 1000, `charged ${u!.tokens_used} of a 4000+ token reservation`);
  // The bucket got the rest back: a request of 9000 tokens fits at once (no time has passed).
  const next = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 8000 }), {
    authorization: `Bearer ${f.key}`,
  });
  assert.equal(next.status, 200, next.text);
});
