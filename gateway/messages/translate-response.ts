// A chat-completions response -> a messages response (non-streaming), and the pieces both the
// streaming and non-streaming paths share: stop reasons and usage.
import { randomId } from '../../lib/ids.js';
import type { ThinkingSigner } from './signature.js';

/** Usage as vLLM reports it (on every chunk with continuous_usage_stats). */
export interface ChatUsage {
  prompt_tokens?: number;
  completion_tokens?: number;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
}

export interface ChatCompletion {
  choices?: {
    message?: {
      content?: string | null;
      reasoning_content?: string | null;
      reasoning?: string | null;
      tool_calls?: { id?: string; function?: { name?: string; arguments?: string } }[] | null;
    };
    finish_reason?: string | null;
  }[];
  usage?: ChatUsage | null;
}

export type StopReason = 'end_turn' | 'max_tokens' | 'tool_use' | 'refusal';

/**
 * The backend finish reason as a messages stop_reason; anything unrecognised is end_turn. An
 * answer that holds a tool_use block is `tool_use` whatever the finish reason: vLLM ends a named
 * or forced tool choice (`tool_choice: {type: "function", ...}`, and `required` up to 0.11.0)
 * with `finish_reason: "stop"` (vllm/entrypoints/openai/serving_chat.py), and an agent loop stops
 * on `end_turn` without running the tool. A cut answer (`length`) stays max_tokens: its tool call
 * may be incomplete.
 */
export function stopReason(finish: string | null | undefined, hasToolUse = false): StopReason {
  if (hasToolUse && finish !== 'length' && finish !== 'content_filter') return 'tool_use';
  switch (finish) {
    case 'length':
      return 'max_tokens';
    case 'tool_calls':
      return 'tool_use';
    case 'content_filter':
      return 'refusal';
    default:
      return 'end_turn';
  }
}

/** The gate's usage (gateway/gates/gate.ts) from the backend's: all prompt tokens, and the cached part. */
export function gateUsage(u: ChatUsage): { inputTokens: number; outputTokens: number; cachedTokens: number } {
  return { inputTokens: u.prompt_tokens ?? 0, outputTokens: u.completion_tokens ?? 0, cachedTokens: u.prompt_tokens_details?.cached_tokens ?? 0 };
}

export interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** The messages usage object: input_tokens excludes cached prompt tokens, reported apart. */
export function messagesUsage(u: ChatUsage | null | undefined): MessagesUsage {
  const prompt = u?.prompt_tokens ?? 0;
  const cached = u?.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    input_tokens: Math.max(0, prompt - cached),
    output_tokens: u?.completion_tokens ?? 0,
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
  };
}

export type ResponseBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

export interface MessagesResponse {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: ResponseBlock[];
  stop_reason: StopReason;
  stop_sequence: null;
  usage: MessagesUsage;
}

/** Tool arguments as an object. Arguments that are not a JSON object become `{}`. */
export function parseToolInput(args: string | undefined): Record<string, unknown> {
  if (!args) return {};
  try {
    const v: unknown = JSON.parse(args);
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

/** Translates a whole chat completion. `model` is the catalog name the client asked for. */
export function toMessagesResponse(c: ChatCompletion, model: string, signer: ThinkingSigner, thinking = true): MessagesResponse {
  const choice = c.choices?.[0];
  const msg = choice?.message;
  const content: ResponseBlock[] = [];
  const reasoning = msg?.reasoning_content ?? msg?.reasoning;
  if (thinking && reasoning) content.push({ type: 'thinking', thinking: reasoning, signature: signer.sign(reasoning) });
  if (msg?.content) content.push({ type: 'text', text: msg.content });
  if (msg?.tool_calls) {
    for (const tc of msg.tool_calls) {
      content.push({ type: 'tool_use', id: tc.id || randomId('toolu_'), name: tc.function?.name ?? '', input: parseToolInput(tc.function?.arguments) });
    }
  }
  return {
    id: randomId('msg_'),
    type: 'message',
    role: 'assistant',
    model,
    content,
    stop_reason: stopReason(
      choice?.finish_reason,
      content.some((b) => b.type === 'tool_use'),
    ),
    stop_sequence: null,
    usage: messagesUsage(c.usage),
  };
}
