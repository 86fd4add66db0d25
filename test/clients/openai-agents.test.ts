// The OpenAI Agents SDK (@openai/agents) against the gateway, in both of its model APIs
// (Responses and Chat Completions), configured as a user would for an OpenAI-compatible
// endpoint: base URL and key (an OpenAIProvider), the catalog model's name, tracing off (it
// would export traces to OpenAI). An agent with a function tool: a plain prompt ends with text;
// a prompt naming the tool runs it, sends its result back and ends with the model's answer
// (the run loop stops only when the model answers in text: maxTurns bounds it).
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Agent, OpenAIProvider, Runner, tool } from '@openai/agents';
import { z } from 'zod';
import { modelEntrySchema } from '../../lib/config.js';
import { startFixture, type Fixture } from '../gateway/fixture.js';

let fx: Fixture;
before(async () => {
  fx = await startFixture({
    sims: [{ fast: true }, { fast: true, reasoning: true }],
    models: (sims) => [
      modelEntrySchema.parse({ name: 'sim-chat', upstreams: [sims[0]!.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'sim-reasoner', upstreams: [sims[1]!.url], servedName: 'm', reasoning: true }),
    ],
  });
});
after(() => fx?.close());

function agentWithWeather(model: string): { agent: Agent; calls: string[] } {
  const calls: string[] = [];
  const getWeather = tool({
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: z.object({ city: z.string() }),
    execute: async ({ city }) => {
      calls.push(city);
      return `Sunny in ${city}, 21 C`;
    },
  });
  return { agent: new Agent({ name: 'assistant', instructions: 'You are a helpful assistant.', model, tools: [getWeather] }), calls };
}

const runner = (useResponses: boolean) =>
  new Runner({ modelProvider: new OpenAIProvider({ baseURL: `${fx.gateway.url}/v1`, apiKey: fx.key, useResponses }), tracingDisabled: true });

for (const [api, useResponses] of [
  ['responses', true],
  ['chat completions', false],
] as const) {
  for (const model of ['sim-chat', 'sim-reasoner']) {
    test(`Agents SDK, ${api} API, ${model}: a plain prompt ends with text; a named function tool round trip ends with the model's answer`, async () => {
      const { agent, calls } = agentWithWeather(model);
      const plain = await runner(useResponses).run(agent, 'Say hello in one sentence.', { maxTurns: 3 });
      assert.ok(typeof plain.finalOutput === 'string' && plain.finalOutput.length > 0);
      assert.deepEqual(calls, [], 'no tool without being asked');

      const r = await runner(useResponses).run(agent, 'Use get_weather for Paris.', { maxTurns: 4 });
      // The reasoner's reasoning items come before each call and answer.
      const kinds = r.newItems.map((i) => i.type).filter((k) => k !== 'reasoning_item');
      assert.deepEqual(kinds, ['tool_call_item', 'tool_call_output_item', 'message_output_item']);
      if (model === 'sim-reasoner') assert.ok(r.newItems.some((i) => i.type === 'reasoning_item'));
      assert.equal(calls.length, 1, 'the tool ran once');
      const output = r.newItems.find((i) => i.type === 'tool_call_output_item');
      assert.equal(output?.output, `Sunny in ${calls[0]}, 21 C`);
      assert.ok(typeof r.finalOutput === 'string' && r.finalOutput.length > 0);
      // The tool's result reached the model: the last request carried it (a `tool` message or a
      // `function_call_output` item).
      const last = JSON.stringify(fx.sims[model === 'sim-chat' ? 0 : 1]!.stats.lastBody);
      assert.ok(last.includes(`Sunny in ${calls[0]}`), last.slice(-500));
    });
  }

  test(`Agents SDK, ${api} API, streamed: the same round trip`, async () => {
    const { agent, calls } = agentWithWeather('sim-chat');
    const stream = await runner(useResponses).run(agent, 'Use get_weather for Rome.', { maxTurns: 4, stream: true });
    let textDeltas = 0;
    for await (const e of stream) {
      if (e.type === 'raw_model_stream_event' && e.data.type === 'output_text_delta') textDeltas++;
    }
    await stream.completed;
    assert.equal(calls.length, 1);
    assert.ok(textDeltas > 1, 'the answer came in pieces');
    assert.ok(typeof stream.finalOutput === 'string' && stream.finalOutput.length > 0);
  });
}
