// llama.cpp's llama-server, read from tools/server/: server-task.cpp (the chat chunks of
// server_task_result_cmpl_partial/final::to_json_oaicompat_chat*, `timings`), server-common.h
// (`using json = nlohmann::ordered_json`: keys in the order the code writes them, which is
// nearly alphabetical: choices, created, id, model, system_fingerprint, object), server-http.cpp
// (`Server: llama.cpp`, `X-Accel-Buffering: no` on streams, the 404 body) and
// server-context.cpp (the over-context error, /tokenize, /apply-template, /v1/models).
// llama-server serves one model and checks no model name; it echoes the request's `model`.
import { randomBytes } from 'node:crypto';
import type { ChatAnswer, ChatEvents, ErrorAnswer, Flavour } from './flavour.js';
import { q } from './flavour.js';

/** build_info, as `system_fingerprint` (b<build>-<commit> on a real build). */
export const LLAMA_CPP_BUILD = 'b6000-0000000';

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
/** server-common.cpp random_string(): 32 alphanumerics. */
export function randomString(): string {
  const bytes = randomBytes(32);
  let s = '';
  for (const b of bytes) s += ALNUM[b % ALNUM.length];
  return s;
}

/** format_error_response's type per status. */
const ERROR_TYPES: Record<number, string> = {
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  501: 'not_supported_error',
  503: 'unavailable_error',
};
const errorType = (status: number): string => ERROR_TYPES[status] ?? (status >= 500 ? 'server_error' : 'invalid_request_error');

/** `{"error":{"code","message","type"}}` (format_error_response, ordered_json). */
export function llamaCppErrorBody(status: number, message: string, extra: Record<string, unknown> = {}): string {
  return JSON.stringify({ error: { code: status, message, type: errorType(status), ...extra } });
}

/** A double as nlohmann writes it: shortest round trip, integral values with ".0", non-finite as null. */
function dbl(v: number): string {
  if (!Number.isFinite(v)) return 'null';
  return Number.isInteger(v) ? `${v}.0` : String(v);
}

/** result_timings::to_json for `predicted` tokens so far. */
function timings(a: ChatAnswer, predicted: number): string {
  const promptN = a.promptTokens - a.cachedTokens;
  const promptMs = a.firstTokenMs;
  const predictedMs = predicted * a.tokenMs;
  return (
    `{"cache_n":${a.cachedTokens},"prompt_n":${promptN},"prompt_ms":${dbl(promptMs)},"prompt_per_token_ms":${dbl(promptMs / promptN)},"prompt_per_second":${dbl((1e3 * promptN) / promptMs)},` +
    `"predicted_n":${predicted},"predicted_ms":${dbl(predictedMs)},"predicted_per_token_ms":${dbl(predictedMs / predicted)},"predicted_per_second":${dbl((1e3 * predicted) / predictedMs)}}`
  );
}

function usageJson(a: ChatAnswer): string {
  const c = a.plan.completionTokens;
  const p = a.promptTokens;
  return `{"completion_tokens":${c},"prompt_tokens":${p},"total_tokens":${c + p},"prompt_tokens_details":{"cached_tokens":${a.cachedTokens}}}`;
}

/** finish_reason: `tool_calls` whenever the message holds tool calls and the model stopped by itself, whatever the tool choice. */
const finishOf = (a: ChatAnswer): string => a.plan.finish;

class LlamaCppEvents implements ChatEvents {
  readonly tokens: number;
  /** After the choices: created, id, model, system_fingerprint, object. */
  private readonly rest: string;
  private readonly toolId = randomString();

  constructor(private readonly a: ChatAnswer) {
    const p = a.plan;
    this.tokens = p.reasoning.length + p.content.length + (p.tool ? p.tool.args.length : 0);
    this.rest = `"created":${a.created},"id":"${a.id}","model":${a.modelJson},"system_fingerprint":"${LLAMA_CPP_BUILD}","object":"chat.completion.chunk"`;
  }

  private chunk(delta: string, withTimings: number | undefined): string {
    const t = withTimings === undefined ? '' : `,"timings":${timings(this.a, withTimings)}`;
    return `data: {"choices":[{"finish_reason":null,"index":0,"delta":${delta}}],${this.rest}${t}}\n\n`;
  }

  /** Nothing: llama-server sends its head and the role delta with the first token. */
  head(): string {
    return '';
  }

  private delta(i: number): string {
    const plan = this.a.plan;
    const r = plan.reasoning.length;
    if (i < r) return `{"reasoning_content":${q(plan.reasoning[i]!)}}`;
    if (plan.tool) {
      const j = i - r;
      const p = q(plan.tool.args[j]!);
      return j === 0
        ? `{"tool_calls":[{"index":0,"id":"${this.toolId}","type":"function","function":{"name":${q(plan.tool.name)},"arguments":${p}}}]}`
        : `{"tool_calls":[{"index":0,"function":{"arguments":${p}}}]}`;
    }
    return `{"content":${q(plan.content[i - r]!)}}`;
  }

  /** The first token's result carries the role delta first (to conform to OpenAI), timings on the last delta of each result. */
  token(i: number): string {
    const role = i === 0 ? this.chunk('{"role":"assistant","content":null}', undefined) : '';
    return role + this.chunk(this.delta(i), i + 1);
  }

  tail(): string {
    const a = this.a;
    const n = this.tokens;
    // A stream with no token at all still opens with the role delta.
    let out = n === 0 ? this.chunk('{"role":"assistant","content":null}', undefined) : '';
    const finishTimings = a.includeUsage ? '' : `,"timings":${timings(a, a.plan.completionTokens)}`;
    out += `data: {"choices":[{"finish_reason":"${finishOf(a)}","index":0,"delta":{}}],${this.rest}${finishTimings}}\n\n`;
    if (a.includeUsage) out += `data: {"choices":[],${this.rest},"usage":${usageJson(a)},"timings":${timings(a, a.plan.completionTokens)}}\n\n`;
    return `${out}data: [DONE]\n\n`;
  }
}

function body(a: ChatAnswer): string {
  const { plan } = a;
  const tool = plan.tool;
  let message = '{"role":"assistant"';
  if (plan.reasoning.length) message += `,"reasoning_content":${q(plan.reasoning.join(''))}`;
  message += `,"content":${tool ? 'null' : q(plan.content.join(''))}`;
  if (tool) message += `,"tool_calls":[{"type":"function","function":{"name":${q(tool.name)},"arguments":${q(tool.args.join(''))}},"id":"${randomString()}"}]`;
  message += '}';
  return (
    `{"choices":[{"finish_reason":"${finishOf(a)}","index":0,"message":${message}}],"created":${a.created},"model":${a.modelJson},` +
    `"system_fingerprint":"${LLAMA_CPP_BUILD}","object":"chat.completion","usage":${usageJson(a)},"id":"${a.id}","timings":${timings(a, plan.completionTokens)}}`
  );
}

const error = (status: number, message: string): ErrorAnswer => ({ status, body: llamaCppErrorBody(status, message) });

export const llamaCpp: Flavour = {
  name: 'llama.cpp',
  // tools/server/utils.hpp: "disable Nagle's algorithm" (#define CPPHTTPLIB_TCP_NODELAY true).
  noDelay: true,
  metricsByDefault: false,
  headWithFirstToken: true,
  closeAfterStream: true,
  streamHeaders: [
    ['server', 'llama.cpp'],
    ['x-accel-buffering', 'no'],
  ],
  checksModel: false,
  completionId: () => `chatcmpl-${randomString()}`,
  modelFor: (served, requested) => q(requested ?? served),
  body,
  events: (a) => new LlamaCppEvents(a),
  error,
  // server-context.cpp format_error: format_oai_sse({"error": ...}); the stream ends there, no [DONE].
  streamError: (status, message) => `data: ${llamaCppErrorBody(status, message)}\n\n`,
  promptTooLong: (promptTokens, maxModelLen) => ({
    status: 400,
    body: llamaCppErrorBody(400, `request (${promptTokens} tokens) exceeds the available context size (${maxModelLen} tokens), try increasing it`, {
      type: 'exceed_context_size_error',
      n_prompt_tokens: promptTokens,
      n_ctx: maxModelLen,
    }),
  }),
  // llama-server does not refuse a max_tokens beyond the window: it generates until the window is full.
  maxTokensTooLarge: () => undefined,
  models: (served, maxModelLen, created) =>
    JSON.stringify({
      object: 'list',
      data: [
        {
          id: served,
          object: 'model',
          created,
          owned_by: 'llamacpp',
          meta: { vocab_type: 2, n_vocab: 151936, n_ctx_train: maxModelLen, n_embd: 4096, n_params: 8_000_000_000, size: 4_920_000_000, n_ctx: maxModelLen },
        },
      ],
    }),
  healthBody: '{"status":"ok"}',
};

/** The 404 of a route llama-server does not have (server-http.cpp's error handler). */
export const LLAMA_CPP_NOT_FOUND = JSON.stringify({ error: { message: 'File Not Found', type: 'not_found_error', code: 404 } });
