// vLLM's OpenAI server, three eras of its wire format, read from its source:
// - 0.10.1: vllm/entrypoints/openai/serving_chat.py + protocol.py (nested errors since PR #22099;
//   `reasoning_content` in deltas; no `token_ids`).
// - 0.11.1 (to 0.15): `token_ids: null` on every chunk choice (PR #22587, 0.10.2), `reasoning`
//   with an after-validator copying it into `reasoning_content` (PR #27752), so every delta
//   carries `"reasoning_content"` (null when there is none).
// - main: chat_completion/serving.py + protocol.py: `reasoning` only (PR #33402 removed
//   `reasoning_content`), `completion_tokens_details` in usage when a reasoning parser is
//   configured (PR #45802), named tool choice ends a stream with `stop`.
// Chunks are `model_dump_json(exclude_unset=True)`: only the fields vLLM set appear, in the
// pydantic models' field order; the final usage chunk also excludes None. Non-stream bodies are
// whole dumps (every field, nulls included). Built as strings from precomputed pieces: this is
// the benchmarks' default flavour, so no object per chunk.
import { hexId } from '../generate.js';
import type { SimFlavour } from '../options.js';
import type { ChatAnswer, ChatEvents, ErrorAnswer, Flavour } from './flavour.js';
import { q } from './flavour.js';

type Era = '0.10.1' | '0.11.1' | 'main';

/** A string as Python's json.dumps writes it (ensure_ascii: non-ASCII as \\uXXXX). */
export const pyJson = (s: string): string => JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);

const ERROR_TYPES: Record<number, string> = { 404: 'NotFoundError', 429: 'RateLimitError' };

/** vLLM's error type for a status (vllm/entrypoints/openai serving_engine create_error_response). */
export const vllmErrorType = (status: number): string => ERROR_TYPES[status] ?? (status >= 500 ? 'InternalServerError' : 'BadRequestError');

/** vLLM's nested error body (ErrorResponse{error: ErrorInfo{message, type, param, code}}, since 0.10.1). */
export function vllmErrorBody(status: number, message: string, param: string | null = null): string {
  return JSON.stringify({ error: { message, type: vllmErrorType(status), param, code: status } });
}

/** vLLM's finish_reason for a planned answer: named (and, non-stream up to 0.11.0, required) tool choice ends with `stop`. */
export function vllmFinish(era: Era, a: Pick<ChatAnswer, 'plan' | 'toolChoice' | 'stream'>): string {
  const finish = a.plan.finish;
  if (finish !== 'tool_calls') return finish;
  if (a.toolChoice === 'named') return a.stream && era !== 'main' ? 'tool_calls' : 'stop';
  if (a.toolChoice === 'required' && !a.stream && era === '0.10.1') return 'stop';
  return 'tool_calls';
}

class VllmEvents implements ChatEvents {
  readonly tokens: number;
  private readonly prefix: string;
  private readonly chunkEnd: string;
  /** Between the delta and the end of a token chunk: logprobs, finish_reason null, token_ids. */
  private readonly open: string;

  constructor(
    private readonly era: Era,
    private readonly a: ChatAnswer,
  ) {
    const p = a.plan;
    this.tokens = p.reasoning.length + p.content.length + (p.tool ? p.tool.args.length : 0);
    this.prefix = `data: {"id":"${a.id}","object":"chat.completion.chunk","created":${a.created},"model":${a.modelJson},"choices":[{"index":0,"delta":`;
    this.open = `,"logprobs":null,"finish_reason":null${era === '0.10.1' ? '' : ',"token_ids":null'}}]`;
    this.chunkEnd = '}\n\n';
  }

  /** With continuous usage stats: the running usage on every chunk (no details, as vLLM's stream loop builds it). */
  private end(completion: number): string {
    if (!this.a.continuousUsage) return this.chunkEnd;
    const p = this.a.promptTokens;
    // main passes completion_tokens_details explicitly (None without a reasoning parser): exclude_unset keeps it.
    const details =
      this.era === 'main'
        ? `,"completion_tokens_details":${this.a.reasoningParser ? `{"reasoning_tokens":${Math.min(completion, this.a.plan.reasoning.length)}}` : 'null'}`
        : '';
    return `,"usage":{"prompt_tokens":${p},"total_tokens":${p + completion},"completion_tokens":${completion}${details}}}\n\n`;
  }

  head(): string {
    const delta = this.era === '0.11.1' ? '{"role":"assistant","content":"","reasoning_content":null}' : '{"role":"assistant","content":""}';
    return `${this.prefix}${delta}${this.open}${this.end(0)}`;
  }

  private delta(i: number): string {
    const plan = this.a.plan;
    const r = plan.reasoning.length;
    if (i < r) {
      const p = q(plan.reasoning[i]!);
      return this.era === '0.10.1'
        ? `{"reasoning_content":${p}}`
        : this.era === '0.11.1'
          ? `{"reasoning":${p},"reasoning_content":${p}}`
          : `{"reasoning":${p}}`;
    }
    if (plan.tool) {
      const j = i - r;
      const p = q(plan.tool.args[j]!);
      const call =
        j === 0
          ? `[{"id":"${plan.tool.id}","type":"function","index":0,"function":{"name":${q(plan.tool.name)},"arguments":${p}}}]`
          : `[{"index":0,"function":{"arguments":${p}}}]`;
      return this.era === '0.11.1' ? `{"reasoning_content":null,"tool_calls":${call}}` : `{"tool_calls":${call}}`;
    }
    const c = q(plan.content[i - r]!);
    return this.era === '0.11.1' ? `{"content":${c},"reasoning_content":null}` : `{"content":${c}}`;
  }

  private finishTail(finish: string): string {
    return `,"logprobs":null,"finish_reason":"${finish}","stop_reason":null${this.era === '0.10.1' ? '' : ',"token_ids":null'}}]`;
  }

  /**
   * Token `i`. vLLM puts finish_reason on the output that finishes: cut by max_tokens (`length`)
   * that is the last token's own chunk; an answer that ends by itself ends with the EOS token,
   * whose text is empty, so its finish comes in a chunk of its own (tail()).
   */
  token(i: number): string {
    const a = this.a;
    if (i === this.tokens - 1 && a.plan.finish === 'length') return `${this.prefix}${this.delta(i)}${this.finishTail('length')}${this.end(i + 1)}`;
    return `${this.prefix}${this.delta(i)}${this.open}${this.end(i + 1)}`;
  }

  tail(): string {
    const a = this.a;
    const n = a.plan.completionTokens;
    let out = '';
    if (a.plan.finish !== 'length' || this.tokens === 0) {
      // The EOS token's chunk: its empty text as content; after a tool call the tool parser
      // gives no delta, so an empty DeltaMessage (0.11.1: still with the validator's null).
      const eos = a.plan.tool
        ? this.era === '0.11.1'
          ? '{"reasoning_content":null}'
          : '{}'
        : this.era === '0.11.1'
          ? '{"content":"","reasoning_content":null}'
          : '{"content":""}';
      out += `${this.prefix}${eos}${this.finishTail(vllmFinish(this.era, a))}${this.end(n)}`;
    }
    if (a.includeUsage)
      out += `data: {"id":"${a.id}","object":"chat.completion.chunk","created":${a.created},"model":${a.modelJson},"choices":[],"usage":${finalUsage(this.era, a)}}\n\n`;
    return `${out}data: [DONE]\n\n`;
  }
}

/** The final usage chunk's usage (exclude_none): details only where vLLM sets them. */
function finalUsage(era: Era, a: ChatAnswer): string {
  const { promptTokens: p, cachedTokens } = a;
  const c = a.plan.completionTokens;
  let out = `{"prompt_tokens":${p},"total_tokens":${p + c},"completion_tokens":${c}`;
  // Up to 0.15 only when some tokens were cached; main builds the details whenever the flag is on.
  if (a.reportCached && (cachedTokens > 0 || era === 'main')) out += `,"prompt_tokens_details":{"cached_tokens":${cachedTokens}}`;
  if (era === 'main' && a.reasoningParser) out += `,"completion_tokens_details":{"reasoning_tokens":${a.plan.reasoning.length}}`;
  return `${out}}`;
}

function body(era: Era, a: ChatAnswer): string {
  const { plan } = a;
  const reasoning = plan.reasoning.length ? plan.reasoning.join('') : null;
  const tool = plan.tool;
  // Named and required tool choice are parsed by vLLM itself: content "", not null.
  const content = tool ? (a.toolChoice === 'named' || a.toolChoice === 'required' ? '' : null) : plan.content.join('');
  const message: Record<string, unknown> = {
    role: 'assistant',
    content,
    refusal: null,
    annotations: null,
    audio: null,
    function_call: null,
    tool_calls: tool ? [{ id: tool.id, type: 'function', function: { name: tool.name, arguments: tool.args.join('') } }] : [],
  };
  if (era !== '0.10.1') message.reasoning = reasoning;
  if (era !== 'main') message.reasoning_content = reasoning;
  const choice: Record<string, unknown> = { index: 0, message, logprobs: null, finish_reason: vllmFinish(era, a), stop_reason: null };
  if (era !== '0.10.1') choice.token_ids = null;
  const c = plan.completionTokens;
  const usage: Record<string, unknown> = {
    prompt_tokens: a.promptTokens,
    total_tokens: a.promptTokens + c,
    completion_tokens: c,
    prompt_tokens_details: a.reportCached && a.cachedTokens > 0 ? { cached_tokens: a.cachedTokens } : null,
  };
  if (era === 'main') usage.completion_tokens_details = a.reasoningParser ? { reasoning_tokens: plan.reasoning.length } : null;
  const out: Record<string, unknown> = {
    id: a.id,
    object: 'chat.completion',
    created: a.created,
    model: JSON.parse(a.modelJson) as string,
    choices: [choice],
    service_tier: null,
    system_fingerprint: null,
    usage,
    prompt_logprobs: null,
  };
  if (era !== '0.10.1') out.prompt_token_ids = null;
  out.kv_transfer_params = null;
  return JSON.stringify(out);
}

function models(served: string, maxModelLen: number, created: number): string {
  return JSON.stringify({
    object: 'list',
    data: [
      {
        id: served,
        object: 'model',
        created,
        owned_by: 'vllm',
        root: served,
        parent: null,
        max_model_len: maxModelLen,
        permission: [
          {
            id: `modelperm-${hexId()}`,
            object: 'model_permission',
            created,
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
  });
}

const error = (status: number, message: string, param: string | null = null): ErrorAnswer => ({ status, body: vllmErrorBody(status, message, param) });

function vllmFlavour(name: SimFlavour, era: Era): Flavour {
  return {
    name,
    noDelay: true,
    metricsByDefault: true,
    headWithFirstToken: false,
    closeAfterStream: false,
    streamHeaders: [],
    checksModel: true,
    completionId: () => `chatcmpl-${hexId()}`,
    modelFor: (served) => q(served),
    body: (a) => body(era, a),
    events: (a) => new VllmEvents(era, a),
    error,
    // create_streaming_error_response: json.dumps of the ErrorResponse (Python's ", " and ": "), then [DONE].
    streamError: (status, message) =>
      `data: {"error": {"message": ${pyJson(message)}, "type": "${vllmErrorType(status)}", "param": null, "code": ${status}}}\n\ndata: [DONE]\n\n`,
    promptTooLong: (promptTokens, maxModelLen) =>
      error(
        400,
        `This model's maximum context length is ${maxModelLen} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
        'messages',
      ),
    maxTokensTooLarge: (maxTokens, promptTokens, maxModelLen) =>
      error(
        400,
        `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context length is ${maxModelLen} tokens and your request has ${promptTokens} input tokens (${maxTokens} > ${maxModelLen} - ${promptTokens}).`,
        'max_tokens',
      ),
    models,
    healthBody: '',
  };
}

export const vllm0101 = vllmFlavour('vllm-0.10.1', '0.10.1');
export const vllm0111 = vllmFlavour('vllm-0.11.1', '0.11.1');
export const vllmMain = vllmFlavour('vllm', 'main');

/** vLLM's metric names per era: 0.10 still had the gpu_ names, renamed to kv_cache_/prefix_cache_ in 0.11. */
export function vllmMetricNames(name: SimFlavour): { kvUsage: string; prefixQueries: string; prefixHits: string } {
  return name === 'vllm-0.10.1'
    ? { kvUsage: 'vllm:gpu_cache_usage_perc', prefixQueries: 'vllm:gpu_prefix_cache_queries', prefixHits: 'vllm:gpu_prefix_cache_hits' }
    : { kvUsage: 'vllm:kv_cache_usage_perc', prefixQueries: 'vllm:prefix_cache_queries', prefixHits: 'vllm:prefix_cache_hits' };
}
