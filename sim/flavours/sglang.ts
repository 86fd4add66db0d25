// SGLang's OpenAI server, read from python/sglang/srt/entrypoints/openai/: serving_chat.py
// (_generate_chat_stream: role chunk, content, a separate finish chunk with matched_stop, then
// the usage chunk), protocol.py (field order, the flat ErrorResponse, UsageInfo with
// reasoning_tokens, ModelCard) and, on main, sse_utils.py: content, reasoning, role and finish
// chunks are msgspec structs (StreamDelta: reasoning_content always written, role/content only
// when set; StreamChunk: no `usage` key unless set), while tool-call chunks and the usage chunk
// stay pydantic `model_dump_json()` (every field, nulls included, `"usage":null`). 0.5.x wrote
// every chunk with pydantic.
// SGLang echoes the request's `model` (default "default") and checks no model name; ids are
// `chatcmpl-` + uuid hex on main, a bare uuid hex on 0.5; tool call ids `call_` + 24 hex. With
// tools in the request, plain text goes through the tool parser and comes out as pydantic chunks. `matched_stop` is the EOS token id when the
// model stopped by itself (the sim uses Qwen's <|im_end|>, 151645), null when cut by length.
import { hexId } from '../generate.js';
import type { SimFlavour } from '../options.js';
import type { ChatAnswer, ChatEvents, ErrorAnswer, Flavour } from './flavour.js';
import { q } from './flavour.js';
import { pyJson } from './vllm.js';

type Era = '0.5' | 'main';

/** The EOS token id `matched_stop` names (Qwen2.5/Qwen3's <|im_end|>). */
export const SGLANG_EOS_ID = 151645;
/** /tokenize's max_model_len: the tokenizer's model_max_length, not the server's context (issue 40). */
export const SGLANG_TOKENIZER_MAX_LEN = 131072;

/** SGLang's flat ErrorResponse (protocol.py), `type` as serving_base.create_error_response names it. */
export function sglangErrorBody(
  status: number,
  message: string,
  type = status === 404 ? 'NotFoundError' : status >= 500 ? 'InternalServerError' : 'BadRequest',
): string {
  return JSON.stringify({ object: 'error', message, type, param: null, code: status });
}

/** SGLang's tool call id (serving_chat._process_tool_call_id: `call_` + 24 hex). */
const toolCallId = (): string => `call_${hexId().slice(0, 24)}`;

function usageJson(a: ChatAnswer, completion: number): string {
  const p = a.promptTokens;
  const details = a.reportCached ? `{"cached_tokens":${a.cachedTokens}}` : 'null';
  return `{"prompt_tokens":${p},"total_tokens":${p + completion},"completion_tokens":${completion},"prompt_tokens_details":${details},"reasoning_tokens":${Math.min(completion, a.plan.reasoning.length)}}`;
}

class SglangEvents implements ChatEvents {
  readonly tokens: number;
  private readonly prefix: string;
  private readonly toolId: string;

  constructor(
    private readonly era: Era,
    private readonly a: ChatAnswer,
  ) {
    const p = a.plan;
    this.tokens = p.reasoning.length + p.content.length + (p.tool ? p.tool.args.length : 0);
    this.prefix = `data: {"id":"${a.id}","object":"chat.completion.chunk","created":${a.created},"model":${a.modelJson},"choices":[{"index":0,"delta":`;
    this.toolId = toolCallId();
  }

  /** A chunk's end: msgspec (main, non-tool) omits `usage` when unset; pydantic writes `"usage":null`. */
  private close(pydantic: boolean, finish: string | null, matched: number | null, completion: number): string {
    const choice = `,"logprobs":null,"finish_reason":${finish === null ? 'null' : `"${finish}"`},"matched_stop":${matched ?? 'null'}}]`;
    if (this.a.continuousUsage) return `${choice},"usage":${usageJson(this.a, completion)}}\n\n`;
    return `${choice}${pydantic ? ',"usage":null' : ''}}\n\n`;
  }

  private get pydantic(): boolean {
    return this.era === '0.5';
  }

  head(): string {
    const delta = this.pydantic
      ? '{"role":"assistant","content":"","reasoning_content":null,"tool_calls":null}'
      : '{"reasoning_content":null,"role":"assistant","content":""}';
    return `${this.prefix}${delta}${this.close(this.pydantic, null, null, 0)}`;
  }

  token(i: number): string {
    const plan = this.a.plan;
    const r = plan.reasoning.length;
    if (i < r) {
      const p = q(plan.reasoning[i]!);
      const delta = this.pydantic ? `{"role":null,"content":null,"reasoning_content":${p},"tool_calls":null}` : `{"reasoning_content":${p}}`;
      return `${this.prefix}${delta}${this.close(this.pydantic, null, null, i + 1)}`;
    }
    if (plan.tool) {
      const j = i - r;
      const p = q(plan.tool.args[j]!);
      const call =
        j === 0
          ? `{"id":"${this.toolId}","index":0,"type":"function","function":{"name":${q(plan.tool.name)},"arguments":${p}}}`
          : `{"id":null,"index":0,"type":"function","function":{"name":null,"arguments":${p}}}`;
      return `${this.prefix}{"role":null,"content":null,"reasoning_content":null,"tool_calls":[${call}]}${this.close(true, null, null, i + 1)}`;
    }
    // With tools (and a tool choice other than none) the text goes through the tool parser,
    // whose normal_text chunks are pydantic dumps on main too (_process_tool_call_stream).
    const c = q(plan.content[i - r]!);
    const pydantic = this.pydantic || this.a.toolChoice !== 'none';
    const delta = pydantic ? `{"role":null,"content":${c},"reasoning_content":null,"tool_calls":null}` : `{"reasoning_content":null,"content":${c}}`;
    return `${this.prefix}${delta}${this.close(pydantic, null, null, i + 1)}`;
  }

  tail(): string {
    const a = this.a;
    const finish = a.plan.finish;
    const matched = finish === 'length' ? null : SGLANG_EOS_ID;
    const delta = this.pydantic ? '{"role":null,"content":null,"reasoning_content":null,"tool_calls":null}' : '{"reasoning_content":null}';
    let out = `${this.prefix}${delta}${this.close(this.pydantic, finish, matched, a.plan.completionTokens)}`;
    if (a.includeUsage) {
      out += `data: {"id":"${a.id}","object":"chat.completion.chunk","created":${a.created},"model":${a.modelJson},"choices":[],"usage":${usageJson(a, a.plan.completionTokens)}}\n\n`;
    }
    return `${out}data: [DONE]\n\n`;
  }
}

function body(a: ChatAnswer): string {
  const { plan } = a;
  const tool = plan.tool;
  const finish = plan.finish;
  // _process_tool_calls: a parsed tool call turns `stop` into `tool_calls` and clears matched.
  const matched = finish === 'length' || finish === 'tool_calls' ? null : SGLANG_EOS_ID;
  return JSON.stringify({
    id: a.id,
    object: 'chat.completion',
    created: a.created,
    model: JSON.parse(a.modelJson) as string,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: tool ? '' : plan.content.join(''),
          reasoning_content: plan.reasoning.length ? plan.reasoning.join('') : null,
          tool_calls: tool ? [{ id: toolCallId(), index: 0, type: 'function', function: { name: tool.name, arguments: tool.args.join('') } }] : null,
        },
        logprobs: null,
        finish_reason: finish,
        matched_stop: matched,
      },
    ],
    usage: JSON.parse(usageJson(a, plan.completionTokens)) as unknown,
    metadata: { weight_version: 'default' },
  });
}

const error = (status: number, message: string): ErrorAnswer => ({ status, body: sglangErrorBody(status, message) });

function sglangFlavour(name: SimFlavour, era: Era): Flavour {
  return {
    name,
    noDelay: true,
    metricsByDefault: false,
    headWithFirstToken: false,
    closeAfterStream: false,
    streamHeaders: [],
    checksModel: false,
    // serving_base._generate_request_id_base: `chatcmpl-` + uuid hex on main; 0.5 left the rid
    // to the tokenizer manager, a bare uuid hex.
    completionId: era === 'main' ? () => `chatcmpl-${hexId()}` : hexId,
    modelFor: (_served, requested) => q(requested ?? 'default'),
    body,
    events: (a) => new SglangEvents(era, a),
    error,
    // create_streaming_error_response: json.dumps({"error": ErrorResponse}) (Python's separators), then [DONE].
    streamError: (status, message) =>
      `data: {"error": {"object": "error", "message": ${pyJson(message)}, "type": "${status >= 500 ? 'InternalServerError' : 'BadRequest'}", "param": null, "code": ${status}}}\n\ndata: [DONE]\n\n`,
    // tokenizer_manager._validate_one_request's words.
    promptTooLong: (promptTokens, maxModelLen) =>
      error(400, `The input (${promptTokens} tokens) is longer than the model's context length (${maxModelLen} tokens).`),
    maxTokensTooLarge: (maxTokens, promptTokens, maxModelLen) =>
      error(
        400,
        `Requested token count exceeds the model's maximum context length of ${maxModelLen} tokens. You requested a total of ${promptTokens + maxTokens} tokens: ${promptTokens} tokens from the input messages and ${maxTokens} tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.`,
      ),
    models: (served, maxModelLen, created) =>
      JSON.stringify({
        object: 'list',
        data: [{ id: served, object: 'model', created, owned_by: 'sglang', root: served, parent: null, max_model_len: maxModelLen }],
      }),
    healthBody: '',
  };
}

export const sglang05 = sglangFlavour('sglang-0.5', '0.5');
export const sglangMain = sglangFlavour('sglang', 'main');
