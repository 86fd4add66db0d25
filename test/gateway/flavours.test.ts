// The gateway's protocols on every backend it fronts (issue 40): for each sim flavour (vLLM
// 0.10.1, 0.11.1, current; SGLang 0.5, current; llama.cpp), through the official clients, chat
// (whole and streamed, relayed and metered), messages (whole and streamed, text, thinking, a named
// and an auto tool call ending in tool_use), count_tokens (exact where the backend counts, the
// estimate on SGLang 0.5), responses, max tokens fitted into the context the backend reports,
// max tokens of 0 refused, a prompt over the context in the messages protocol's words, a
// backend's 429 with its Retry-After, and the queue routing reads from each server's metrics.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { waitingRequests } from '../../gateway/backends/load-scraper.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { SIM_FLAVOURS, startSim, type SimFlavour, type SimServer } from '../../sim/server.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { post } from './fixture.js';

const KEY = generateKey();
/** The sims' context window, small enough for an over-long prompt to be cheap. */
const CONTEXT = 2048;
const WEATHER = {
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};
const ASK = [{ role: 'user' as const, content: 'Say hello to the flavours' }];

for (const flavour of SIM_FLAVOURS) {
  describe(`on ${flavour}`, () => {
    let chatSim: SimServer;
    let reasonSim: SimServer;
    let gw: Gateway;
    let openai: OpenAI;
    let anthropic: Anthropic;

    before(async () => {
      const logger = createLogger('silent');
      const common = { fast: true, flavour, maxModelLen: CONTEXT, promptTokensDetails: true, logger } as const;
      chatSim = await startSim({ ...common, model: 'served-chat' });
      reasonSim = await startSim({ ...common, model: 'served-reasoner', reasoning: true });
      gw = await createGateway({
        port: 0,
        logger,
        // No maxContext: the gateway learns each backend's context from its /v1/models.
        models: [
          modelEntrySchema.parse({ name: 'chat', upstreams: [chatSim.url], servedName: 'served-chat' }),
          modelEntrySchema.parse({ name: 'reasoner', upstreams: [reasonSim.url], servedName: 'served-reasoner', reasoning: true }),
        ],
        keySource: memoryKeySource([{ keyHash: hashKey(KEY), accountId: 1 }]),
        routes: [messagesRoutes({ thinkingSecret: 'flavour-secret' })],
      });
      openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: KEY, maxRetries: 0 });
      anthropic = new Anthropic({ baseURL: `${gw.url}/api`, apiKey: KEY, maxRetries: 0 });
    });

    after(async () => {
      await gw?.close();
      await chatSim?.close();
      await reasonSim?.close();
    });

    test('chat: whole and streamed, the same text, usage relayed', async () => {
      const whole = await openai.chat.completions.create({ model: 'chat', messages: ASK, max_tokens: 12, seed: 7 });
      const text = whole.choices[0]!.message.content ?? '';
      assert.ok(text.length > 0, JSON.stringify(whole));
      assert.equal(whole.usage?.prompt_tokens, countChatTokens(ASK));
      let streamed = '';
      let usage: OpenAI.CompletionUsage | undefined;
      let finish: string | null | undefined;
      const stream = await openai.chat.completions.create({
        model: 'chat',
        messages: ASK,
        max_tokens: 12,
        seed: 7,
        stream: true,
        stream_options: { include_usage: true },
      });
      for await (const chunk of stream) {
        streamed += chunk.choices[0]?.delta?.content ?? '';
        finish = chunk.choices[0]?.finish_reason ?? finish;
        if (chunk.usage) usage = chunk.usage;
      }
      assert.equal(streamed, text);
      assert.equal(finish, whole.choices[0]!.finish_reason);
      assert.equal(usage?.completion_tokens, whole.usage?.completion_tokens);
    });

    test('messages: whole and streamed, the same text; usage from the backend', async () => {
      const whole = await anthropic.messages.create({ model: 'chat', messages: ASK, max_tokens: 12 });
      assert.equal(whole.content[0]?.type, 'text');
      assert.ok(['end_turn', 'max_tokens'].includes(whole.stop_reason ?? ''), String(whole.stop_reason));
      assert.ok(whole.usage.output_tokens > 0);
      const final = await anthropic.messages.stream({ model: 'chat', messages: ASK, max_tokens: 12 }).finalMessage();
      assert.deepEqual(
        final.content.map((b) => (b.type === 'text' ? b.text : b.type)),
        whole.content.map((b) => (b.type === 'text' ? b.text : b.type)),
      );
      assert.equal(final.stop_reason, whole.stop_reason);
      assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
      assert.equal(
        final.usage.input_tokens + (final.usage.cache_read_input_tokens ?? 0),
        whole.usage.input_tokens + (whole.usage.cache_read_input_tokens ?? 0),
      );
    });

    test('messages: thinking comes as a thinking block before the text', async () => {
      for (const stream of [false, true]) {
        const body = { model: 'reasoner', messages: ASK, max_tokens: 200, thinking: { type: 'adaptive' as const } };
        const m = stream ? await anthropic.messages.stream(body as never).finalMessage() : await anthropic.messages.create(body as never);
        assert.deepEqual(
          m.content.map((b) => b.type),
          ['thinking', 'text'],
          `${stream ? 'stream' : 'whole'}: ${JSON.stringify(m.content)}`,
        );
      }
    });

    test('messages: a named and an auto tool call end in tool_use, whole and streamed', async () => {
      const named = { model: 'chat', max_tokens: 200, messages: ASK, tools: [WEATHER], tool_choice: { type: 'tool' as const, name: 'get_weather' } };
      const auto = { model: 'chat', max_tokens: 200, messages: [{ role: 'user' as const, content: 'Use get_weather for Paris' }], tools: [WEATHER] };
      for (const [name, body] of [
        ['named', named],
        ['auto', auto],
      ] as const) {
        for (const stream of [false, true]) {
          const m = stream ? await anthropic.messages.stream(body).finalMessage() : await anthropic.messages.create(body);
          const call = m.content.find((b) => b.type === 'tool_use');
          assert.ok(call && call.name === 'get_weather', `${name} ${stream ? 'stream' : 'whole'}: ${JSON.stringify(m.content)}`);
          assert.equal(typeof (call.input as { city?: unknown }).city, 'string');
          assert.equal(m.stop_reason, 'tool_use', `${name} ${stream ? 'stream' : 'whole'}`);
        }
      }
    });

    test('count_tokens: exact where the backend counts, the estimate (never an error) where it cannot', async () => {
      const counted = await anthropic.messages.countTokens({ model: 'chat', messages: ASK, system: 'Be brief.', tools: [WEATHER] });
      assert.ok(Number.isInteger(counted.input_tokens) && counted.input_tokens > 0);
      const r = await post(`${gw.url}/v1/messages/count_tokens`, JSON.stringify({ model: 'chat', messages: ASK }), { 'x-api-key': KEY });
      assert.equal(r.status, 200, r.text);
      const exact = countChatTokens([{ role: 'user', content: ASK[0]!.content }]);
      if (flavour === 'sglang-0.5') assert.equal(r.headers.get('x-rc-token-count'), 'estimate');
      else assert.equal(r.json.input_tokens, exact, `${flavour} counts as its backend does`);
    });

    test('responses: an answer in output_text', async () => {
      const r = await openai.responses.create({ model: 'chat', input: 'Say hello', max_output_tokens: 12 });
      assert.ok(r.output_text.length > 0, JSON.stringify(r.output));
    });

    test('max tokens beyond the context are fitted into what the backend reports; 0 is refused', async () => {
      const fitted = await openai.chat.completions.create({ model: 'chat', messages: ASK, max_tokens: 100_000, seed: 1 });
      assert.ok(fitted.choices[0]!.message.content !== undefined);
      const zero = await post(`${gw.url}/v1/chat/completions`, JSON.stringify({ model: 'chat', messages: ASK, max_tokens: 0 }), {
        authorization: `Bearer ${KEY}`,
      });
      assert.equal(zero.status, 400, zero.text);
      const zeroMessages = await post(`${gw.url}/v1/messages`, JSON.stringify({ model: 'chat', messages: ASK, max_tokens: 0 }), { 'x-api-key': KEY });
      assert.equal(zeroMessages.status, 400, zeroMessages.text);
      assert.equal(zeroMessages.json.type, 'error');
    });

    test("a prompt over the context: the messages protocol's words, whatever the backend's", async () => {
      const long = [{ role: 'user' as const, content: 'word '.repeat(CONTEXT * 2) }];
      const r = await post(`${gw.url}/v1/messages`, JSON.stringify({ model: 'chat', messages: long, max_tokens: 16 }), { 'x-api-key': KEY });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error.type, 'invalid_request_error');
      assert.match(r.json.error.message, /^prompt is too long: \d+ tokens > \d+ maximum$/);
    });

    test("a backend's 429 reaches the client with its Retry-After, in each protocol's shape", async () => {
      chatSim.setFault({ kind: '429', count: 2, retryAfterS: 3 });
      const chat = await post(`${gw.url}/v1/chat/completions`, JSON.stringify({ model: 'chat', messages: ASK, max_tokens: 4 }), {
        authorization: `Bearer ${KEY}`,
      });
      assert.equal(chat.status, 429, chat.text);
      assert.ok(chat.headers.get('retry-after'));
      assert.equal(typeof chat.json.error.message, 'string');
      const messages = await post(`${gw.url}/v1/messages`, JSON.stringify({ model: 'chat', messages: ASK, max_tokens: 4 }), { 'x-api-key': KEY });
      assert.equal(messages.status, 429, messages.text);
      assert.equal(messages.json.type, 'error');
      assert.equal(messages.json.error.type, 'rate_limit_error');
    });
  });
}

// Routing on load reads each server's queue from its /metrics (SGLang and llama.cpp only publish
// them when started with --enable-metrics / --metrics, README "Model backends").
for (const flavour of SIM_FLAVOURS) {
  test(`on ${flavour}: the load reader finds the queue in the server's own metrics`, async (t) => {
    const sim = await startSim({ model: 'm', flavour, metrics: true, maxNumSeqs: 1, ttftMs: 60_000, logger: createLogger('silent') });
    t.after(() => sim.close());
    const held = Array.from({ length: 3 }, () => new AbortController());
    const requests = held.map((ac) =>
      fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        signal: ac.signal,
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: ASK, max_tokens: 4 }),
      }).catch(() => undefined),
    );
    t.after(async () => {
      for (const ac of held) ac.abort();
      await Promise.all(requests);
    });
    let waiting: number | undefined;
    for (let i = 0; i < 100 && !(waiting && waiting >= 2); i++) {
      waiting = waitingRequests(await (await fetch(`${sim.url}/metrics`)).text());
      if (!(waiting && waiting >= 2)) await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(waiting, 2, `${flavour}: one runs, two wait`);
  });
}

test('every flavour is covered', () => {
  const covered: readonly SimFlavour[] = SIM_FLAVOURS;
  assert.deepEqual([...covered].sort(), ['llama.cpp', 'sglang', 'sglang-0.5', 'vllm', 'vllm-0.10.1', 'vllm-0.11.1']);
});
