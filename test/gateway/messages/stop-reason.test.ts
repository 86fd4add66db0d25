// stop_reason is tool_use whenever the answer holds a tool_use block (issue 40): vLLM answers a
// named or forced tool choice with finish_reason "stop" (vllm/entrypoints/openai/serving_chat.py:
// non-stream in every version, stream on current main), and an agent loop stops on end_turn
// without running the tool. The official @anthropic-ai/sdk client against a real gateway in front
// of a backend that answers vLLM's bytes (../backend-bytes.ts).
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { modelEntrySchema } from '../../../lib/config.js';
import { generateKey, hashKey } from '../../../lib/keys.js';
import { createLogger } from '../../../lib/log.js';
import { memoryKeySource } from '../../../gateway/auth/keys.js';
import { messagesRoutes } from '../../../gateway/messages/routes.js';
import { stopReason } from '../../../gateway/messages/translate-response.js';
import { createGateway, type Gateway } from '../../../gateway/server.js';
import { vllmModels, vllmNamedToolCompletion, vllmNamedToolStream, vllmTextCompletion } from '../backend-bytes.js';
import { scriptedBackend, type Answer, type ScriptedBackend } from '../scripted-backend.js';

const KEY = generateKey();
let backend: ScriptedBackend;
let gw: Gateway;
let client: Anthropic;
/** What the backend answers next: a stream or a whole completion. */
let next: { whole: Answer; stream: Answer } = { whole: vllmNamedToolCompletion('stop'), stream: vllmNamedToolStream('stop') };

const WEATHER = {
  name: 'get_weather',
  description: 'Current weather for a city',
  input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};

before(async () => {
  backend = await scriptedBackend({
    'GET /v1/models': vllmModels('m', 32768),
    'POST /v1/chat/completions': (body) => ((JSON.parse(body) as { stream?: boolean }).stream ? next.stream : next.whole),
  });
  gw = await createGateway({
    port: 0,
    logger: createLogger('silent'),
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [backend.url] })],
    keySource: memoryKeySource([{ keyHash: hashKey(KEY), accountId: 1 }]),
    routes: [messagesRoutes({ thinkingSecret: 'test-secret' })],
  });
  client = new Anthropic({ apiKey: KEY, baseURL: gw.url, maxRetries: 0 });
});

after(async () => {
  await gw?.close();
  await backend?.close();
});

const ask = {
  model: 'm',
  max_tokens: 100,
  messages: [{ role: 'user' as const, content: 'Weather in Paris?' }],
  tools: [WEATHER],
  tool_choice: { type: 'tool' as const, name: 'get_weather' },
};

for (const finish of ['stop', 'tool_calls'] as const) {
  test(`a tool call that ends with finish_reason "${finish}" is stop_reason tool_use, whole and streamed`, async () => {
    next = { whole: vllmNamedToolCompletion(finish), stream: vllmNamedToolStream(finish) };
    const whole = await client.messages.create(ask);
    assert.equal(whole.stop_reason, 'tool_use');
    assert.deepEqual(
      whole.content.map((b) => b.type),
      ['tool_use'],
    );
    assert.deepEqual((whole.content[0] as Anthropic.ToolUseBlock).input, { city: 'Paris' });
    const streamed = await client.messages.stream(ask).finalMessage();
    assert.equal(streamed.stop_reason, 'tool_use');
    assert.deepEqual((streamed.content[0] as Anthropic.ToolUseBlock).input, { city: 'Paris' });
    assert.equal(backend.last('POST /v1/chat/completions').tool_choice.function.name, 'get_weather');
  });
}

test('a text answer ending with "stop" stays end_turn', async () => {
  next = { whole: vllmTextCompletion('stop'), stream: vllmNamedToolStream('stop') };
  const whole = await client.messages.create({ model: 'm', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] });
  assert.equal(whole.stop_reason, 'end_turn');
  assert.deepEqual(whole.content, [{ type: 'text', text: 'Hello' }]);
});

describe('stopReason', () => {
  test('the finish reason alone, and with a tool_use block', () => {
    assert.equal(stopReason('stop'), 'end_turn');
    assert.equal(stopReason('tool_calls'), 'tool_use');
    assert.equal(stopReason('length'), 'max_tokens');
    assert.equal(stopReason('content_filter'), 'refusal');
    assert.equal(stopReason(null), 'end_turn');
    assert.equal(stopReason('stop', true), 'tool_use');
    assert.equal(stopReason(null, true), 'tool_use');
    // A call cut by max_tokens may be incomplete: the client must know it was cut.
    assert.equal(stopReason('length', true), 'max_tokens');
  });
});
