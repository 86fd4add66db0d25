// Parsing one upstream stream chunk. JSON.parse of a vLLM chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunks of a plain text answer always have the same
// few shapes, so they are read by a hand-written scanner that walks the fixed keys once, and what
// the translator reads of them (text, finish reason, usage; not id, created, model or
// total_tokens) is taken on the way. The shapes: a text token, the first chunk (role and empty
// content), the last token with its finish reason (and vLLM's stop_reason), and the usage-only
// chunk (no choices, cached-token details). Anything else (reasoning, tool calls, errors, other key
// orders or extra fields) goes through JSON.parse: the result is the same either way
// (test/gateway/messages/chunk-parse.test.ts).
//
// Cost: the chunk is read in place, s[from, end) of the string of a whole backend read (a slice
// of it would make every character read go through the slice to its parent), and the chunk's head
// up to its choices (id, created, model: the same on every chunk of a stream) is compared whole
// with the previous chunk's, so only the first chunk's head is scanned character by character.
//
// The grammar accepted, exactly (PLAIN: a string body without escapes or control characters;
// INT: a JSON integer; CONTENT: a string body whose escapes JSON.parse then validates):
//   {"id":"PLAIN","object":"chat.completion.chunk","created":INT,"model":"PLAIN","choices":[
//     ( {"index":0,"delta":{ ("role":"assistant",)? "content":"CONTENT"},"logprobs":null,
//       "finish_reason":(null|"[a-z_]+") (,"stop_reason":(null|INT|"PLAIN"))? } )?
//   ],"usage":{"prompt_tokens":INT,"total_tokens":INT,"completion_tokens":INT
//     (,"prompt_tokens_details":(null|{"cached_tokens":INT}))? }}
import type { ChatUsage } from './translate-response.js';

const HEAD = '{"id":"';
const OBJECT = '","object":"chat.completion.chunk","created":';
const MODEL = ',"model":"';
const CHOICES = '","choices":[';
const CHOICE = '{"index":0,"delta":{';
const ROLE = '"role":"assistant",';
const CONTENT = '"content":"';
const FINISH = '"},"logprobs":null,"finish_reason":';
const STOP_REASON = ',"stop_reason":';
const USAGE = '],"usage":{"prompt_tokens":';
const TOTAL = ',"total_tokens":';
const COMPLETION = ',"completion_tokens":';
const DETAILS = ',"prompt_tokens_details":';
const CACHED = '{"cached_tokens":';
const NULL = 'null';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;

/** What the translator reads of a plain text-token chunk (or of a usage-only one). */
export interface TextChunk {
  /** The text, unescaped; undefined for a chunk without a choice (usage only). */
  content: string | undefined;
  /** The finish reason, null while the text goes on. */
  finish: string | null;
  usage: ChatUsage;
}

/** The end of `lit` when s[p, end) starts with it, else -1 (also when `p` is already -1). */
function literal(s: string, p: number, end: number, lit: string): number {
  return p >= 0 && p + lit.length <= end && s.startsWith(lit, p) ? p + lit.length : -1;
}

/** The closing quote of a string body at `p` without escapes or control characters, else -1. */
function plainEnd(s: string, p: number, end: number): number {
  if (p < 0) return -1;
  for (let i = p; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c === QUOTE) return i;
    if (c === BACKSLASH || c < 0x20) return -1;
  }
  return -1;
}

/** The end of a JSON integer (`0` or a digit 1-9 then digits) at `p`, else -1. */
function intEnd(s: string, p: number, end: number): number {
  if (p < 0 || p >= end) return -1;
  const first = s.charCodeAt(p);
  if (first === 0x30) return p + 1;
  if (first < 0x31 || first > 0x39) return -1;
  let i = p + 1;
  while (i < end) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) break;
    i++;
  }
  return i;
}

/**
 * The value of the JSON integer s[from, to). Number() of a string computes the string's hash on
 * the way (an array-index check), several times the cost of reading two or three digits; past 15
 * digits, where a double can no longer hold every integer, Number() rounds as JSON.parse does.
 */
function intAt(s: string, from: number, to: number): number {
  if (to - from > 15) return Number(s.slice(from, to));
  let n = 0;
  for (let i = from; i < to; i++) n = n * 10 + s.charCodeAt(i) - 0x30;
  return n;
}

/** The closing quote of a finish reason's body (`[a-z_]+`) at `p`, else -1. */
function finishEnd(s: string, p: number, end: number): number {
  for (let i = p; i < end; i++) {
    const c = s.charCodeAt(i);
    if (c === QUOTE) return i > p ? i : -1;
    if ((c < 0x61 || c > 0x7a) && c !== 0x5f) return -1;
  }
  return -1;
}

/** The end of vLLM's stop_reason value at `p` (null, an integer or a plain string), else -1. */
function stopReasonEnd(s: string, p: number, end: number): number {
  if (p < end && s.charCodeAt(p) === QUOTE) {
    const close = plainEnd(s, p + 1, end);
    return close < 0 ? -1 : close + 1;
  }
  const afterNull = literal(s, p, end, NULL);
  return afterNull >= 0 ? afterNull : intEnd(s, p, end);
}

/** The end of the head `{"id":...,"choices":[` at `from`, read key by key, else -1. */
function headEnd(s: string, from: number, end: number): number {
  const idClose = plainEnd(s, literal(s, from, end, HEAD), end);
  const createdEnd = intEnd(s, literal(s, idClose, end, OBJECT), end);
  const modelClose = plainEnd(s, literal(s, createdEnd, end, MODEL), end);
  return literal(s, modelClose, end, CHOICES);
}

/**
 * Reads the plain chunks of one stream. Keeps the head of the last chunk it read (id, created and
 * model do not change within a stream) to compare the next chunk's head with it whole.
 */
export class ChunkReader {
  private knownHead = '';
  /** What readChoice found. */
  private content = '';
  private finish: string | null = null;
  private escaped = false;

  /**
   * The chunk in s[from, end) when it has one of the plain shapes, else undefined (JSON.parse
   * then reads it, and finds what it holds or that it is malformed). A content with a bad escape
   * is undefined too: JSON.parse then throws on it.
   */
  read(s: string, from: number, end: number): TextChunk | undefined {
    const known = this.knownHead;
    const sameHead = known !== '' && s.startsWith(known, from);
    let p = sameHead ? from + known.length : headEnd(s, from, end);
    if (p < 0 || p > end) return undefined;
    const headLength = p - from;
    let content: string | undefined;
    let finish: string | null = null;
    if (p < end && s.charCodeAt(p) === 0x7b) {
      p = this.readChoice(s, p, end);
      if (p < 0) return undefined;
      content = this.content;
      finish = this.finish;
    }
    const usage = readUsage(s, p, end);
    if (usage === undefined) return undefined;
    if (content !== undefined && this.escaped) {
      try {
        content = JSON.parse(`"${content}"`) as string;
      } catch {
        return undefined;
      }
    }
    if (!sameHead) this.knownHead = s.slice(from, from + headLength);
    return { content, finish, usage };
  }

  /** Reads the choice object at `p` into content and finish; the position after it, or -1 when it has another shape. */
  private readChoice(s: string, p: number, end: number): number {
    let q = literal(s, p, end, CHOICE);
    if (q < 0) return -1;
    const afterRole = literal(s, q, end, ROLE);
    if (afterRole >= 0) q = afterRole;
    const contentStart = literal(s, q, end, CONTENT);
    const contentClose = this.contentEnd(s, contentStart, end);
    q = literal(s, contentClose, end, FINISH);
    if (q < 0) return -1;
    let finish: string | null = null;
    const afterNull = literal(s, q, end, NULL);
    if (afterNull >= 0) q = afterNull;
    else {
      if (q >= end || s.charCodeAt(q) !== QUOTE) return -1;
      const close = finishEnd(s, q + 1, end);
      if (close < 0) return -1;
      finish = s.slice(q + 1, close);
      q = close + 1;
    }
    const afterStopKey = literal(s, q, end, STOP_REASON);
    if (afterStopKey >= 0) q = stopReasonEnd(s, afterStopKey, end);
    q = literal(s, q, end, '}');
    if (q < 0) return -1;
    this.content = s.slice(contentStart, contentClose);
    this.finish = finish;
    return q;
  }

  /**
   * The closing quote of a content string body at `p`: any character but a quote, a backslash or
   * a control character, or a backslash and any character but a line terminator (JSON.parse
   * checks the escape afterwards). -1 when there is none. Sets `escaped` when a backslash was seen.
   */
  private contentEnd(s: string, p: number, end: number): number {
    this.escaped = false;
    if (p < 0) return -1;
    for (let i = p; i < end; i++) {
      const c = s.charCodeAt(i);
      if (c === QUOTE) return i;
      if (c < 0x20) return -1;
      if (c === BACKSLASH) {
        if (i + 1 >= end) return -1;
        const next = s.charCodeAt(i + 1);
        if (next === 0x0a || next === 0x0d || next === 0x2028 || next === 0x2029) return -1;
        this.escaped = true;
        i++;
      }
    }
    return -1;
  }
}

/** The usage object at `p` and the end of the chunk, or undefined when they have another shape. */
function readUsage(s: string, p: number, end: number): ChatUsage | undefined {
  const promptStart = literal(s, p, end, USAGE);
  const promptEnd = intEnd(s, promptStart, end);
  const completionStart = literal(s, intEnd(s, literal(s, promptEnd, end, TOTAL), end), end, COMPLETION);
  const completionEnd = intEnd(s, completionStart, end);
  if (completionEnd < 0) return undefined;
  const usage: ChatUsage = { prompt_tokens: intAt(s, promptStart, promptEnd), completion_tokens: intAt(s, completionStart, completionEnd) };
  let q = completionEnd;
  const afterDetailsKey = literal(s, q, end, DETAILS);
  if (afterDetailsKey >= 0) {
    const afterNull = literal(s, afterDetailsKey, end, NULL);
    if (afterNull >= 0) {
      q = afterNull;
      usage.prompt_tokens_details = null;
    } else {
      const cachedStart = literal(s, afterDetailsKey, end, CACHED);
      const cachedEnd = intEnd(s, cachedStart, end);
      q = literal(s, cachedEnd, end, '}');
      if (q < 0) return undefined;
      usage.prompt_tokens_details = { cached_tokens: intAt(s, cachedStart, cachedEnd) };
    }
  }
  return q + 2 === end && s.charCodeAt(q) === 0x7d && s.charCodeAt(q + 1) === 0x7d ? usage : undefined;
}

/** textChunk of one chunk alone (a reader of its own: no head known from before). */
export function textChunk(data: string): TextChunk | undefined {
  return new ChunkReader().read(data, 0, data.length);
}
