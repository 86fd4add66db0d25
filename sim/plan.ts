// What one chat completion will generate, decided up front from the request, the prompt and
// the seed: the reasoning pieces, then either answer pieces or one tool call, and why it ends.
import { hashString, hexId, prng, reasoningPieces, textPieces, toolArgumentPieces } from './generate.js';
import { contentText } from './tokenizer.js';
import type { ChatRequest, Effort } from './request.js';

/** Reasoning tokens per `reasoning_effort` (absent: medium). More effort, more reasoning. */
export const REASONING_TOKENS: Record<Effort, number> = { none: 0, minimal: 4, low: 12, medium: 32, high: 96, xhigh: 192 };

/** The answer length when nothing limits it: 16 to 63 tokens, chosen by the seed and prompt. */
export const MIN_NATURAL_TOKENS = 16;
export const NATURAL_TOKENS_SPREAD = 48;

export type FinishReason = 'stop' | 'length' | 'tool_calls';

export interface Plan {
  reasoning: string[];
  /** Answer pieces (empty when a tool is called). */
  content: string[];
  /** The tool call, when one is made; `args` are the arguments' pieces (possibly cut by max_tokens). */
  tool: { id: string; name: string; args: string[] } | undefined;
  finish: FinishReason;
  /** reasoning + content or tool argument pieces: usage.completion_tokens. */
  completionTokens: number;
}

// Agents wrap context they inject into a user message in tags: Claude Code and Qwen Code
// `<system-reminder>`, Codex `<environment_context>` / `<user_instructions>`. A block is an
// opening tag (the name may carry attributes) up to the next closing tag of the same name
// (blocks of one name do not nest).
const OPENING_TAG = /<([A-Za-z][\w:-]*)(?:\s[^<>]*)?>/g;
const CLOSING_TAG = /<\/([A-Za-z][\w:-]*)\s*>/g;

/**
 * A user message's text without the tagged blocks clients inject (what the user typed). Linear:
 * an opening tag with no closing tag after it (`<br>`, `a<b`) is kept without searching on.
 */
export function ownWords(text: string): string {
  if (!text.includes('</')) return text;
  // Per tag name: its closing tags' [start, end] offsets in order, and the next one unused.
  const closings = new Map<string, { at: number[]; next: number }>();
  for (const m of text.matchAll(CLOSING_TAG)) {
    let c = closings.get(m[1]!);
    if (!c) closings.set(m[1]!, (c = { at: [], next: 0 }));
    c.at.push(m.index, m.index + m[0].length);
  }
  let out = '';
  let kept = 0;
  OPENING_TAG.lastIndex = 0;
  for (let m = OPENING_TAG.exec(text); m; m = OPENING_TAG.exec(text)) {
    const c = closings.get(m[1]!);
    if (!c) continue;
    const bodyStart = m.index + m[0].length;
    while (c.next < c.at.length && c.at[c.next]! < bodyStart) c.next += 2;
    if (c.next >= c.at.length) continue;
    out += `${text.slice(kept, m.index)} `;
    kept = c.at[c.next + 1]!;
    c.next += 2;
    OPENING_TAG.lastIndex = kept;
  }
  return out + text.slice(kept);
}

/**
 * The user's own words the model answers now: the user messages after the last assistant or
 * tool message, tagged blocks removed. Empty when the conversation ends with a tool result:
 * the model then answers the result, it is not asked anything new.
 */
export function currentUserWords(messages: ChatRequest['messages']): string {
  let words = '';
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i]!;
    if (m.role === 'assistant' || m.role === 'tool') break;
    if (m.role === 'user') words = `${ownWords(contentText(m.content))}\n${words}`;
  }
  return words;
}

const isNameChar = (c: string | undefined): boolean => c !== undefined && /[A-Za-z0-9_]/.test(c);

/** Whether `words` name the tool: its exact name, not inside a longer word ("read" is not in "already"). */
export function namesTool(words: string, name: string): boolean {
  for (let at = words.indexOf(name); at >= 0; at = words.indexOf(name, at + 1)) {
    if (!isNameChar(words[at - 1]) && !isNameChar(words[at + name.length])) return true;
  }
  return false;
}

/**
 * Which tool the request makes the model call, if any. The sim answers like a model: it calls a
 * tool when the user's own words in this turn name it (`currentUserWords`), never because of a
 * system prompt, a tool description or injected context, and after a tool's result it answers
 * in text unless a new user message names a tool again.
 */
export function chooseTool(req: ChatRequest): NonNullable<ChatRequest['tools']>[number] | undefined {
  const tools = req.tools;
  if (!tools?.length) return undefined;
  const choice = req.tool_choice ?? 'auto';
  if (choice === 'none') return undefined;
  if (typeof choice === 'object') return tools.find((t) => t.function.name === choice.function.name);
  // "required" and "auto": the first tool the user's words name; for "required" (the client
  // insists on a call), the first tool otherwise; for "auto", none (a plain answer).
  const words = currentUserWords(req.messages);
  const named = words ? tools.find((t) => namesTool(words, t.function.name)) : undefined;
  return named ?? (choice === 'required' ? tools[0] : undefined);
}

/**
 * Plans the output. `limit` is the effective max_tokens (the request's, or the room left in the
 * context window). `promptText` and `seed` make the output deterministic.
 */
export function planOutput(req: ChatRequest, opts: { reasoningModel: boolean; limit: number; promptText: string; seed: number }): Plan {
  const rng = prng(hashString(opts.promptText, req.seed ?? opts.seed));
  const thinking = opts.reasoningModel && req.chat_template_kwargs?.enable_thinking !== false;
  const wantReasoning = thinking ? REASONING_TOKENS[req.reasoning_effort ?? 'medium'] : 0;
  const tool = chooseTool(req);
  const limit = opts.limit;

  if (tool) {
    const args = toolArgumentPieces(tool.function.parameters, rng);
    const natural = wantReasoning + args.length;
    const total = Math.min(natural, limit);
    const r = Math.min(wantReasoning, total);
    const argCount = total - r;
    return {
      reasoning: reasoningPieces(rng, r),
      content: [],
      tool: argCount > 0 ? { id: `chatcmpl-tool-${hexId()}`, name: tool.function.name, args: args.slice(0, argCount) } : undefined,
      finish: total < natural ? 'length' : 'tool_calls',
      completionTokens: total,
    };
  }

  const natural = wantReasoning + MIN_NATURAL_TOKENS + Math.floor(rng() * NATURAL_TOKENS_SPREAD);
  const wanted = req.ignore_eos ? limit : Math.max(natural, req.min_tokens ?? 0);
  const total = Math.min(wanted, limit);
  const r = Math.min(wantReasoning, total);
  return {
    reasoning: reasoningPieces(rng, r),
    content: textPieces(rng, total - r),
    tool: undefined,
    finish: req.ignore_eos || wanted > limit ? 'length' : 'stop',
    completionTokens: total,
  };
}
