// The stream chunks of the chat-completions servers the gateway fronts, byte for byte, one writer
// per server version ("flavour"), and one golden stream of each written out by hand. Used by the
// translator's tests (flavours.test.ts: every flavour through the fast path and through
// JSON.parse, side by side) and by `npm run bench:profile` (RC_PROFILE_FLAVOUR: a backend that
// replays these bytes, bench/profile/replay-backend.ts).
//
// Where each shape was read (the servers' public source; no code copied):
// - vLLM 0.10.1: vllm/entrypoints/openai/protocol.py (ChatCompletionStreamResponse,
//   ChatCompletionResponseStreamChoice, DeltaMessage, UsageInfo) and serving_chat.py
//   (chat_completion_stream_generator): chunks serialized with `model_dump_json(exclude_unset=True)`,
//   so in field order with only the fields set: the first chunk `{"role":"assistant","content":""}`,
//   `"logprobs":null,"finish_reason":null` on every choice, `"stop_reason"` only where the finish
//   reason is set, continuous usage `{"prompt_tokens","total_tokens","completion_tokens"}`, the
//   cached tokens (`prompt_tokens_details`) in the final usage only and only with
//   `--enable-prompt-tokens-details`. An EOS stop comes as a chunk of its own with empty content.
// - vLLM 0.10.2-0.11.0: the same, and `"token_ids":null` last in every choice (PR #22587).
// - vLLM 0.11.1-0.15: also `"reasoning_content":null` on every delta (PR #27752: `reasoning`
//   added, engine/protocol.py's after-validator copies it into the deprecated reasoning_content,
//   which then counts as set).
// - vLLM current main: chat_completion/protocol.py: reasoning_content gone (PR #33402), reasoning
//   in `reasoning`, token_ids null, and `completion_tokens_details` in the usage (PR #45802).
// - SGLang 0.5: python/sglang/srt/entrypoints/openai/protocol.py and serving_chat.py: pydantic
//   `model_dump_json()` without exclusions: every delta `{"role","content","reasoning_content",
//   "tool_calls"}` with its nulls, `"matched_stop"` on every choice, `"usage":null` when none, the
//   usage's `"prompt_tokens_details":null` (cached tokens only with `--enable-cache-report`).
// - SGLang current main: sse_utils.py: msgspec structs, `omit_defaults` on the chunk and the delta
//   (no null member, no usage member when none; an empty finish delta `{}`), not on the choice
//   (`"logprobs":null,"finish_reason":...,"matched_stop":...` always); the usage a dict of
//   UsageInfo with `"reasoning_tokens"`.
// - llama.cpp: tools/server/server-task.cpp (to_json_oaicompat_chat_stream, usage_json_oaicompat):
//   nlohmann::json objects, whose keys are kept sorted: choices, created, id, model, object,
//   system_fingerprint, timings, usage; a choice delta, finish_reason, index; a finish chunk of its
//   own (`"delta":{}`), then, with include_usage, a usage chunk with empty choices (no continuous
//   usage), then `[DONE]`; the timings on the last chunk only (server-context.cpp: a partial
//   result carries them only with the request's timings_per_token).
// The details that could not be read exactly (a build's fingerprint, the timings' numbers, which
// delta vLLM's tool-call finish carries) are written as the servers write their kind.

export const FLAVOURS = ['vllm-0.10.1', 'vllm-0.10.2', 'vllm-0.11.1', 'vllm', 'sglang-0.5', 'sglang', 'llama.cpp'] as const;
export type Flavour = (typeof FLAVOURS)[number];

export function isFlavour(s: string): s is Flavour {
  return (FLAVOURS as readonly string[]).includes(s);
}

/** What a stream holds, in order: reasoning pieces, text pieces, one tool call's argument pieces, then the finish. */
export interface StreamPlan {
  id: string;
  created: number;
  model: string;
  promptTokens: number;
  /** Cached prompt tokens: reported in the final usage (as with the servers' cache-report flag on), when above 0. */
  cachedTokens: number;
  reasoning: readonly string[];
  text: readonly string[];
  tool?: { id: string; name: string; args: readonly string[] } | undefined;
  /** stop (an EOS: a chunk of its own, one more completion token), length (on the last piece's chunk), tool_calls. */
  finish: 'stop' | 'length' | 'tool_calls';
  /** stream_options.include_usage: the usage-only chunk before [DONE]. */
  includeUsage: boolean;
  /** stream_options.continuous_usage_stats: usage on every chunk (vLLM, SGLang; llama.cpp has none). */
  continuousUsage: boolean;
}

const j = (s: string): string => JSON.stringify(s);

interface Usage {
  prompt: number;
  completion: number;
  /** Cached tokens reported: undefined for none. */
  cached?: number | undefined;
  final: boolean;
}

/** How one flavour writes each part of a chunk. */
interface Writer {
  /** The chunk around one choice (`choice` undefined: `"choices":[]`) and its usage (undefined: none); `last`: the stream's last chunk. */
  chunk(p: StreamPlan, choice: string | undefined, usage: Usage | undefined, last: boolean): string;
  /** A choice with its delta and finish reason (null while the stream goes on). */
  choice(delta: string, finish: string | null): string;
  role: string;
  content(t: string): string;
  reasoning(t: string): string;
  toolStart(id: string, name: string): string;
  toolArgs(a: string): string;
  /** The delta of a finish chunk of its own. */
  finishDelta: string;
}

const vllmUsage = (u: Usage, extra = ''): string =>
  `{"prompt_tokens":${u.prompt},"total_tokens":${u.prompt + u.completion},"completion_tokens":${u.completion}` +
  `${u.cached !== undefined ? `,"prompt_tokens_details":{"cached_tokens":${u.cached}}` : ''}${extra}}`;

function vllm(version: '0.10.1' | '0.10.2' | '0.11.1' | 'main'): Writer {
  const tokenIds = version === '0.10.1' ? '' : ',"token_ids":null';
  // 0.11.1-0.15: the validator sets reasoning_content on every delta, null unless reasoning is.
  const rc = version === '0.11.1' ? ',"reasoning_content":null' : '';
  return {
    chunk: (p, choice, usage) =>
      `{"id":${j(p.id)},"object":"chat.completion.chunk","created":${p.created},"model":${j(p.model)},"choices":[${choice ?? ''}]` +
      `${usage ? `,"usage":${vllmUsage(usage, version === 'main' ? ',"completion_tokens_details":{"reasoning_tokens":0}' : '')}` : ''}}`,
    choice: (delta, finish) =>
      `{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish === null ? 'null' : `${j(finish)},"stop_reason":null`}${tokenIds}}`,
    role: `{"role":"assistant","content":""${rc}}`,
    content: (t) => `{"content":${j(t)}${rc}}`,
    reasoning: (t) =>
      version === '0.10.1' || version === '0.10.2'
        ? `{"reasoning_content":${j(t)}}`
        : version === '0.11.1'
          ? `{"reasoning_content":${j(t)},"reasoning":${j(t)}}`
          : `{"reasoning":${j(t)}}`,
    toolStart: (id, name) =>
      `{${rc.slice(1)}${rc ? ',' : ''}"tool_calls":[{"id":${j(id)},"type":"function","index":0,"function":{"name":${j(name)},"arguments":""}}]}`,
    toolArgs: (a) => `{${rc.slice(1)}${rc ? ',' : ''}"tool_calls":[{"index":0,"function":{"arguments":${j(a)}}}]}`,
    finishDelta: `{"content":""${rc}}`,
  };
}

const sglangUsage = (u: Usage, reasoningTokens: boolean): string =>
  `{"prompt_tokens":${u.prompt},"total_tokens":${u.prompt + u.completion},"completion_tokens":${u.completion},` +
  `"prompt_tokens_details":${u.cached !== undefined ? `{"cached_tokens":${u.cached}}` : 'null'}${reasoningTokens ? ',"reasoning_tokens":0' : ''}}`;

/** SGLang 0.5: pydantic, every field written. */
const SGLANG_05: Writer = {
  chunk: (p, choice, usage) =>
    `{"id":${j(p.id)},"object":"chat.completion.chunk","created":${p.created},"model":${j(p.model)},"choices":[${choice ?? ''}],"usage":${usage ? sglangUsage(usage, false) : 'null'}}`,
  choice: (delta, finish) =>
    `{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish === null ? 'null' : j(finish)},"matched_stop":${finish === 'stop' ? '151645' : 'null'}}`,
  role: '{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null}',
  content: (t) => `{"role":null,"content":${j(t)},"reasoning_content":null,"tool_calls":null}`,
  reasoning: (t) => `{"role":null,"content":null,"reasoning_content":${j(t)},"tool_calls":null}`,
  toolStart: (id, name) =>
    `{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":${j(id)},"index":0,"type":"function","function":{"name":${j(name)},"arguments":""}}]}`,
  toolArgs: (a) =>
    `{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":${j(a)}}}]}`,
  finishDelta: '{"role":null,"content":null,"reasoning_content":null,"tool_calls":null}',
};

/** SGLang current: msgspec, defaults omitted on the chunk and the delta. */
const SGLANG: Writer = {
  chunk: (p, choice, usage) =>
    `{"id":${j(p.id)},"object":"chat.completion.chunk","created":${p.created},"model":${j(p.model)},"choices":[${choice ?? ''}]${usage ? `,"usage":${sglangUsage(usage, true)}` : ''}}`,
  choice: SGLANG_05.choice,
  role: '{"role":"assistant","content":""}',
  content: (t) => `{"content":${j(t)}}`,
  reasoning: (t) => `{"reasoning_content":${j(t)}}`,
  // Tool calls still go through the pydantic models (sse_utils.py builds content and reasoning only).
  toolStart: SGLANG_05.toolStart,
  toolArgs: SGLANG_05.toolArgs,
  finishDelta: '{}',
};

const TIMINGS =
  '{"cache_n":0,"predicted_ms":210.5,"predicted_n":20,"predicted_per_second":95.01,"predicted_per_token_ms":10.525,"prompt_ms":18.2,"prompt_n":21,"prompt_per_second":1153.84,"prompt_per_token_ms":0.866}';

/**
 * llama.cpp: keys sorted; the timings on the last chunk only (server-context.cpp: a partial
 * result has them with the request's timings_per_token only; the final result puts them on its
 * last chunk).
 */
const LLAMA: Writer = {
  chunk: (p, choice, usage, last) =>
    `{"choices":[${choice ?? ''}],"created":${p.created},"id":${j(p.id)},"model":${j(p.model)},"object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"${last ? `,"timings":${TIMINGS}` : ''}` +
    `${usage ? `,"usage":{"completion_tokens":${usage.completion},"prompt_tokens":${usage.prompt}${usage.cached !== undefined ? `,"prompt_tokens_details":{"cached_tokens":${usage.cached}}` : ''},"total_tokens":${usage.prompt + usage.completion}}` : ''}}`,
  choice: (delta, finish) => `{"delta":${delta},"finish_reason":${finish === null ? 'null' : j(finish)},"index":0}`,
  role: '{"content":null,"role":"assistant"}',
  content: (t) => `{"content":${j(t)}}`,
  reasoning: (t) => `{"reasoning_content":${j(t)}}`,
  toolStart: (id, name) => `{"tool_calls":[{"function":{"arguments":"","name":${j(name)}},"id":${j(id)},"index":0,"type":"function"}]}`,
  toolArgs: (a) => `{"tool_calls":[{"function":{"arguments":${j(a)}},"index":0}]}`,
  finishDelta: '{}',
};

const WRITERS: Record<Flavour, Writer> = {
  'vllm-0.10.1': vllm('0.10.1'),
  'vllm-0.10.2': vllm('0.10.2'),
  'vllm-0.11.1': vllm('0.11.1'),
  vllm: vllm('main'),
  'sglang-0.5': SGLANG_05,
  sglang: SGLANG,
  'llama.cpp': LLAMA,
};

/** The chunks (JSON text, without `data: `) of a stream of `plan` as flavour `f` writes them, without [DONE]. */
export function streamChunks(f: Flavour, plan: StreamPlan): string[] {
  const w = WRITERS[f];
  const llama = f === 'llama.cpp';
  const continuous = plan.continuousUsage && !llama;
  const pieces: string[] = [...plan.reasoning.map((t) => w.reasoning(t)), ...plan.text.map((t) => w.content(t))];
  if (plan.tool) pieces.push(w.toolStart(plan.tool.id, plan.tool.name), ...plan.tool.args.map((a) => w.toolArgs(a)));
  const running = (completion: number): Usage | undefined => (continuous ? { prompt: plan.promptTokens, completion, final: false } : undefined);
  // The chunks as [choice, usage], rendered once the last one is known.
  const parts: [string | undefined, Usage | undefined][] = [[w.choice(w.role, null), running(0)]];
  // llama.cpp ends every stream with a finish chunk of its own (an empty delta); vLLM and SGLang
  // put a length finish on the last token's chunk.
  const ownFinish = llama || plan.finish !== 'length' || pieces.length === 0;
  pieces.forEach((delta, i) => {
    const last = i === pieces.length - 1 && !ownFinish;
    parts.push([w.choice(delta, last ? plan.finish : null), running(i + 1)]);
  });
  const completion = pieces.length + (plan.finish === 'stop' ? 1 : 0);
  const final: Usage = { prompt: plan.promptTokens, completion, cached: plan.cachedTokens > 0 ? plan.cachedTokens : undefined, final: true };
  if (ownFinish) parts.push([w.choice(w.finishDelta, plan.finish), running(completion)]);
  if (plan.includeUsage) parts.push([undefined, final]);
  return parts.map(([choice, usage], i) => w.chunk(plan, choice, usage, i === parts.length - 1));
}

/** The whole SSE body of the stream: each chunk as one `data: ` event, then `data: [DONE]`. */
export function streamBody(f: Flavour, plan: StreamPlan): string {
  return `${streamChunks(f, plan)
    .map((c) => `data: ${c}\n\n`)
    .join('')}data: [DONE]\n\n`;
}

/** A non-stream completion body of `plan`'s text, as flavour `f` returns it (the chat workloads' answers). */
export function completionBody(f: Flavour, plan: StreamPlan): string {
  const text = j(plan.text.join(''));
  const p = plan.promptTokens;
  const c = plan.text.length;
  const finish = j(plan.finish);
  switch (f) {
    case 'llama.cpp':
      return `{"choices":[{"finish_reason":${finish},"index":0,"message":{"content":${text},"role":"assistant"}}],"created":${plan.created},"id":${j(plan.id)},"model":${j(plan.model)},"object":"chat.completion","system_fingerprint":"b6715-0f8d3a4c","timings":${TIMINGS},"usage":{"completion_tokens":${c},"prompt_tokens":${p},"total_tokens":${p + c}}}`;
    case 'sglang-0.5':
    case 'sglang':
      return `{"id":${j(plan.id)},"object":"chat.completion","created":${plan.created},"model":${j(plan.model)},"choices":[{"index":0,"message":{"role":"assistant","content":${text},"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":${finish},"matched_stop":null}],"usage":${sglangUsage({ prompt: p, completion: c, final: true }, f === 'sglang')},"metadata":{"weight_version":"default"}}`;
    default: {
      const extra = f === 'vllm' ? ',"completion_tokens_details":{"reasoning_tokens":0}' : '';
      const reasoning =
        f === 'vllm-0.10.1' || f === 'vllm-0.10.2'
          ? '"reasoning_content":null'
          : f === 'vllm-0.11.1'
            ? '"reasoning_content":null,"reasoning":null'
            : '"reasoning":null';
      return `{"id":${j(plan.id)},"object":"chat.completion","created":${plan.created},"model":${j(plan.model)},"choices":[{"index":0,"message":{"role":"assistant","content":${text},"refusal":null,"annotations":null,"audio":null,"function_call":null,"tool_calls":[],${reasoning}},"logprobs":null,"finish_reason":${finish},"stop_reason":null${f === 'vllm-0.10.1' ? '' : ',"token_ids":null'}}],"service_tier":null,"system_fingerprint":null,"usage":${vllmUsage({ prompt: p, completion: c, final: true }, extra)},"prompt_logprobs":null,"prompt_token_ids":null,"kv_transfer_params":null}`;
    }
  }
}

/** The golden streams' plan: a reasoning model thinks, writes, then calls a tool (what an agent's turn looks like). */
export const GOLDEN_PLAN: StreamPlan = {
  id: 'chatcmpl-9f2c',
  created: 1795679366,
  model: 'qwen3',
  promptTokens: 31,
  cachedTokens: 16,
  reasoning: ['Check'],
  text: ['Sure', '. "Paris"'],
  tool: { id: 'call_7', name: 'get_weather', args: ['{"city":', ' "Paris"}'] },
  finish: 'tool_calls',
  includeUsage: true,
  continuousUsage: true,
};

/**
 * GOLDEN_PLAN's chunks, written out by hand from each server's source (not by the writers above:
 * flavours.test.ts checks the writers against them).
 */
export const GOLDEN: Record<Flavour, readonly string[]> = {
  'vllm-0.10.1': [
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":31,"completion_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":"Check"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":32,"completion_tokens":1}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Sure"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":33,"completion_tokens":2}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":". \\"Paris\\""},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":34,"completion_tokens":3}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_7","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":35,"completion_tokens":4}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":36,"completion_tokens":5}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16}}}',
  ],
  'vllm-0.10.2': [
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":31,"completion_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":"Check"},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":32,"completion_tokens":1}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Sure"},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":33,"completion_tokens":2}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":". \\"Paris\\""},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":34,"completion_tokens":3}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_7","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":35,"completion_tokens":4}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":36,"completion_tokens":5}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16}}}',
  ],
  'vllm-0.11.1': [
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":31,"completion_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":"Check","reasoning":"Check"},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":32,"completion_tokens":1}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Sure","reasoning_content":null},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":33,"completion_tokens":2}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":". \\"Paris\\"","reasoning_content":null},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":34,"completion_tokens":3}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":null,"tool_calls":[{"id":"call_7","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":35,"completion_tokens":4}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":null,"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":36,"completion_tokens":5}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":null,"tool_calls":[{"index":0,"function":{"arguments":" \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":"","reasoning_content":null},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16}}}',
  ],
  vllm: [
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":31,"completion_tokens":0,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning":"Check"},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":32,"completion_tokens":1,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Sure"},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":33,"completion_tokens":2,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":". \\"Paris\\""},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":34,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"id":"call_7","type":"function","index":0,"function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":35,"completion_tokens":4,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\\"city\\":"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":36,"completion_tokens":5,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":" \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":"tool_calls","stop_reason":null,"token_ids":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"completion_tokens_details":{"reasoning_tokens":0}}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16},"completion_tokens_details":{"reasoning_tokens":0}}}',
  ],
  'sglang-0.5': [
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":31,"completion_tokens":0,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":"Check","tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":32,"completion_tokens":1,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":"Sure","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":33,"completion_tokens":2,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":". \\"Paris\\"","reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":34,"completion_tokens":3,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":"call_7","index":0,"type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":35,"completion_tokens":4,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":"{\\"city\\":"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":36,"completion_tokens":5,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":" \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":null},"logprobs":null,"finish_reason":"tool_calls","matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":null}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16}}}',
  ],
  sglang: [
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":31,"completion_tokens":0,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"reasoning_content":"Check"},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":32,"completion_tokens":1,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":"Sure"},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":33,"completion_tokens":2,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"content":". \\"Paris\\""},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":34,"completion_tokens":3,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":"call_7","index":0,"type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":35,"completion_tokens":4,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":"{\\"city\\":"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":36,"completion_tokens":5,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{"role":null,"content":null,"reasoning_content":null,"tool_calls":[{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":" \\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls","matched_stop":null}],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":null,"reasoning_tokens":0}}',
    '{"id":"chatcmpl-9f2c","object":"chat.completion.chunk","created":1795679366,"model":"qwen3","choices":[],"usage":{"prompt_tokens":31,"total_tokens":37,"completion_tokens":6,"prompt_tokens_details":{"cached_tokens":16},"reasoning_tokens":0}}',
  ],
  'llama.cpp': [
    `{"choices":[{"delta":{"content":null,"role":"assistant"},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{"reasoning_content":"Check"},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{"content":"Sure"},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{"content":". \\"Paris\\""},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"","name":"get_weather"},"id":"call_7","index":0,"type":"function"}]},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"{\\"city\\":"},"index":0}]},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":" \\"Paris\\"}"},"index":0}]},"finish_reason":null,"index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[{"delta":{},"finish_reason":"tool_calls","index":0}],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c"}`,
    `{"choices":[],"created":1795679366,"id":"chatcmpl-9f2c","model":"qwen3","object":"chat.completion.chunk","system_fingerprint":"b6715-0f8d3a4c","timings":${TIMINGS},"usage":{"completion_tokens":6,"prompt_tokens":31,"prompt_tokens_details":{"cached_tokens":16},"total_tokens":37}}`,
  ],
};

/** A plan of `n` English text tokens (the benchmark's answer: 20 tokens cut by max_tokens). */
export function textPlan(n: number, over: Partial<StreamPlan> = {}): StreamPlan {
  const words = [
    'Hello',
    ' there',
    ',',
    ' how',
    ' can',
    ' I',
    ' help',
    ' you',
    ' today',
    '?',
    ' I',
    ' am',
    ' a',
    ' model',
    ' that',
    ' writes',
    ' text',
    ' token',
    ' by',
    ' token',
  ];
  return {
    id: 'chatcmpl-b3a1c0d4e5f60718293a4b5c6d7e8f90',
    created: 1795679366,
    model: 'bench-model',
    promptTokens: 21,
    cachedTokens: 0,
    reasoning: [],
    text: Array.from({ length: n }, (_, i) => words[i % words.length]!),
    finish: 'length',
    includeUsage: true,
    continuousUsage: true,
    ...over,
  };
}
