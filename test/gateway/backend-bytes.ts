// The bytes real backends answer, for the gateway's tests (scripted-backend.ts), each read in the
// server's own public source (field order as the server writes it; ids and times fixed):
//
// - vLLM: vllm/entrypoints/openai/protocol.py (ModelCard, ChatCompletionResponse,
//   ChatCompletionStreamResponse), vllm/entrypoints/openai/serving_chat.py (a named tool choice
//   ends with the output's own finish reason, "stop", not "tool_calls"; the finish chunk carries
//   `"stop_reason":null`).
// - SGLang: python/sglang/srt/entrypoints/openai/protocol.py (ModelCard with max_model_len,
//   TokenizeResponse `{tokens, count, max_model_len}` where max_model_len is the tokenizer's
//   model_max_length), serving_tokenize.py, http_server.py (a validation error is a 400
//   `{"object":"error","message":"<exc> <errors>","type":"Bad Request","param":null,"code":400}`),
//   managers/tokenizer_manager.py (the over-context wording), metrics/collector.py
//   (`sglang:num_queue_reqs`).
// - llama.cpp: tools/server/server-context.cpp (/v1/models with `meta.n_ctx`, /props
//   `default_generation_settings.n_ctx`, /apply-template `{prompt}`, /tokenize `{tokens}`, the
//   `exceed_context_size_error` body, `llamacpp:requests_deferred`).
import type { Answer } from './scripted-backend.js';

export const vllmModels = (id: string, maxModelLen: number): Answer => ({
  body: JSON.stringify({
    object: 'list',
    data: [
      {
        id,
        object: 'model',
        created: 1764300000,
        owned_by: 'vllm',
        root: `/models/${id}`,
        parent: null,
        max_model_len: maxModelLen,
        permission: [
          {
            id: 'modelperm-0',
            object: 'model_permission',
            created: 1764300000,
            allow_create_engine: false,
            allow_sampling: true,
            allow_logprobs: true,
            allow_search_indices: false,
            allow_view: true,
            allow_fine_tuning: false,
            organization: '*',
            group: null,
            is_blocking: false,
          },
        ],
      },
    ],
  }),
});

export const sglangModels = (id: string, maxModelLen: number): Answer => ({
  body: JSON.stringify({
    object: 'list',
    data: [{ id, object: 'model', created: 1764300000, owned_by: 'sglang', root: id, parent: null, max_model_len: maxModelLen }],
  }),
});

/** SGLang's /tokenize answer: the count, and the tokenizer's limit as max_model_len. */
export const sglangTokenize = (count: number): Answer => ({
  body: JSON.stringify({ tokens: Array.from({ length: count }, (_, i) => 1000 + i), count, max_model_len: 131072 }),
});

/** SGLang 0.5's /tokenize answer to a chat body: the validation 400 for the missing `prompt`. */
export const sglang05TokenizeRefusal = (body: string): Answer => {
  const errors = `[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field required', 'input': ${body}}]`;
  return {
    status: 400,
    body: JSON.stringify({
      object: 'error',
      message: `1 validation error:\n  ${errors.slice(1, -1)}\n ${errors}`,
      type: 'Bad Request',
      param: null,
      code: 400,
    }),
  };
};

export const sglangTooLong = (n: number, m: number): Answer => ({
  status: 400,
  body: JSON.stringify({
    object: 'error',
    message: `The input (${n} tokens) is longer than the model's context length (${m} tokens).`,
    type: 'BadRequestError',
    param: null,
    code: 400,
  }),
});

export const sglangMetrics = (queued: number): Answer => ({
  headers: { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' },
  body: [
    '# HELP sglang:num_running_reqs The number of running requests.',
    '# TYPE sglang:num_running_reqs gauge',
    'sglang:num_running_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} 8.0',
    '# HELP sglang:num_queue_reqs The number of requests in the waiting queue.',
    '# TYPE sglang:num_queue_reqs gauge',
    `sglang:num_queue_reqs{engine_type="unified",model_name="m",pp_rank="0",tp_rank="0"} ${queued.toFixed(1)}`,
    '',
  ].join('\n'),
});

/** A whole SGLang chat completion (its `matched_stop` on the choice). */
export const sglangCompletion = (content: string): Answer => ({
  body: JSON.stringify({
    id: 'b1c2d3',
    object: 'chat.completion',
    created: 1764300000,
    model: 'm',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content, reasoning_content: null, tool_calls: null },
        logprobs: null,
        finish_reason: 'stop',
        matched_stop: 151645,
      },
    ],
    usage: { prompt_tokens: 9, total_tokens: 10, completion_tokens: 1, prompt_tokens_details: null, reasoning_tokens: 0 },
    metadata: { weight_version: 'default' },
  }),
});

/** llama.cpp's /v1/models (current: `meta.n_ctx` is one slot's context; older servers lack it). */
export const llamaModels = (id: string, nCtx: number | undefined): Answer => ({
  body: JSON.stringify({
    models: [
      { name: id, model: id, modified_at: '', size: '', digest: '', type: 'model', description: '', tags: [''], capabilities: ['completion'], parameters: '' },
    ],
    object: 'list',
    data: [
      {
        id,
        aliases: [],
        tags: [],
        object: 'model',
        created: 1764300000,
        owned_by: 'llamacpp',
        meta: {
          vocab_type: 2,
          n_vocab: 151936,
          ...(nCtx === undefined ? {} : { n_ctx: nCtx }),
          n_ctx_train: 40960,
          n_embd: 1024,
          n_params: 596049920,
          size: 1209470976,
        },
      },
    ],
  }),
});

export const llamaProps = (nCtx: number): Answer => ({
  body: JSON.stringify({
    default_generation_settings: { id: 0, id_task: -1, n_ctx: nCtx, speculative: false, is_processing: false, params: { n_predict: -1, temperature: 0.8 } },
    total_slots: 1,
    model_path: '/models/m.gguf',
    chat_template: '{{ messages }}',
    build_info: 'b6000-0000000',
  }),
});

/** The prompt llama.cpp's /apply-template renders (ChatML), from a chat body's messages. */
export function llamaApplyTemplate(body: string): Answer {
  const { messages } = JSON.parse(body) as { messages: { role: string; content: string }[] };
  const prompt = messages.map((m) => `<|im_start|>${m.role}\n${m.content}<|im_end|>\n`).join('') + '<|im_start|>assistant\n';
  return { body: JSON.stringify({ prompt }) };
}

/** The tokens the scripted llama.cpp gives a text: one per whitespace-separated word, and a BOS when add_special. */
export function llamaTokens(content: string, addSpecial: boolean): number[] {
  const words = content.split(/\s+/).filter((w) => w !== '');
  return [...(addSpecial ? [1] : []), ...words.map((_, i) => 2000 + i)];
}

/** llama.cpp's /tokenize: `{tokens}` of `content`; a body without content tokenizes nothing. */
export function llamaTokenize(body: string): Answer {
  const b = JSON.parse(body) as { content?: string; add_special?: boolean };
  return { body: JSON.stringify({ tokens: b.content === undefined ? [] : llamaTokens(b.content, b.add_special === true) }) };
}

export const llamaTooLong = (n: number, m: number): Answer => ({
  status: 400,
  body: JSON.stringify({
    error: {
      code: 400,
      message: `request (${n} tokens) exceeds the available context size (${m} tokens), try increasing it`,
      type: 'exceed_context_size_error',
      n_prompt_tokens: n,
      n_ctx: m,
    },
  }),
});

export const llamaMetrics = (deferred: number): Answer => ({
  headers: { 'content-type': 'text/plain; version=0.0.4' },
  body: [
    '# HELP llamacpp:requests_processing Number of requests processing.',
    '# TYPE llamacpp:requests_processing gauge',
    'llamacpp:requests_processing 1',
    '# HELP llamacpp:requests_deferred Number of requests deferred.',
    '# TYPE llamacpp:requests_deferred gauge',
    `llamacpp:requests_deferred ${deferred}`,
    '',
  ].join('\n'),
});

/** A llama.cpp chat completion (keys as its JSON writes them, with `timings`). */
export const llamaCompletion = (content: string, promptTokens: number): Answer => ({
  body: JSON.stringify({
    choices: [{ finish_reason: 'stop', index: 0, message: { role: 'assistant', content } }],
    created: 1764300000,
    model: 'm',
    system_fingerprint: 'b6000-0000000',
    object: 'chat.completion',
    usage: { completion_tokens: 1, prompt_tokens: promptTokens, total_tokens: promptTokens + 1 },
    id: 'chatcmpl-abc',
    timings: { prompt_n: promptTokens, prompt_ms: 10.5, predicted_n: 1, predicted_ms: 3.1 },
  }),
});

/**
 * A llama.cpp chat stream: usage only on its last chunk (with include_usage), none on the first
 * chunks, whatever continuous_usage_stats asks.
 */
export function llamaStream(words: string[], promptTokens: number): Answer {
  const chunk = (delta: object, finish: string | null) =>
    `data: ${JSON.stringify({ choices: [{ finish_reason: finish, index: 0, delta }], created: 1764300000, id: 'chatcmpl-abc', model: 'm', system_fingerprint: 'b6000-0000000', object: 'chat.completion.chunk' })}\n\n`;
  let out = chunk({ role: 'assistant', content: null }, null);
  for (const w of words) out += chunk({ content: w }, null);
  out += chunk({}, 'stop');
  out += `data: ${JSON.stringify({ choices: [], created: 1764300000, id: 'chatcmpl-abc', model: 'm', system_fingerprint: 'b6000-0000000', object: 'chat.completion.chunk', usage: { completion_tokens: words.length, prompt_tokens: promptTokens, total_tokens: promptTokens + words.length }, timings: { prompt_n: promptTokens, predicted_n: words.length } })}\n\n`;
  out += 'data: [DONE]\n\n';
  return { headers: { 'content-type': 'text/event-stream' }, body: out };
}

/** vLLM's whole answer to a named tool choice: the tool call, and finish_reason "stop". */
export const vllmNamedToolCompletion = (finish: 'stop' | 'tool_calls'): Answer => ({
  body: JSON.stringify({
    id: 'chatcmpl-0a1b',
    object: 'chat.completion',
    created: 1764300000,
    model: 'm',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: '',
          refusal: null,
          annotations: null,
          audio: null,
          function_call: null,
          tool_calls: [{ id: 'chatcmpl-tool-5c6d', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } }],
          reasoning_content: null,
        },
        logprobs: null,
        finish_reason: finish,
        stop_reason: null,
      },
    ],
    service_tier: null,
    system_fingerprint: null,
    usage: { prompt_tokens: 180, total_tokens: 190, completion_tokens: 10, prompt_tokens_details: null },
    prompt_logprobs: null,
    kv_transfer_params: null,
  }),
});

/** vLLM's stream of a named tool choice (current main ends it with "stop"), continuous usage on every chunk. */
export function vllmNamedToolStream(finish: 'stop' | 'tool_calls', promptTokens = 180): Answer {
  let n = 0;
  const usage = () => `,"usage":{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens + n},"completion_tokens":${n}}`;
  const chunk = (choice: string) =>
    `data: {"id":"chatcmpl-0a1b","object":"chat.completion.chunk","created":1764300000,"model":"m","choices":[${choice}]${usage()}}\n\n`;
  let out = chunk('{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}');
  n++;
  out += chunk(
    '{"index":0,"delta":{"tool_calls":[{"id":"chatcmpl-tool-5c6d","type":"function","index":0,"function":{"name":"get_weather","arguments":"{\\"city\\": "}}]},"logprobs":null,"finish_reason":null}',
  );
  n++;
  out += chunk('{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\\"Paris\\"}"}}]},"logprobs":null,"finish_reason":null}');
  out += chunk(`{"index":0,"delta":{},"logprobs":null,"finish_reason":"${finish}","stop_reason":null}`);
  out += `data: {"id":"chatcmpl-0a1b","object":"chat.completion.chunk","created":1764300000,"model":"m","choices":[]${usage()}}\n\n`;
  out += 'data: [DONE]\n\n';
  return { headers: { 'content-type': 'text/event-stream' }, body: out };
}

/** vLLM's whole answer with plain text (no tool call). */
export const vllmTextCompletion = (finish: string): Answer => ({
  body: JSON.stringify({
    id: 'chatcmpl-0a1c',
    object: 'chat.completion',
    created: 1764300000,
    model: 'm',
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: 'Hello', tool_calls: [], reasoning_content: null },
        logprobs: null,
        finish_reason: finish,
        stop_reason: null,
      },
    ],
    usage: { prompt_tokens: 5, total_tokens: 6, completion_tokens: 1, prompt_tokens_details: null },
  }),
});

/**
 * An SGLang chat stream with continuous usage (python/sglang/srt/entrypoints/openai/serving_chat.py):
 * the first chunk (the role) carries no usage, each content chunk its running usage, the finish
 * chunk `matched_stop`, then the usage chunk.
 */
export function sglangStream(words: string[], promptTokens: number): Answer {
  const head = '{"id":"b1c2d3","object":"chat.completion.chunk","created":1764300000,"model":"m","choices":[';
  const usage = (n: number) =>
    `{"prompt_tokens":${promptTokens},"total_tokens":${promptTokens + n},"completion_tokens":${n},"prompt_tokens_details":null,"reasoning_tokens":0}`;
  let out = `data: ${head}{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":null}\n\n`;
  words.forEach((w, i) => {
    out += `data: ${head}{"index":0,"delta":{"role":null,"content":${JSON.stringify(w)}},"logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":${usage(i + 1)}}\n\n`;
  });
  out += `data: ${head}{"index":0,"delta":{"role":null,"content":null},"logprobs":null,"finish_reason":"stop","matched_stop":151645}],"usage":${usage(words.length)}}\n\n`;
  out += `data: ${head}],"usage":${usage(words.length)}}\n\n`;
  out += 'data: [DONE]\n\n';
  return { headers: { 'content-type': 'text/event-stream' }, body: out };
}
