// Issue 14, "The gates": the attacks of an account with a key, through a real gateway in front of
// a real sim. An aborted stream is charged what was relayed and cancels the backend request;
// count_tokens meets the request-rate gate; a request never generates more than its account has
// left (daily cap and token bucket), and nothing left means 429 before any backend is reached.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FakeClock } from '../../../lib/clock.js';
import { modelEntrySchema } from '../../../lib/config.js';
import { generateKey, hashKey } from '../../../lib/keys.js';
import { createLogger } from '../../../lib/log.js';
import { startSim, type SimOptions, type SimServer } from '../../../sim/server.js';
import { createGateway, type Gateway } from '../../../gateway/server.js';
import { memoryKeySource } from '../../../gateway/auth/keys.js';
import { messagesRoutes } from '../../../gateway/messages/routes.js';
import { createGate, type LimitGate } from '../../../gateway/gates/index.js';
import { admitted, denied, gateConfig, makeGate, type Limits } from './fixtures.js';
import { post } from '../fixture.js';
import { waitFor } from '../../helpers.js';

const BIG = 1_000_000_000;
const ACCOUNT = 7;

interface Setup {
  gateway: Gateway;
  sim: SimServer;
  gate: LimitGate;
  chat: string;
  messages: string;
  count: string;
  bearer: Record<string, string>;
  xApiKey: Record<string, string>;
  /** The day's usage once nothing is reserved any more. */
  settledUsage(): Promise<{ tokens_used: number; requests: number; daily_cap: number }>;
}

async function setup(t: import('node:test').TestContext, limits: Limits, sim: SimOptions = { fast: true }): Promise<Setup> {
  const clock = new FakeClock(Date.UTC(2026, 0, 1, 12));
  const gate = createGate(gateConfig(limits), { clock });
  const logger = createLogger('silent');
  const s = await startSim({ model: 'm', logger, ...sim });
  const key = generateKey();
  const gateway = await createGateway({
    port: 0,
    logger,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [s.url] })],
    keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: ACCOUNT }]),
    gate,
    routes: [messagesRoutes()],
  });
  t.after(async () => {
    await gateway.close();
    await s.close();
    await gate.close();
  });
  return {
    gateway,
    sim: s,
    gate,
    chat: `${gateway.url}/v1/chat/completions`,
    messages: `${gateway.url}/v1/messages`,
    count: `${gateway.url}/v1/messages/count_tokens`,
    bearer: { authorization: `Bearer ${key}` },
    xApiKey: { 'x-api-key': key, 'msgproto-version': '2023-06-01' },
    settledUsage: async () =>
      (await waitFor(async () => {
        const u = await gate.readUsage(ACCOUNT);
        return u.tokens_reserved === 0 ? u : undefined;
      }))!,
  };
}

/** Reads a streamed response until `events` SSE events have arrived, then aborts it. */
async function readThenAbort(url: string, body: string, headers: Record<string, string>, events: number): Promise<number> {
  const ac = new AbortController();
  const r = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers }, signal: ac.signal });
  assert.equal(r.status, 200);
  const reader = r.body!.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let seen = 0;
  while (seen < events) {
    const { value, done } = await reader.read();
    if (done) break;
    text += decoder.decode(value, { stream: true });
    seen = text.split('\n\n').length - 1;
  }
  ac.abort();
  await reader.cancel().catch(() => {});
  return seen;
}

test('an aborted chat stream is charged what was relayed, and the backend request is cancelled', async (t) => {
  const s = await setup(t, { rpm: BIG, tpm: BIG, daily: BIG }, { ttftMs: 0, tokensPerSecond: 2000 });
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Tell me a long story' }], max_tokens: 20000, stream: true, ignore_eos: true });
  const seen = await readThenAbort(s.chat, body, s.bearer, 150);
  assert.ok(seen >= 150, `saw ${seen} events`);
  await waitFor(() => s.sim.stats.aborted === 1); // the backend saw the cancel
  const u = await s.settledUsage();
  // Charged at least the 150 relayed events (each one decoding step), far less than the reservation.
  assert.ok(u.tokens_used >= 150 && u.tokens_used < 20000, `charged ${u.tokens_used}`);
});

test('an aborted messages stream is charged what was relayed, and the backend request is cancelled', async (t) => {
  // Slow enough that the sim's natural answer (a few dozen tokens) is still running at the abort.
  const s = await setup(t, { rpm: BIG, tpm: BIG, daily: BIG }, { ttftMs: 0, tokensPerSecond: 40 });
  const body = JSON.stringify({ model: 'm', max_tokens: 20000, stream: true, messages: [{ role: 'user', content: 'Tell me a long story' }] });
  const seen = await readThenAbort(s.messages, body, s.xApiKey, 6);
  assert.ok(seen >= 6, `saw ${seen} events`);
  await waitFor(() => s.sim.stats.aborted === 1);
  const u = await s.settledUsage();
  assert.ok(u.tokens_used >= 5 && u.tokens_used < 20000, `charged ${u.tokens_used}`);
});

test('count_tokens counts against the request-rate gate', async (t) => {
  const s = await setup(t, { rpm: 3, tpm: BIG, daily: BIG });
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }] });
  for (let i = 0; i < 3; i++) {
    const ok = await post(s.count, body, s.xApiKey);
    assert.equal(ok.status, 200, ok.text);
    assert.equal(ok.headers.get('x-ratelimit-remaining-requests'), String(2 - i));
  }
  s.sim.stats.lastBody = undefined;
  const refused = await post(s.count, body, s.xApiKey);
  assert.equal(refused.status, 429, refused.text);
  assert.ok(Number(refused.headers.get('retry-after')) >= 1);
  assert.deepEqual(refused.json, { type: 'error', error: { type: 'rate_limit_error', message: 'Model API rate limit exceeded; please retry later' } });
  assert.equal(s.sim.stats.lastBody, undefined, '/tokenize was not reached');
  // The same budget as the other routes: a completion is refused too.
  const chat = await post(s.chat, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4 }), s.bearer);
  assert.equal(chat.status, 429);
  assert.equal(chat.json.error.code, 'request_rate_limit_exceeded');
  // Counting spends no tokens.
  assert.equal((await s.settledUsage()).tokens_used, 0);
});

test('daily cap: a request without max_tokens generates no more than what is left, then 429 before the backend', async (t) => {
  const cap = 2000;
  const s = await setup(t, { rpm: BIG, tpm: BIG, daily: cap });
  // min_tokens above the cap: on the old code the backend generated past it (2809 of 2000).
  const greedy = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], ignore_eos: true });
  const first = await post(s.chat, greedy, s.bearer);
  assert.equal(first.status, 200, first.text);
  const forwarded = s.sim.stats.lastBody!.max_tokens as number;
  assert.ok(forwarded > 0 && forwarded < cap, `forwarded max_tokens ${forwarded}`);
  const u = await s.settledUsage();
  assert.equal(u.tokens_used, first.json.usage.total_tokens);
  assert.ok(u.tokens_used <= cap, `used ${u.tokens_used} of a cap of ${cap}`);
  // Nothing (or almost nothing) is left: once nothing is, 429 and the backend is not reached.
  let last = first;
  for (let i = 0; i < 5 && last.status === 200; i++) last = await post(s.chat, greedy, s.bearer);
  assert.equal(last.status, 429, last.text);
  assert.equal(last.json.error.code, 'daily_token_cap_exceeded');
  const sent = s.sim.stats.requests;
  const again = await post(s.chat, greedy, s.bearer);
  assert.equal(again.status, 429);
  assert.equal(s.sim.stats.requests, sent, 'the backend was not reached');
  assert.ok((await s.settledUsage()).tokens_used <= cap);
});

test('daily cap: min_tokens beyond what is left cannot push usage past the cap', async (t) => {
  const cap = 2000;
  const s = await setup(t, { rpm: BIG, tpm: BIG, daily: cap });
  const r = await post(s.chat, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], min_tokens: 2500 }), s.bearer);
  // The backend refuses min_tokens above the bounded max_tokens (as vLLM does): nothing generated.
  assert.equal(r.status, 400, r.text);
  assert.ok((await s.settledUsage()).tokens_used <= cap);
});

test('token bucket: max_tokens larger than the whole bucket is bounded to what the bucket holds, on both protocols', async (t) => {
  const tpm = 3000;
  const s = await setup(t, { rpm: BIG, tpm, daily: BIG });
  // A full bucket lets a request larger than itself in; it may not generate more than the bucket holds.
  const chat = await post(s.chat, JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 20000, ignore_eos: true }), s.bearer);
  assert.equal(chat.status, 200, chat.text);
  assert.ok(chat.json.usage.total_tokens <= tpm, `generated ${chat.json.usage.total_tokens} with ${tpm} in the bucket`);
  assert.ok((s.sim.stats.lastBody!.max_tokens as number) < tpm);

  const s2 = await setup(t, { rpm: BIG, tpm, daily: BIG });
  const msg = await post(s2.messages, JSON.stringify({ model: 'm', max_tokens: 20000, messages: [{ role: 'user', content: 'Hi' }] }), s2.xApiKey);
  assert.equal(msg.status, 200, msg.text);
  assert.ok((s2.sim.stats.lastBody!.max_tokens as number) < tpm, `forwarded ${String(s2.sim.stats.lastBody!.max_tokens)}`);
});

test('daily cap at the boundary: the last tokens of the day are usable exactly once', async (t) => {
  const cap = 300;
  const s = await setup(t, { rpm: BIG, tpm: BIG, daily: cap });
  const body = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'Hi' }], ignore_eos: true });
  const r = await post(s.chat, body, s.bearer);
  assert.equal(r.status, 200, r.text);
  const used = (await s.settledUsage()).tokens_used;
  assert.ok(used <= cap, `used ${used} of ${cap}`);
  // Whatever is left now, the next request fits in it or is refused: never past the cap.
  const next = await post(s.chat, body, s.bearer);
  assert.ok(next.status === 200 || next.status === 429, next.text);
  assert.ok((await s.settledUsage()).tokens_used <= cap);
  // Messages: the same bound.
  const m = await post(s.messages, JSON.stringify({ model: 'm', max_tokens: 5000, messages: [{ role: 'user', content: 'Hi' }] }), s.xApiKey);
  assert.ok(m.status === 200 || m.status === 429, m.text);
  assert.ok((await s.settledUsage()).tokens_used <= cap);
});

for (const kind of ['memory', 'redis'] as const) {
  test(`${kind} store: the output is bounded by what is left, a default output shrinks to it, nothing left is refused`, async (t) => {
    const g = await makeGate(t, kind, { rpm: BIG, tpm: 1000, daily: 1500 });
    if (!g) return;
    const gate = g.gate;
    // Explicit max_tokens 5000 with a full bucket of 1000: admitted (larger than the bucket), bounded to 1000 - 100.
    const a = admitted(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 5100, inputTokens: 100 }));
    assert.equal(a.maxOutputTokens, 900);
    assert.equal(a.reservedTokens, 5100);
    gate.settle({ accountId: 1, model: 'm', estimatedTokens: 5100 }, a, { inputTokens: 100, outputTokens: 900 });
    // 1000 used today, the bucket is empty: nothing left for output.
    const d = denied(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 1124, inputTokens: 100, defaultOutput: true }));
    assert.equal(d.code, 'token_rate_limit_exceeded');
    g.clock.advance(60_000); // the bucket is full again; 500 left of the day
    const b = admitted(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 1124, inputTokens: 100, defaultOutput: true }));
    assert.equal(b.maxOutputTokens, 400);
    assert.equal(b.reservedTokens, 500); // the default output (1024) shrank to what is left
    gate.settle({ accountId: 1, model: 'm', estimatedTokens: 1124 }, b, { inputTokens: 100, outputTokens: 400 });
    g.clock.advance(60_000);
    const c = denied(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 1124, inputTokens: 100, defaultOutput: true }));
    assert.equal(c.code, 'daily_token_cap_exceeded');
    // An estimate of 0 (count_tokens) meets the request bucket only: it passes the spent day.
    admitted(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 0 }));
    const u = await gate.readUsage(1);
    assert.equal(u.tokens_used, 1500);
  });
}

for (const kind of ['memory', 'redis'] as const) {
  test(`${kind} store: an input bound that bites answers recount and consumes nothing; the count then decides`, async (t) => {
    const g = await makeGate(t, kind, { rpm: 5, tpm: BIG, daily: 1000 });
    if (!g) return;
    const gate = g.gate;
    const bound = { accountId: 1, model: 'm', estimatedTokens: 916, inputTokens: 900, recountBelow: 16 };
    // 900 + 16 fits the day: admitted on the bound as it is.
    const a = admitted(await gate.admit(bound));
    assert.equal(a.maxOutputTokens, 100);
    gate.settle(bound, a, { inputTokens: 300, outputTokens: 16 });
    // 684 left: the bound (900) would refuse; nothing is taken, not even a request.
    const r = denied(await gate.admit(bound));
    assert.equal(r.recount, true);
    let u = await gate.readUsage(1);
    assert.deepEqual([u.requests, u.tokens_reserved, u.tokens_used], [1, 0, 316]);
    // A bound that would only lower the output: recount too.
    const lowered = denied(await gate.admit({ ...bound, estimatedTokens: 690, inputTokens: 600, recountBelow: 90 }));
    assert.equal(lowered.recount, true);
    // The count (300) then passes, on its own (no recountBelow).
    const c = admitted(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 316, inputTokens: 300 }));
    assert.equal(c.maxOutputTokens, 384);
    // A spent request bucket is no reason to count: refused as it is (the day's longer wait named).
    for (let i = 0; i < 3; i++) admitted(await gate.admit({ accountId: 1, model: 'm', estimatedTokens: 0 }));
    const rpm = denied(await gate.admit(bound));
    assert.equal(rpm.recount, undefined);
    assert.equal(rpm.code, 'daily_token_cap_exceeded');
    u = await gate.readUsage(1);
    assert.equal(u.requests, 5);
  });
}
