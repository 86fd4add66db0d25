// POST /v1/responses through the gateway with the official openai client (responses.create and
// responses.stream): key auth, catalog check, the effort rule, gates and metering from the
// response's usage, streams relayed as they come, client abort, chat-shaped errors.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import { modelEntrySchema } from '../../lib/config.js';
import { createGate, type LimitGate } from '../../gateway/gates/index.js';
import { waitFor } from '../helpers.js';
import { post, startFixture, type Fixture } from '../gateway/fixture.js';
import { gateConfig } from '../gateway/gates/fixtures.js';

let fx: Fixture;
let gate: LimitGate;
const BIG = 1_000_000_000;
const WEATHER = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  strict: false,
};

before(async () => {
  gate = createGate(gateConfig({ rpm: 1000, tpm: BIG, daily: BIG }));
  fx = await startFixture({
    gate,
    sims: [{ fast: true }, { fast: true, reasoning: true }, { ttftMs: 0, tokensPerSecond: 20 }],
    models: (sims) => [
      modelEntrySchema.parse({ name: 'chat', upstreams: [sims[0]!.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'reasoner', upstreams: [sims[1]!.url], servedName: 'm', reasoning: true, efforts: ['high'] }),
      modelEntrySchema.parse({ name: 'slow', upstreams: [sims[2]!.url], servedName: 'm' }),
    ],
  });
});
after(async () => {
  await fx?.close();
  await gate?.close();
});

async function settledUsage() {
  return waitFor(async () => {
    const u = await gate.readUsage(fx.accountId);
    return u.tokens_reserved === 0 ? u : undefined;
  });
}

test('responses.create: text answer from the catalog model; the gate is settled with its usage, cached tokens apart', async () => {
  const before = (await settledUsage()).by_model.chat ?? { input_tokens: 0, output_tokens: 0, cached_input_tokens: 0, requests: 0 };
  const params = { model: 'chat', instructions: 'Be terse, and answer in one short line please.', input: 'Say hello to the gateway.' };
  const r = await fx.client.responses.create(params);
  assert.equal(r.status, 'completed');
  assert.ok(r.output_text.length > 0);
  assert.equal(fx.sims[0]!.stats.lastBody!.model, 'm', 'served name forwarded');
  const again = await fx.client.responses.create(params);
  assert.ok(again.usage!.input_tokens_details.cached_tokens > 0);
  const after = (await settledUsage()).by_model.chat!;
  assert.equal(after.requests - before.requests, 2);
  assert.equal(after.input_tokens - before.input_tokens, r.usage!.input_tokens + again.usage!.input_tokens);
  assert.equal(after.output_tokens - before.output_tokens, r.usage!.output_tokens + again.usage!.output_tokens);
  assert.equal(after.cached_input_tokens - before.cached_input_tokens, again.usage!.input_tokens_details.cached_tokens);
});

test('responses.stream: events relayed, final response assembled, usage metered', async () => {
  const before = (await settledUsage()).by_model.reasoner?.output_tokens ?? 0;
  const stream = fx.client.responses.stream({ model: 'reasoner', input: 'Use get_weather for Oslo', tools: [WEATHER], reasoning: { effort: 'low' } });
  const types: string[] = [];
  stream.on('event', (e) => types.push(e.type));
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(types.includes('response.reasoning_text.delta') && types.includes('response.function_call_arguments.delta'));
  const call = final.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call' && call.name === 'get_weather');
  const after = (await settledUsage()).by_model.reasoner!.output_tokens;
  assert.equal(after - before, final.usage!.output_tokens);
});

test('reasoning.effort: ignored without reasoning, mapped to the nearest tier, unknown refused', async () => {
  await fx.client.responses.create({ model: 'chat', input: 'Hi', reasoning: { effort: 'high' } });
  assert.equal(fx.sims[0]!.stats.lastBody!.reasoning, undefined, 'not forwarded to a model without reasoning');
  await fx.client.responses.create({ model: 'reasoner', input: 'Hi', reasoning: { effort: 'xhigh' } as never });
  assert.deepEqual(fx.sims[1]!.stats.lastBody!.reasoning, { effort: 'high' });
  await assert.rejects(
    fx.client.responses.create({ model: 'reasoner', input: 'Hi', reasoning: { effort: 'turbo' } as never }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && e.code === 'invalid_effort' && /accepted: low, medium, high/.test(e.message),
  );
});

test("errors: chat-shaped from the gateway, the backend's own too (its status and message)", async () => {
  const url = `${fx.gateway.url}/v1/responses`;
  const auth = { authorization: `Bearer ${fx.key}` };
  const cases: [string, Record<string, string>, number, string][] = [
    ['{"model":"nope","input":"x"}', auth, 400, 'model_not_found'],
    ['{"input":"x"}', auth, 400, 'invalid_model'],
    ['{"model":', auth, 400, 'invalid_json'],
    ['[1]', auth, 400, 'invalid_json'],
    ['{"model":"chat","input":"x"}', {}, 401, 'missing_api_key'],
    ['{"model":"chat","input":"x"}', { authorization: 'Bearer rc-nope' }, 401, 'invalid_api_key'],
  ];
  for (const [body, headers, status, code] of cases) {
    const r = await post(url, body, headers);
    assert.equal(r.status, status, body);
    assert.equal(r.json.error.code, code, body);
    assert.equal(typeof r.json.error.message, 'string');
  }
  const wrong = await fetch(url, { headers: auth });
  assert.equal(wrong.status, 405);
  // The backend's validation error (vLLM's flat shape from the sim), in the chat shape.
  const bad = await post(url, JSON.stringify({ model: 'chat', input: [] }), auth);
  assert.equal(bad.status, 400);
  assert.equal(bad.json.object, undefined);
  assert.match(bad.json.error.message, /input/);
  fx.sims[0]!.setFault({ kind: '429', count: 1, retryAfterS: 4 });
  const limited = await post(url, JSON.stringify({ model: 'chat', input: 'x' }), auth);
  assert.equal(limited.status, 429);
  assert.equal(limited.headers.get('retry-after'), '4');
});

test('a client that leaves mid-stream aborts the backend request; the gate is settled', async () => {
  const slow = fx.sims[2]!;
  const aborted = slow.stats.aborted;
  const ac = new AbortController();
  const stream = await fx.client.responses.create({ model: 'slow', input: 'Talk for a while', max_output_tokens: 400, stream: true }, { signal: ac.signal });
  let deltas = 0;
  try {
    for await (const e of stream) {
      if (e.type === 'response.output_text.delta' && ++deltas === 3) {
        ac.abort();
        break; // events already buffered would otherwise still be counted
      }
    }
  } catch {
    // the abort may surface as an error
  }
  assert.equal(deltas, 3);
  await waitFor(() => slow.stats.aborted > aborted);
  const u = await settledUsage();
  assert.equal(u.tokens_reserved, 0);
});
