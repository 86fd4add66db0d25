// Micro-benchmarks of the sim's per-request work: tokenizer, chat template, planning, chunks.
import { planOutput } from '../../sim/plan.js';
import { StreamRenderer } from '../../sim/render.js';
import { chatRequestSchema } from '../../sim/request.js';
import { applyChatTemplate, countChatTokens, countTokens, tokenize } from '../../sim/tokenizer.js';
import type { MicroSuite } from './suite.js';

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather forecast for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city'] },
    },
  },
  {
    type: 'function',
    function: { name: 'search', description: 'Search the web', parameters: { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] } },
  },
];
const messages = [
  { role: 'system', content: 'You are a helpful assistant. Answer briefly and precisely.' },
  { role: 'user', content: 'What will the weather be like in Paris over the next three days, and should I pack an umbrella?' },
];
const page = 'The quick brown fox jumps over the lazy dog, again and again; 1234567890 times! '.repeat(50); // ~4 KB
const request = chatRequestSchema.parse({ model: 'm', messages, tools, tool_choice: 'required', stream: true });
const promptText = applyChatTemplate(request.messages, request.tools);

export const simMicroSuite: MicroSuite = {
  name: 'sim',
  add(bench) {
    bench
      .add('sim: countTokens 4 KB text', () => {
        countTokens(page);
      })
      .add('sim: tokenize 4 KB text', () => {
        tokenize(page);
      })
      .add('sim: chat template + count (system, user, 2 tools)', () => {
        countChatTokens(messages, tools);
      })
      .add('sim: validate chat request (zod)', () => {
        chatRequestSchema.parse({ model: 'm', messages, max_tokens: 20 });
      })
      .add('sim: plan 20-token answer', () => {
        planOutput({ ...request, tools: undefined, tool_choice: undefined, max_tokens: 20 }, { reasoningModel: false, limit: 20, promptText, seed: 0 });
      })
      .add('sim: render 20 stream chunks', () => {
        const plan = planOutput(
          { ...request, tools: undefined, tool_choice: undefined, max_tokens: 20, ignore_eos: true },
          { reasoningModel: false, limit: 20, promptText, seed: 0 },
        );
        const s = new StreamRenderer('chatcmpl-x', 0, '"m"', plan, 40, true, false);
        let out = s.role();
        for (let i = 0; i < s.tokens; i++) out += s.token(i);
        out += s.tail();
      });
  },
};
