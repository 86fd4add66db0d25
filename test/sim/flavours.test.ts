// The sim's flavours, byte for byte: for each server (vLLM 0.10.1, 0.11.1-0.15 and main; SGLang
// 0.5 and main; llama.cpp) the stream chunks of a reasoning answer and of a tool call, the
// non-stream body, the finish reasons of auto, required and named tool choice, the error bodies,
// /tokenize, /v1/models and /metrics; llama.cpp's head with the first token and its close after
// a stream; the Nagle-on relay. The golden strings were checked against each server's source
// (sim/README.md "Flavours" names the files).
import assert from 'node:assert/strict';
import { connect, Socket } from 'node:net';
import { after, before, test } from 'node:test';
import { simCommand } from '../../sim/cli.js';
import { flavourOf, type ChatAnswer } from '../../sim/flavours/index.js';
import type { Plan } from '../../sim/plan.js';
import { SIM_FLAVOURS, startSim, type SimFlavour, type SimServer } from '../../sim/server.js';
import { countChatTokens } from '../../sim/tokenizer.js';
import { postJson, user } from './sim-helpers.js';
import { waitFor } from '../helpers.js';

const reasoningPlan: Plan = { reasoning: ['Hm'], content: ['Yes'], tool: undefined, finish: 'stop', completionTokens: 2 };
const toolPlan: Plan = {
  reasoning: [],
  content: [],
  tool: { id: 'chatcmpl-tool-T', name: 'get', args: ['{"a"', ':1}'] },
  finish: 'tool_calls',
  completionTokens: 2,
};

const answer = (plan: Plan, over: Partial<ChatAnswer> = {}): ChatAnswer => ({
  id: 'ID',
  created: 1,
  modelJson: '"m"',
  plan,
  promptTokens: 10,
  cachedTokens: 0,
  toolChoice: plan.tool ? 'auto' : 'none',
  reportCached: false,
  reasoningParser: plan.reasoning.length > 0,
  stream: true,
  includeUsage: true,
  continuousUsage: false,
  firstTokenMs: 100,
  tokenMs: 20,
  ...over,
});

/** A stream's events without `data: ` and the blank lines; the random tool call ids made constant. */
function events(flavour: SimFlavour, a: ChatAnswer): string[] {
  const ev = flavourOf(flavour).events(a);
  let s = ev.head();
  for (let i = 0; i < ev.tokens; i++) s += ev.token(i);
  s += ev.tail();
  assert.ok(s.endsWith('\n\n'), 'every event ends with a blank line');
  return normalizeIds(s)
    .split('\n\n')
    .filter(Boolean)
    .map((e) => {
      assert.ok(e.startsWith('data: '), e);
      return e.slice('data: '.length);
    });
}

const normalizeIds = (s: string): string => s.replace(/"call_[0-9a-f]{24}"/g, '"call_X"').replace(/"id":"[A-Za-z0-9]{32}"/g, '"id":"X"');

/** Golden events (checked against the sources), per flavour: a reasoning answer and an auto tool call, include_usage on. */
const GOLDEN: Record<SimFlavour, { reasoning: string[]; tool: string[] }> = {
  'vllm-0.10.1': {
    reasoning: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"Hm"},"logprobs":null,"finish_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Yes"},"logprobs":null,"finish_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}',
      '[DONE]',
    ],
    tool: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-T","type":"function","index":0,"function":{"name":"get","arguments":"{\\"a\\""}}]},"logprobs":null,"finish_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"logprobs":null,"finish_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}',
      '[DONE]',
    ],
  },
  'vllm-0.11.1': {
    reasoning: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning":"Hm","reasoning_content":"Hm"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Yes","reasoning_content":null},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}',
      '[DONE]',
    ],
    tool: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"tool_calls":[{"id":"chatcmpl-tool-T","type":"function","index":0,"function":{"name":"get","arguments":"{\\"a\\""}}]},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}',
      '[DONE]',
    ],
  },
  vllm: {
    reasoning: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning":"Hm"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Yes"},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":1}}}',
      '[DONE]',
    ],
    tool: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-T","type":"function","index":0,"function":{"name":"get","arguments":"{\\"a\\""}}]},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,"token_ids":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2}}',
      '[DONE]',
    ],
  },
  'sglang-0.5': {
    reasoning: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"Hm","tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":"Yes","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":1}}',
      '[DONE]',
    ],
    tool: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":"call_X","index":0,"type":"function","function":{"name":"get","arguments":"{\\"a\\""}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":":1}"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"tool_calls","matched_stop":151645}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":0}}',
      '[DONE]',
    ],
  },
  sglang: {
    reasoning: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"Hm"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"content":"Yes"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":1}}',
      '[DONE]',
    ],
    tool: [
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":"call_X","index":0,"type":"function","function":{"name":"get","arguments":"{\\"a\\""}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":":1}"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"tool_calls","matched_stop":151645}]}',
      '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":0}}',
      '[DONE]',
    ],
  },
  'llama.cpp': {
    reasoning: [
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk"}',
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"reasoning_content":"Hm"}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":1,"predicted_ms":20.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"content":"Yes"}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":2,"predicted_ms":40.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
      '{"choices":[{"finish_reason":"stop","index":0,"delta":{}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk"}',
      '{"choices":[],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":10,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":2,"predicted_ms":40.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
      '[DONE]',
    ],
    tool: [
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk"}',
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"id":"X","type":"function","function":{"name":"get","arguments":"{\\"a\\""}}]}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":1,"predicted_ms":20.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
      '{"choices":[{"finish_reason":null,"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk","timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":2,"predicted_ms":40.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
      '{"choices":[{"finish_reason":"tool_calls","index":0,"delta":{}}],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk"}',
      '{"choices":[],"created":1,"id":"ID","model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":10,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":2,"predicted_ms":40.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
      '[DONE]',
    ],
  },
};

test('stream golden bytes: a reasoning answer and a tool call, per flavour', () => {
  for (const f of SIM_FLAVOURS) {
    assert.deepEqual(events(f, answer(reasoningPlan)), GOLDEN[f].reasoning, `${f} reasoning`);
    assert.deepEqual(events(f, answer(toolPlan)), GOLDEN[f].tool, `${f} tool`);
  }
});

test('stream: a plain answer has its finish in a chunk of its own after the last token; cut by length, vLLM puts it on the last token', () => {
  const text: Plan = { reasoning: [], content: ['Hi', ' there'], tool: undefined, finish: 'stop', completionTokens: 2 };
  for (const f of SIM_FLAVOURS) {
    const ev = events(f, answer(text, { includeUsage: false }));
    const lastToken = ev.findIndex((e) => e.includes('" there"'));
    assert.ok(lastToken > 0, f);
    assert.match(ev[lastToken]!, /"finish_reason":null/, `${f}: the last token carries no finish`);
    assert.match(ev[lastToken + 1]!, /"finish_reason":"stop"/, `${f}: then the finish chunk`);
    assert.equal(ev[lastToken + 2], '[DONE]', f);
  }
  const cut: Plan = { ...text, finish: 'length' };
  assert.deepEqual(events('vllm', answer(cut, { includeUsage: false })).slice(-2), [
    '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" there"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]}',
    '[DONE]',
  ]);
  assert.deepEqual(events('sglang', answer(cut, { includeUsage: false })).slice(-2), [
    '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null},"logprobs":null,"finish_reason":"length","matched_stop":null}]}',
    '[DONE]',
  ]);
});

test('SGLang main: with tools in the request, text chunks come from the tool parser as pydantic dumps', () => {
  const text: Plan = { reasoning: [], content: ['Hi'], tool: undefined, finish: 'stop', completionTokens: 1 };
  assert.equal(
    events('sglang', answer(text, { toolChoice: 'auto', includeUsage: false }))[1],
    '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":null,"content":"Hi","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}',
  );
  assert.equal(
    events('sglang', answer(text, { toolChoice: 'none', includeUsage: false }))[1],
    '{"id":"ID","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":null,"content":"Hi"},"logprobs":null,"finish_reason":null,"matched_stop":null}]}',
  );
  assert.match(flavourOf('sglang').completionId(), /^chatcmpl-[0-9a-f]{32}$/);
  assert.match(flavourOf('sglang-0.5').completionId(), /^[0-9a-f]{32}$/);
});

test('cached tokens: in the usage only with the server flag (vLLM, SGLang); llama.cpp always reports them', () => {
  const a = (f: SimFlavour, reportCached: boolean) => events(f, answer(reasoningPlan, { cachedTokens: 16, promptTokens: 40, reportCached })).at(-2)!;
  assert.doesNotMatch(a('vllm', false), /prompt_tokens_details/);
  assert.match(a('vllm', true), /"completion_tokens":2,"prompt_tokens_details":\{"cached_tokens":16\},"completion_tokens_details"/);
  assert.doesNotMatch(a('vllm-0.11.1', false), /cached_tokens/);
  assert.match(a('vllm-0.11.1', true), /"prompt_tokens_details":\{"cached_tokens":16\}\}\}$/);
  assert.match(a('sglang', false), /"prompt_tokens_details":null/);
  assert.match(a('sglang', true), /"prompt_tokens_details":\{"cached_tokens":16\}/);
  assert.match(a('llama.cpp', false), /"prompt_tokens_details":\{"cached_tokens":16\}/);
});

test('finish_reason of a tool call per tool choice: vLLM stop for named (and required non-stream up to 0.11.0); SGLang and llama.cpp tool_calls', () => {
  const finish = (f: SimFlavour, toolChoice: ChatAnswer['toolChoice'], stream: boolean): string => {
    const a = answer(toolPlan, { toolChoice, stream, includeUsage: false });
    if (!stream) return JSON.parse(flavourOf(f).body(a)).choices[0].finish_reason;
    return /"finish_reason":"(\w+)"/.exec(events(f, a).at(-2)!)![1]!;
  };
  const table: Record<SimFlavour, string> = {
    // auto stream, auto whole, required stream, required whole, named stream, named whole
    'vllm-0.10.1': 'tool_calls tool_calls tool_calls stop tool_calls stop',
    'vllm-0.11.1': 'tool_calls tool_calls tool_calls tool_calls tool_calls stop',
    vllm: 'tool_calls tool_calls tool_calls tool_calls stop stop',
    'sglang-0.5': 'tool_calls tool_calls tool_calls tool_calls tool_calls tool_calls',
    sglang: 'tool_calls tool_calls tool_calls tool_calls tool_calls tool_calls',
    'llama.cpp': 'tool_calls tool_calls tool_calls tool_calls tool_calls tool_calls',
  };
  for (const f of SIM_FLAVOURS) {
    const got = (['auto', 'required', 'named'] as const).flatMap((c) => [finish(f, c, true), finish(f, c, false)]).join(' ');
    assert.equal(got, table[f], f);
  }
});

test('non-stream golden bodies per flavour', () => {
  const bodies: Record<SimFlavour, string> = {
    'vllm-0.10.1':
      '{"id":"ID","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Yes","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning_content":"Hm"},"logprobs":null,"finish_reason":"stop","stop_reason":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null},"prompt_logprobs":null,"kv_transfer_params":null}',
    'vllm-0.11.1':
      '{"id":"ID","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Yes","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning":"Hm","reasoning_content":"Hm"},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null},"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}',
    vllm: '{"id":"ID","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Yes","refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],"reasoning":"Hm"},"logprobs":null,"finish_reason":"stop","stop_reason":null,"token_ids":null}],"service_tier":null,"system_fingerprint":null,"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"completion_tokens_details":{"reasoning_tokens":1}},"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}',
    'sglang-0.5':
      '{"id":"ID","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Yes","reasoning_content":"Hm","tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":1},"metadata":{"weight_version":"default"}}',
    sglang:
      '{"id":"ID","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"Yes","reasoning_content":"Hm","tool_calls":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":{"prompt_tokens":10,"total_tokens":12,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":1},"metadata":{"weight_version":"default"}}',
    'llama.cpp':
      '{"choices":[{"finish_reason":"stop","index":0,"message":{"role":"assistant","reasoning_content":"Hm","content":"Yes"}}],"created":1,"model":"m","system_fingerprint":"b6000-0000000","object":"chat.completion","usage":{"completion_tokens":2,"prompt_tokens":10,"total_tokens":12,"prompt_tokens_details":{"cached_tokens":0}},"id":"ID","timings":{"cache_n":0,"prompt_n":10,"prompt_ms":100.0,"prompt_per_token_ms":10.0,"prompt_per_second":100.0,"predicted_n":2,"predicted_ms":40.0,"predicted_per_token_ms":20.0,"predicted_per_second":50.0}}',
  };
  for (const f of SIM_FLAVOURS) assert.equal(flavourOf(f).body(answer(reasoningPlan, { stream: false, includeUsage: false })), bodies[f], f);
});

// Over HTTP: one sim per flavour, metrics on.
const sims = new Map<SimFlavour, SimServer>();
before(async () => {
  for (const f of SIM_FLAVOURS) sims.set(f, await startSim({ model: 'm', fast: true, flavour: f, maxModelLen: 256, metrics: true }));
});
after(async () => {
  for (const s of sims.values()) await s.close();
});
const url = (f: SimFlavour) => sims.get(f)!.url;
const long = 'word '.repeat(400);

test('error bodies per flavour: the prompt over the window, max_tokens beyond the room, a bad body', async () => {
  const over = async (f: SimFlavour) => postJson(`${url(f)}/v1/chat/completions`, { model: 'm', messages: [user(long)], stream: true });
  const n = countChatTokens([user(long)]);
  const vllm = await over('vllm');
  assert.equal(vllm.status, 400);
  assert.deepEqual(vllm.body, {
    error: {
      message: `This model's maximum context length is 256 tokens. However, your request has ${n} input tokens. Please reduce the length of the input messages.`,
      type: 'BadRequestError',
      param: 'messages',
      code: 400,
    },
  });
  const sglang = await over('sglang');
  assert.equal(sglang.status, 400);
  assert.deepEqual(sglang.body, {
    object: 'error',
    message: `The input (${n} tokens) is longer than the model's context length (256 tokens).`,
    type: 'BadRequest',
    param: null,
    code: 400,
  });
  const llama = await over('llama.cpp');
  assert.equal(llama.status, 400);
  assert.deepEqual(llama.body, {
    error: {
      code: 400,
      message: `request (${n} tokens) exceeds the available context size (256 tokens), try increasing it`,
      type: 'exceed_context_size_error',
      n_prompt_tokens: n,
      n_ctx: 256,
    },
  });
  // max_tokens beyond the room: vLLM and SGLang refuse, llama.cpp generates until the window is full.
  const big = { model: 'm', messages: [user('x')], max_tokens: 1000, ignore_eos: true };
  assert.match(
    (await postJson(`${url('vllm-0.11.1')}/v1/chat/completions`, big)).body.error.message,
    /'max_tokens' or 'max_completion_tokens' is too large: 1000/,
  );
  assert.match(
    (await postJson(`${url('sglang-0.5')}/v1/chat/completions`, big)).body.message,
    /^Requested token count exceeds the model's maximum context length of 256 tokens/,
  );
  const filled = await postJson(`${url('llama.cpp')}/v1/chat/completions`, big);
  assert.equal(filled.status, 200);
  assert.equal(filled.body.usage.prompt_tokens + filled.body.usage.completion_tokens, 256);
  assert.equal(filled.body.choices[0].finish_reason, 'length');
  // A body that is not JSON, in each server's shape.
  assert.equal((await postJson(`${url('vllm-0.10.1')}/v1/chat/completions`, '{nope')).body.error.type, 'BadRequestError');
  assert.equal((await postJson(`${url('sglang')}/v1/chat/completions`, '{nope')).body.object, 'error');
  assert.equal((await postJson(`${url('llama.cpp')}/v1/chat/completions`, '{nope')).body.error.type, 'invalid_request_error');
  // Only vLLM checks the model name; SGLang and llama.cpp echo the request's.
  assert.equal((await postJson(`${url('vllm')}/v1/chat/completions`, { model: 'other', messages: [user('x')] })).status, 404);
  for (const f of ['sglang', 'llama.cpp'] as const) {
    const r = await postJson(`${url(f)}/v1/chat/completions`, { model: 'other', messages: [user('x')], max_tokens: 2 });
    assert.equal(r.status, 200, f);
    assert.equal(r.body.model, 'other', f);
  }
});

test('/tokenize per server: vLLM and SGLang main count a chat; SGLang 0.5 takes prompt only; SGLang reports the tokenizer limit; llama.cpp via /apply-template', async () => {
  const messages = [user('How many tokens is this?')];
  const n = countChatTokens(messages);
  const v = await postJson(`${url('vllm')}/tokenize`, { model: 'm', messages });
  assert.deepEqual(Object.keys(v.body), ['count', 'max_model_len', 'tokens', 'token_strs']);
  assert.equal(v.body.count, n);
  assert.equal(v.body.max_model_len, 256);
  const s = await postJson(`${url('sglang')}/tokenize`, { model: 'm', messages });
  assert.deepEqual(Object.keys(s.body), ['tokens', 'count', 'max_model_len']);
  assert.equal(s.body.count, n);
  assert.equal(s.body.max_model_len, 131072, "the tokenizer's model_max_length, not the 256-token context");
  assert.equal((await postJson(`${url('sglang')}/tokenize`, { prompt: 'x', messages })).status, 400, 'exactly one of prompt or messages');
  const old = await postJson(`${url('sglang-0.5')}/tokenize`, { model: 'm', messages });
  assert.equal(old.status, 400);
  assert.equal(old.body.object, 'error');
  const oldPrompt = await postJson(`${url('sglang-0.5')}/tokenize`, { model: 'm', prompt: 'Hello, world' });
  assert.deepEqual(oldPrompt.body, { tokens: oldPrompt.body.tokens, count: 4, max_model_len: 131072 });
  // llama.cpp: /tokenize {content} -> {tokens}; the chat's prompt_tokens = /tokenize of /apply-template's prompt with add_special.
  const raw = await postJson(`${url('llama.cpp')}/tokenize`, { content: 'Hello, world' });
  assert.deepEqual(Object.keys(raw.body), ['tokens']);
  assert.equal(raw.body.tokens.length, 3);
  assert.equal((await postJson(`${url('llama.cpp')}/tokenize`, { content: 'Hello, world', add_special: true })).body.tokens.length, 4);
  const pieces = await postJson(`${url('llama.cpp')}/tokenize`, { content: 'Hello, world', with_pieces: true });
  assert.deepEqual(
    pieces.body.tokens.map((t: { piece: string }) => t.piece),
    ['Hello', ',', ' world'],
  );
  const tpl = await postJson(`${url('llama.cpp')}/apply-template`, { messages });
  assert.deepEqual(Object.keys(tpl.body), ['prompt']);
  const counted = await postJson(`${url('llama.cpp')}/tokenize`, { content: tpl.body.prompt, add_special: true });
  const chat = await postJson(`${url('llama.cpp')}/v1/chat/completions`, { messages, max_tokens: 1 });
  assert.equal(counted.body.tokens.length, chat.body.usage.prompt_tokens);
  assert.equal(counted.body.tokens.length, n);
});

test('/v1/models per server: the context in max_model_len (vLLM, SGLang) or meta.n_ctx (llama.cpp)', async () => {
  const get = async (f: SimFlavour) => (await (await fetch(`${url(f)}/v1/models`)).json()) as { data: Record<string, any>[] };
  for (const f of ['vllm-0.10.1', 'vllm'] as const) {
    const m = (await get(f)).data[0]!;
    assert.equal(m.owned_by, 'vllm');
    assert.equal(m.max_model_len, 256);
    assert.equal(m.permission.length, 1);
  }
  const s = (await get('sglang')).data[0]!;
  assert.deepEqual(Object.keys(s), ['id', 'object', 'created', 'owned_by', 'root', 'parent', 'max_model_len']);
  assert.equal(s.owned_by, 'sglang');
  assert.equal(s.max_model_len, 256);
  const l = (await get('llama.cpp')).data[0]!;
  assert.equal(l.owned_by, 'llamacpp');
  assert.equal(l.meta.n_ctx, 256);
  const h = await fetch(`${url('llama.cpp')}/health`);
  assert.deepEqual(await h.json(), { status: 'ok' });
  const nf = await fetch(`${url('llama.cpp')}/v1/embeddings`, { method: 'POST', body: '{}' });
  assert.equal(nf.status, 404);
  assert.deepEqual(await nf.json(), { error: { message: 'File Not Found', type: 'not_found_error', code: 404 } });
});

test('/metrics names per server; SGLang and llama.cpp serve them only when asked (--enable-metrics, --metrics)', async () => {
  const text = async (f: SimFlavour) => (await fetch(`${url(f)}/metrics`)).text();
  const sample = (t: string, name: string) => Number(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, 'm').exec(t)![1]);
  const sgBefore = sample(await text('sglang'), 'sglang:generation_tokens_total');
  const llBefore = sample(await text('llama.cpp'), 'llamacpp:tokens_predicted_total');
  await postJson(`${url('sglang')}/v1/chat/completions`, { messages: [user('count me')], max_tokens: 3 });
  await postJson(`${url('llama.cpp')}/v1/chat/completions`, { messages: [user('count me')], max_tokens: 3 });
  const names = (t: string) => [
    ...new Set(
      t
        .split('\n')
        .filter((l) => l && !l.startsWith('#'))
        .map((l) => l.split(/[{ ]/)[0]),
    ),
  ];
  assert.deepEqual(names(await text('vllm')), [
    'vllm:num_requests_running',
    'vllm:num_requests_waiting',
    'vllm:kv_cache_usage_perc',
    'vllm:prefix_cache_queries_total',
    'vllm:prefix_cache_queries_created',
    'vllm:prefix_cache_hits_total',
    'vllm:prefix_cache_hits_created',
  ]);
  assert.ok(names(await text('vllm-0.10.1')).includes('vllm:gpu_cache_usage_perc'));
  const sg = await text('sglang');
  assert.match(sg, /^sglang:num_queue_reqs\{model_name="m"\} 0\.0$/m);
  assert.match(sg, /^sglang:num_running_reqs\{model_name="m"\} 0\.0$/m);
  assert.equal(sample(sg, 'sglang:generation_tokens_total'), sgBefore + 3);
  const ll = await text('llama.cpp');
  assert.match(ll, /^# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0$/m);
  assert.match(ll, /^llamacpp:requests_deferred 0$/m);
  assert.equal(sample(ll, 'llamacpp:tokens_predicted_total'), llBefore + 3);
  const quiet = await startSim({ model: 'm', fast: true, flavour: 'llama.cpp' });
  const quietSg = await startSim({ model: 'm', fast: true, flavour: 'sglang' });
  try {
    const r = await fetch(`${quiet.url}/metrics`);
    assert.equal(r.status, 501);
    assert.equal(((await r.json()) as any).error.type, 'not_supported_error');
    const s = await fetch(`${quietSg.url}/metrics`);
    assert.equal(s.status, 404);
    await s.arrayBuffer();
  } finally {
    await quiet.close();
    await quietSg.close();
  }
});

test("error-mid-stream: the server's in-stream error event after N tokens (vLLM, SGLang: then [DONE]; llama.cpp: the end); non-stream: a 500", async () => {
  const msg = 'Simulated engine error during generation (sim fault error-mid-stream)';
  const expected: Partial<Record<SimFlavour, string>> = {
    'vllm-0.10.1': `data: {"error": {"message": "${msg}", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n`,
    sglang: `data: {"error": {"object": "error", "message": "${msg}", "type": "InternalServerError", "param": null, "code": 500}}\n\ndata: [DONE]\n\n`,
    'llama.cpp': `data: {"error":{"code":500,"message":"${msg}","type":"server_error"}}\n\n`,
  };
  for (const [f, tail] of Object.entries(expected) as [SimFlavour, string][]) {
    const r = await fetch(`${url(f)}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-sim-fault': 'error-mid-stream; after=2' },
      body: JSON.stringify({ model: 'm', messages: [user('fail')], stream: true, max_tokens: 10 }),
    });
    assert.equal(r.status, 200, f);
    const text = await r.text();
    assert.ok(text.endsWith(tail), `${f}: ${text.slice(-300)}`);
    assert.equal(text.split('\n\n').filter((e) => e.includes('"finish_reason":null')).length, f === 'llama.cpp' ? 3 : 3, `${f}: role + 2 tokens`);
    assert.doesNotMatch(text, /"finish_reason":"/, f);
  }
  const whole = await postJson(`${url('vllm')}/v1/chat/completions`, { model: 'm', messages: [user('fail')] }, { 'x-sim-fault': 'error-mid-stream' });
  assert.equal(whole.status, 500);
  assert.equal(whole.body.error.type, 'InternalServerError');
});

/** A raw HTTP/1.1 request on its own socket: everything received, and whether the server closed it. */
function rawRequest(port: number, body: unknown): { socket: Socket; received: () => string; closed: Promise<void> } {
  const socket = connect(port, '127.0.0.1');
  let data = '';
  socket.setEncoding('utf8');
  socket.on('data', (d: string) => {
    data += d;
  });
  const json = JSON.stringify(body);
  socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(json)}\r\n\r\n${json}`);
  const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
  return { socket, received: () => data, closed };
}

test('llama.cpp: a stream sends nothing, head included, before its first token; vLLM sends its head when the request runs', async () => {
  const body = { model: 'm', messages: [user('wait')], stream: true, max_tokens: 2 };
  for (const [f, headFirst] of [
    ['llama.cpp', false],
    ['vllm', true],
  ] as const) {
    const sim = await startSim({ model: 'm', flavour: f, ttftMs: 60_000 });
    const r = rawRequest(sim.port, body);
    try {
      await waitFor(() => sim.stats.running === 1);
      if (headFirst) {
        await waitFor(() => r.received().includes('\r\n\r\n'));
        assert.match(r.received(), /^HTTP\/1\.1 200 OK\r\n/);
      } else {
        // Running, first token a minute away: nothing may have been sent.
        await new Promise((resolve) => setTimeout(resolve, 100));
        assert.equal(r.received(), '', 'no head before the first token');
      }
    } finally {
      r.socket.destroy();
      await sim.close();
    }
  }
});

test('llama.cpp: Connection: close on a stream (the sim shuts the socket itself when the stream is written at once); vLLM keeps it open', async () => {
  const body = { model: 'm', messages: [user('close?')], stream: true, max_tokens: 2 };
  for (const paced of [false, true]) {
    const sim = await startSim({ model: 'm', flavour: 'llama.cpp', fast: !paced, ttftMs: 1, tokensPerSecond: 1000 });
    const r = rawRequest(sim.port, body);
    try {
      await waitFor(() => r.received().includes('data: [DONE]\n\n'));
      const [head, rest] = r.received().split('\r\n\r\n', 2) as [string, string];
      assert.match(head, /\r\nConnection: close\r\n/);
      assert.equal(head.toLowerCase().match(/connection:/g)!.length, 1, 'one Connection header');
      assert.match(head, /\r\nserver: llama\.cpp\r\n/);
      assert.match(head, /\r\nx-accel-buffering: no\r\n/);
      if (paced) {
        // Chunked, properly terminated: the client, told to close, does not reuse the connection.
        await waitFor(() => r.received().endsWith('data: [DONE]\n\n\r\n0\r\n\r\n'));
        assert.match(rest, /^[0-9a-f]+\r\ndata: /);
      } else {
        await r.closed;
        assert.ok(r.received().endsWith('data: [DONE]\n\n'));
      }
    } finally {
      r.socket.destroy();
      await sim.close();
    }
  }
  const r = rawRequest(sims.get('vllm')!.port, body);
  try {
    await waitFor(() => r.received().includes('data: [DONE]'));
    assert.doesNotMatch(r.received().split('\r\n\r\n')[0]!, /connection: close/i);
    assert.equal(r.socket.destroyed, false, 'vLLM keeps the connection');
  } finally {
    r.socket.destroy();
  }
});

test('noDelay false: a relay with Nagle on (setNoDelay(false)) in front of uWS serves streams and keeps connections', async () => {
  const calls: boolean[] = [];
  const original = Socket.prototype.setNoDelay;
  Socket.prototype.setNoDelay = function (this: Socket, noDelay?: boolean) {
    calls.push(noDelay ?? true);
    return original.call(this, noDelay);
  };
  const sim = await startSim({ model: 'm', fast: false, ttftMs: 1, tokensPerSecond: 2000, noDelay: false });
  try {
    for (let i = 0; i < 2; i++) {
      const r = await fetch(`${sim.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'm', messages: [user('nagle')], stream: true, max_tokens: 5, stream_options: { include_usage: true } }),
      });
      const text = await r.text();
      assert.equal(r.status, 200);
      assert.equal(text.match(/"finish_reason":"length"/g)?.length, 1);
      assert.match(text, /"completion_tokens":5/);
      assert.ok(text.endsWith('data: [DONE]\n\n'));
    }
    assert.ok(calls.includes(false), 'the client-facing socket keeps Nagle on');
    assert.equal(sim.stats.completed, 2);
  } finally {
    Socket.prototype.setNoDelay = original;
    await sim.close();
  }
  const plain = await startSim({ model: 'm', fast: true });
  try {
    assert.equal(plain.flavour, 'vllm', 'current vLLM is the default flavour');
  } finally {
    await plain.close();
  }
});

test('rc sim --flavour: a name outside SIM_FLAVOURS is a usage error', async () => {
  await assert.rejects(simCommand.run(['--model', 'm', '--flavour', 'tgi']), /--flavour: unknown flavour "tgi"/);
});
