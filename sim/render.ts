// vLLM-shaped chat completion bodies: the whole response, and the SSE chunks of a stream.
// Stream chunks are built as strings from a precomputed prefix: no object per chunk.
import type { Plan } from './plan.js';

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number } | null;
}

/** vLLM reports prompt_tokens_details only when some prompt tokens came from the prefix cache. */
const usage = (prompt: number, completion: number, cached: number): Usage => ({
  prompt_tokens: prompt,
  total_tokens: prompt + completion,
  completion_tokens: completion,
  prompt_tokens_details: cached > 0 ? { cached_tokens: cached } : null,
});

/** The non-stream response body (object), as vLLM returns it. */
export function completionBody(id: string, created: number, model: string, plan: Plan, promptTokens: number, cachedTokens = 0): object {
  const reasoning = plan.reasoning.length ? plan.reasoning.join('') : null;
  const tool = plan.tool;
  return {
    id,
    object: 'chat.completion',
    created,
    model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: tool ? null : plan.content.join(''),
          refusal: null,
          annotations: null,
          audio: null,
          function_call: null,
          tool_calls: tool ? [{ id: tool.id, type: 'function', function: { name: tool.name, arguments: tool.args.join('') } }] : [],
          reasoning,
          reasoning_content: reasoning,
        },
        logprobs: null,
        finish_reason: plan.finish,
        stop_reason: null,
      },
    ],
    service_tier: null,
    system_fingerprint: null,
    usage: usage(promptTokens, plan.completionTokens, cachedTokens),
    prompt_logprobs: null,
    kv_transfer_params: null,
  };
}

/** Builds the SSE events of one streamed completion. Token `i` (0-based) is one chunk. */
export class StreamRenderer {
  private readonly prefix: string;
  /** Number of token chunks (reasoning + content or tool argument pieces). */
  readonly tokens: number;

  constructor(
    id: string,
    created: number,
    modelJson: string,
    private readonly plan: Plan,
    private readonly promptTokens: number,
    private readonly includeUsage: boolean,
    private readonly continuousUsage: boolean,
    /** Prompt tokens from the prefix cache: in the final usage only (vLLM's continuous usage has no details). */
    private readonly cachedTokens = 0,
  ) {
    this.prefix = `data: {"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${modelJson},"choices":[`;
    this.tokens = plan.reasoning.length + plan.content.length + (plan.tool ? plan.tool.args.length : 0);
  }

  private usageSuffix(completion: number): string {
    return this.continuousUsage
      ? `,"usage":{"prompt_tokens":${this.promptTokens},"total_tokens":${this.promptTokens + completion},"completion_tokens":${completion}}}\n\n`
      : '}\n\n';
  }

  /** The first event: the assistant role with empty content. */
  role(): string {
    return `${this.prefix}{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]${this.usageSuffix(0)}`;
  }

  /** The event carrying token `i`; the last one also carries finish_reason (as vLLM sends it). */
  token(i: number): string {
    const plan = this.plan;
    const r = plan.reasoning.length;
    let delta: string;
    if (i < r) {
      const p = JSON.stringify(plan.reasoning[i]);
      delta = `{"reasoning":${p},"reasoning_content":${p}}`;
    } else if (plan.tool) {
      const j = i - r;
      const p = JSON.stringify(plan.tool.args[j]);
      delta =
        j === 0
          ? `{"tool_calls":[{"id":"${plan.tool.id}","type":"function","index":0,"function":{"name":${JSON.stringify(plan.tool.name)},"arguments":${p}}}]}`
          : `{"tool_calls":[{"index":0,"function":{"arguments":${p}}}]}`;
    } else {
      delta = `{"content":${JSON.stringify(plan.content[i - r])}}`;
    }
    const finish = i === this.tokens - 1 ? `"${plan.finish}"` : 'null';
    return `${this.prefix}{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]${this.usageSuffix(i + 1)}`;
  }

  /** Sent when no token is generated at all (max_tokens cut everything): finish_reason alone. */
  emptyFinish(): string {
    return `${this.prefix}{"index":0,"delta":{},"logprobs":null,"finish_reason":"${this.plan.finish}"}]${this.usageSuffix(0)}`;
  }

  /** The closing events: the usage chunk (choices: []) when asked for, then [DONE]. */
  tail(): string {
    const u = this.includeUsage
      ? `${this.prefix}],"usage":{"prompt_tokens":${this.promptTokens},"total_tokens":${this.promptTokens + this.plan.completionTokens},"completion_tokens":${this.plan.completionTokens}${this.cachedTokens > 0 ? `,"prompt_tokens_details":{"cached_tokens":${this.cachedTokens}}` : ''}}}\n\n`
      : '';
    return `${u}data: [DONE]\n\n`;
  }
}
