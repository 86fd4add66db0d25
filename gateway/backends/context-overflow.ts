// A backend's "the prompt does not fit the context" error, read in each backend's own words, so
// /v1/messages can answer it in the words coding agents read to compact their history
// (`prompt is too long: N tokens > M maximum`) or to lower max_tokens (`input length and
// `max_tokens` exceed context limit: N + K > M`), whatever the backend said. The wordings, from
// the servers' source:
//
// - vLLM (vllm/entrypoints/openai/serving_engine.py `_validate_input`; current main
//   vllm/entrypoints/openai/engine/serving.py): up to 0.10 "This model's maximum context length
//   is M tokens. However, you requested T tokens (N in the messages, K in the completion)...";
//   later "This model's maximum context length is M tokens. However, your request has N input
//   tokens..." and "'max_tokens' or 'max_completion_tokens' is too large: K. This model's maximum
//   context length is M tokens and your request has N input tokens (K > M - N)...".
// - SGLang (python/sglang/srt/managers/tokenizer_manager.py `_validate_one_request`): "The input
//   (N tokens) is longer than the model's context length (M tokens)." and "Requested token count
//   exceeds the model's maximum context length of M tokens. You requested a total of T tokens: N
//   tokens from the input messages and K tokens for the completion...".
// - llama.cpp (tools/server/server-context.cpp, ERROR_TYPE_EXCEED_CONTEXT_SIZE): `{"error":
//   {"code": 400, "message": "request (N tokens) exceeds the available context size (M tokens),
//   try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": N, "n_ctx": M}}`.
import type { BackendError } from './backend-error.js';

/** What an over-context error says: the prompt's tokens, the context, and the asked output when the backend named it. */
export interface ContextOverflow {
  promptTokens: number;
  context: number;
  maxTokens: number | undefined;
}

const int = (s: string | undefined): number => Number(s);

/** The matchers, each giving [N, M, K?] from its match. */
const WORDINGS: readonly [RegExp, (m: RegExpExecArray) => [number, number, number | undefined]][] = [
  // vLLM up to 0.10: T = N + K.
  [
    /maximum context length is (\d+) tokens\. However, you requested \d+ tokens \((\d+) in the messages, (\d+) in the completion\)/,
    (m) => [int(m[2]), int(m[1]), int(m[3])],
  ],
  // vLLM later: the max tokens form first (it also says "your request has N input tokens").
  [
    /is too large: (\d+)\. This model's maximum context length is (\d+) tokens and your request has (\d+) input tokens/,
    (m) => [int(m[3]), int(m[2]), int(m[1])],
  ],
  [/maximum context length is (\d+) tokens\. However, your request has (\d+) input tokens/, (m) => [int(m[2]), int(m[1]), undefined]],
  // SGLang.
  [/The input \((\d+) tokens\) is longer than the model's context length \((\d+) tokens\)/, (m) => [int(m[1]), int(m[2]), undefined]],
  [
    /maximum context length of (\d+) tokens\. You requested a total of \d+ tokens: (\d+) tokens from the input messages and (\d+) tokens for the completion/,
    (m) => [int(m[2]), int(m[1]), int(m[3])],
  ],
  // llama.cpp, when its numeric fields are missing.
  [/request \((\d+) tokens\) exceeds the available context size \((\d+) tokens\)/, (m) => [int(m[1]), int(m[2]), undefined]],
];

const isCount = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 0;

/** The overflow a backend's error describes, or undefined when it is another error. */
export function readContextOverflow(e: BackendError): ContextOverflow | undefined {
  const n = e.nested;
  if (n && n.type === 'exceed_context_size_error' && isCount(n.n_prompt_tokens) && isCount(n.n_ctx) && n.n_ctx > 0) {
    return { promptTokens: n.n_prompt_tokens, context: n.n_ctx, maxTokens: undefined };
  }
  for (const [re, read] of WORDINGS) {
    const m = re.exec(e.message);
    if (!m) continue;
    const [promptTokens, context, maxTokens] = read(m);
    if (Number.isSafeInteger(promptTokens) && Number.isSafeInteger(context) && context > 0) return { promptTokens, context, maxTokens };
  }
  return undefined;
}

/**
 * The messages protocol's words for an overflow: the prompt alone leaves no room for one output
 * token (the gateway's own refusal says the same, admission/context-fit.ts), else the prompt and
 * max_tokens together are past the context (the wording of Anthropic's API, which Claude Code
 * reads to retry with a smaller max_tokens).
 */
export function overflowMessage(o: ContextOverflow): string {
  if (o.maxTokens === undefined || o.promptTokens >= o.context) return `prompt is too long: ${o.promptTokens} tokens > ${o.context - 1} maximum`;
  return `input length and \`max_tokens\` exceed context limit: ${o.promptTokens} + ${o.maxTokens} > ${o.context}, decrease input length or \`max_tokens\` and try again`;
}
