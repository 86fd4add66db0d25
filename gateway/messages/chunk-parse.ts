// Parsing one upstream stream chunk. JSON.parse of a vLLM chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunks of a plain text answer always have the same
// few shapes, so they are matched by one anchored regex (several times cheaper), and what the
// translator reads of them (text, finish reason, usage; not id, created, model or total_tokens)
// is taken from its groups. The shapes: a text token, the first chunk (role and empty content),
// the last token with its finish reason (and vLLM's stop_reason), and the usage-only chunk (no
// choices, cached-token details). Anything else (reasoning, tool calls, errors, other key orders
// or extra fields) goes through JSON.parse: the result is the same either way
// (test/gateway/messages/chunk-parse.test.ts).
import type { ChatUsage } from './translate-response.js';

// A JSON string body without escapes or control characters; the content may hold escapes
// (validated below by JSON.parse of the literal). Numbers in JSON's own grammar.
const PLAIN = String.raw`[^"\\\x00-\x1f]*`;
const INT = '(?:0|[1-9][0-9]*)';
// Groups: 1 content, 2 finish reason (none when null), 3 prompt tokens, 4 completion tokens,
// 5 `null` details, 6 cached tokens. No choice at all leaves 1 and 2 undefined.
const BODY =
  String.raw`\{"id":"${PLAIN}","object":"chat\.completion\.chunk","created":${INT},"model":"${PLAIN}",` +
  String.raw`"choices":\[(?:\{"index":0,"delta":\{(?:"role":"assistant",)?"content":"((?:[^"\\\x00-\x1f]|\\.)*)"\},"logprobs":null,` +
  String.raw`"finish_reason":(?:null|"([a-z_]+)")(?:,"stop_reason":(?:null|${INT}|"${PLAIN}"))?\})?\],` +
  String.raw`"usage":\{"prompt_tokens":(${INT}),"total_tokens":${INT},"completion_tokens":(${INT})` +
  String.raw`(?:,"prompt_tokens_details":(?:(null)|\{"cached_tokens":(${INT})\}))?\}\}`;
const CHUNK = new RegExp(`^${BODY}$`);
/**
 * The same chunk as a whole SSE event in a read's text, `data: ` to the blank line, matched where
 * lastIndex says (sticky): no line found, cut out and matched apart (sse.ts, asciiLines).
 */
const EVENT = new RegExp(`data: ${BODY}\n\n`, 'y');

/**
 * The value of a regex-matched JSON integer. Number() of a string computes the string's hash on
 * the way (an array-index check), several times the cost of reading two or three digits; past 15
 * digits, where a double can no longer hold every integer, Number() rounds as JSON.parse does.
 */
function intOf(digits: string): number {
  if (digits.length > 15) return Number(digits);
  let n = 0;
  for (let i = 0; i < digits.length; i++) n = n * 10 + digits.charCodeAt(i) - 0x30;
  return n;
}

/** What the translator reads of a plain text-token chunk (or of a usage-only one). */
export interface TextChunk {
  /** The text, unescaped; undefined for a chunk without a choice (usage only). */
  content: string | undefined;
  /** The finish reason, null while the text goes on. */
  finish: string | null;
  usage: ChatUsage;
}

/**
 * The chunk in `data` when it has one of the plain shapes, else undefined (JSON.parse then reads
 * it, and finds what it holds or that it is malformed). A content with a bad escape is undefined
 * too: JSON.parse then throws on it.
 */
export function textChunk(data: string): TextChunk | undefined {
  return chunkOf(CHUNK.exec(data));
}

/** Where the event textChunkAt matched last ends (after its blank line). */
export let chunkEventEnd = 0;
/** The content of the chunk textChunkAt read last had escapes (JSON.parse decoded them). */
export let chunkEscaped = false;
/** Whether chunkOf decoded escapes in the content it read last. */
let escaped = false;

/**
 * The plain chunk of the event `data: <chunk>\n\n` at `from` in `s` (the text of a read), else
 * undefined; its end is then chunkEventEnd. Undefined when another event or line is there, or a
 * chunk of another shape: such a chunk, as the data of a `data: ` line followed by the blank
 * line, is one textChunk leaves to JSON.parse too.
 */
export function textChunkAt(s: string, from: number): ChunkFields | undefined {
  EVENT.lastIndex = from;
  const m = EVENT.exec(s);
  if (m === null) return undefined;
  const content = contentOf(m[1]);
  if (content === false) return undefined;
  chunkEventEnd = EVENT.lastIndex;
  chunkEscaped = escaped;
  return { content, finish: m[2] ?? null, groups: m };
}

/**
 * A plain chunk read in place (textChunkAt): TextChunk's content and finish reason; its usage is
 * left in the regex's groups (usageOf reads it), since a stream's translator needs only the last
 * chunk's usage of a read, not every chunk's.
 */
export interface ChunkFields {
  content: string | undefined;
  finish: string | null;
  groups: RegExpExecArray;
}

/** The usage in the groups of a plain chunk's match. */
export function usageOf(m: RegExpExecArray): ChatUsage {
  const usage: ChatUsage = { prompt_tokens: intOf(m[3]!), completion_tokens: intOf(m[4]!) };
  if (m[6] !== undefined) usage.prompt_tokens_details = { cached_tokens: intOf(m[6]) };
  else if (m[5] !== undefined) usage.prompt_tokens_details = null;
  return usage;
}

/** The content's text, unescaped (undefined: no choice); false for a bad escape (JSON.parse throws on the chunk). */
function contentOf(raw: string | undefined): string | undefined | false {
  escaped = false;
  if (raw === undefined || !raw.includes('\\')) return raw;
  escaped = true;
  try {
    return JSON.parse(`"${raw}"`) as string;
  } catch {
    return false;
  }
}

function chunkOf(m: RegExpExecArray | null): TextChunk | undefined {
  if (m === null) return undefined;
  const content = contentOf(m[1]);
  if (content === false) return undefined;
  return { content, finish: m[2] ?? null, usage: usageOf(m) };
}
