// The sim's tokenizer and chat template. Deliberately simple and deterministic, so tests (and
// the gateway's messages translation tests) can compute expected token counts themselves:
//
// - Special tokens (`<|im_start|>`, `<|im_end|>`, `<s>`, `<tool_call>`, ...) are one token each.
// - Everything else splits into pieces: a run of up to 8 ASCII letters/digits with its leading
//   whitespace, or one other character (punctuation, non-ASCII) with its leading whitespace, or
//   trailing whitespace. Pieces concatenate back to the text exactly (lossless).
//
// The chat template is ChatML-like and covers roles, system, tool definitions (canonical JSON:
// sorted keys), assistant tool calls and tool results. `countChatTokens(messages, tools)` equals
// the sim's `usage.prompt_tokens` and its /tokenize `count` for the same messages and tools.

/** Special tokens; each counts as exactly one token. */
export const SPECIAL = {
  bos: '<s>',
  start: '<|im_start|>',
  end: '<|im_end|>',
  toolCall: '<tool_call>',
  toolCallEnd: '</tool_call>',
  toolResponse: '<tool_response>',
  toolResponseEnd: '</tool_response>',
  tools: '<tools>',
  toolsEnd: '</tools>',
  image: '<image>',
} as const;

const SPECIAL_LIST = Object.values(SPECIAL);
const SPECIAL_ID = new Map<string, number>(SPECIAL_LIST.map((s, i) => [s, i + 1]));
// Special tokens first (longest alternatives), then ordinary pieces.
const PIECE = /<s>|<\|im_start\|>|<\|im_end\|>|<\/?tool_call>|<\/?tool_response>|<\/?tools>|<image>|\s*[A-Za-z0-9]{1,8}|\s*[^\sA-Za-z0-9]|\s+/gu;

/** Vocabulary size used to map pieces to ids (ids below 100 are reserved for special tokens). */
export const VOCAB_SIZE = 151_936;

/** Splits `text` into token pieces (lossless: `pieces.join('') === text`). */
export function tokenize(text: string): string[] {
  return text.match(PIECE) ?? [];
}

/** Number of tokens in `text`, without building the pieces array. */
export function countTokens(text: string): number {
  PIECE.lastIndex = 0;
  let n = 0;
  while (PIECE.exec(text) !== null) n++;
  return n;
}

/** Deterministic token id of one piece (FNV-1a of its UTF-16 code units). */
export function tokenId(piece: string): number {
  const special = SPECIAL_ID.get(piece);
  if (special !== undefined) return special;
  let h = 0x811c9dc5;
  for (let i = 0; i < piece.length; i++) {
    h ^= piece.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return 100 + ((h >>> 0) % (VOCAB_SIZE - 100));
}

/** Token ids of `text`. */
export function encode(text: string): number[] {
  // One pass (no array of pieces first): this runs on every prompt when the prefix cache is on.
  PIECE.lastIndex = 0;
  const ids: number[] = [];
  for (let m = PIECE.exec(text); m !== null; m = PIECE.exec(text)) ids.push(tokenId(m[0]));
  return ids;
}

// ---- chat template -------------------------------------------------------------------------

/** The message shapes the template understands (OpenAI chat format; extra fields ignored). */
export interface ChatMessage {
  role: string;
  content?: string | ContentPart[] | null | undefined;
  name?: string | undefined;
  tool_calls?: { id?: string | undefined; type?: string | undefined; function: { name: string; arguments: string } }[] | null | undefined;
  tool_call_id?: string | undefined;
}
export interface ContentPart {
  type: string;
  text?: string | undefined;
}
export interface ToolDefinition {
  type?: string | undefined;
  function: { name: string; description?: string | undefined; parameters?: unknown; strict?: boolean | null | undefined };
}

/** JSON with object keys sorted at every level: the same value always serializes the same way. */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const obj = value as Record<string, unknown>;
  const keys = Object.keys(obj)
    .filter((k) => obj[k] !== undefined)
    .sort();
  return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
}

/** Text of a message's content: string as is; parts joined (text parts' text, other parts as <image>). */
export function contentText(content: ChatMessage['content']): string {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  let out = '';
  for (const part of content) out += part.type === 'text' ? (part.text ?? '') : SPECIAL.image;
  return out;
}

function toolsBlock(tools: readonly ToolDefinition[]): string {
  let out = `${SPECIAL.tools}\n`;
  for (const t of tools) out += `${canonicalJson({ type: t.type ?? 'function', function: t.function })}\n`;
  return out + SPECIAL.toolsEnd;
}

/**
 * Renders messages (and tool definitions) into the prompt text the sim "sees". With
 * `addGenerationPrompt` (the default, as for a chat completion) it ends with an open assistant turn.
 */
export function applyChatTemplate(messages: readonly ChatMessage[], tools?: readonly ToolDefinition[] | null, addGenerationPrompt = true): string {
  const { start, end } = SPECIAL;
  let out = SPECIAL.bos;
  let i = 0;
  const hasTools = tools != null && tools.length > 0;
  const first = messages[0];
  if (first && (first.role === 'system' || first.role === 'developer')) {
    out += `${start}system\n${contentText(first.content)}`;
    if (hasTools) out += `\n\n${toolsBlock(tools)}`;
    out += `${end}\n`;
    i = 1;
  } else if (hasTools) {
    out += `${start}system\n${toolsBlock(tools)}${end}\n`;
  }
  for (; i < messages.length; i++) {
    const m = messages[i]!;
    if (m.role === 'tool') {
      out += `${start}tool\n${SPECIAL.toolResponse}${m.tool_call_id ?? ''}\n${contentText(m.content)}${SPECIAL.toolResponseEnd}${end}\n`;
      continue;
    }
    const role = m.role === 'developer' ? 'system' : m.role;
    out += `${start}${role}${m.name ? ` name=${m.name}` : ''}\n${contentText(m.content)}`;
    if (m.tool_calls) {
      for (const c of m.tool_calls) {
        out += `${SPECIAL.toolCall}${canonicalJson({ name: c.function.name, arguments: c.function.arguments })}${SPECIAL.toolCallEnd}`;
      }
    }
    out += `${end}\n`;
  }
  if (addGenerationPrompt) out += `${start}assistant\n`;
  return out;
}

/** Prompt tokens of a chat request: equals the sim's usage.prompt_tokens for these messages and tools. */
export function countChatTokens(messages: readonly ChatMessage[], tools?: readonly ToolDefinition[] | null): number {
  return countTokens(applyChatTemplate(messages, tools));
}

/** Prompt tokens of a plain prompt (/tokenize with `prompt`): the text plus BOS unless told otherwise. */
export function countPromptTokens(prompt: string, addSpecialTokens = true): number {
  return countTokens(prompt) + (addSpecialTokens ? 1 : 0);
}
