// Parsing one upstream stream chunk. JSON.parse of a vLLM chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunks of a plain text answer always have the same
// few shapes, so they are read by a hand-written scanner that walks the fixed keys once (a regex
// over the same grammar cost about 2k instructions a chunk, several times the scanner), and what
// the translator reads of them (text, finish reason, usage; not id, created, model or
// total_tokens) is taken on the way. The shapes: a text token, the first chunk (role and empty
// content), the last token with its finish reason (and vLLM's stop_reason), and the usage-only
// chunk (no choices, cached-token details). Anything else (reasoning, tool calls, errors, other key
// orders or extra fields) goes through JSON.parse: the result is the same either way
// (test/gateway/messages/chunk-parse.test.ts).
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

/** The end of `lit` when `s` has it at `p`, else -1 (also when `p` is already -1). */
function literal(s: string, p: number, lit: string): number {
  return p >= 0 && s.startsWith(lit, p) ? p + lit.length : -1;
}

/** The closing quote of a string body at `p` without escapes or control characters, else -1. */
function plainEnd(s: string, p: number): number {
  if (p < 0) return -1;
  for (let i = p; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c === QUOTE) return i;
    if (c === BACKSLASH || c < 0x20) return -1;
  }
  return -1;
}

/** The end of a JSON integer (`0` or a digit 1-9 then digits) at `p`, else -1. */
function intEnd(s: string, p: number): number {
  if (p < 0 || p >= s.length) return -1;
  const first = s.charCodeAt(p);
  if (first === 0x30) return p + 1;
  if (first < 0x31 || first > 0x39) return -1;
  let i = p + 1;
  while (i < s.length) {
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

/**
 * The closing quote of a content string body at `p`: any character but a quote, a backslash or a
 * control character, or a backslash and any character but a line terminator (JSON.parse checks
 * the escape afterwards). -1 when there is none. `escaped` tells whether a backslash was seen.
 */
function contentEnd(s: string, p: number, found: { escaped: boolean }): number {
  if (p < 0) return -1;
  const len = s.length;
  for (let i = p; i < len; i++) {
    const c = s.charCodeAt(i);
    if (c === QUOTE) return i;
    if (c < 0x20) return -1;
    if (c === BACKSLASH) {
      if (i + 1 >= len) return -1;
      const next = s.charCodeAt(i + 1);
      if (next === 0x0a || next === 0x0d || next === 0x2028 || next === 0x2029) return -1;
      found.escaped = true;
      i++;
    }
  }
  return -1;
}

/** The closing quote of a finish reason's body (`[a-z_]+`) at `p`, else -1. */
function finishEnd(s: string, p: number): number {
  let i = p;
  while (i < s.length) {
    const c = s.charCodeAt(i);
    if (c === QUOTE) return i > p ? i : -1;
    if ((c < 0x61 || c > 0x7a) && c !== 0x5f) return -1;
    i++;
  }
  return -1;
}

/** The end of vLLM's stop_reason value at `p` (null, an integer or a plain string), else -1. */
function stopReasonEnd(s: string, p: number): number {
  if (s.startsWith('null', p)) return p + 4;
  if (s.charCodeAt(p) !== QUOTE) return intEnd(s, p);
  const close = plainEnd(s, p + 1);
  return close < 0 ? -1 : close + 1;
}

/** What readChoice found: one chunk is read at a time, so one record serves them all. */
const choice = { content: '', finish: null as string | null, escaped: false };

/** Reads the choice object at `p` into `choice`; the position after it, or -1 when it has another shape. */
function readChoice(s: string, p: number): number {
  let q = literal(s, p, CHOICE);
  if (q < 0) return -1;
  if (s.startsWith(ROLE, q)) q += ROLE.length;
  const contentStart = literal(s, q, CONTENT);
  choice.escaped = false;
  const contentClose = contentEnd(s, contentStart, choice);
  q = literal(s, contentClose, FINISH);
  if (q < 0) return -1;
  let finish: string | null = null;
  if (s.startsWith('null', q)) q += 4;
  else {
    if (s.charCodeAt(q) !== QUOTE) return -1;
    const close = finishEnd(s, q + 1);
    if (close < 0) return -1;
    finish = s.slice(q + 1, close);
    q = close + 1;
  }
  if (s.startsWith(STOP_REASON, q)) q = stopReasonEnd(s, q + STOP_REASON.length);
  q = literal(s, q, '}');
  if (q < 0) return -1;
  choice.content = s.slice(contentStart, contentClose);
  choice.finish = finish;
  return q;
}

/** The usage object at `p` and the end of the chunk, or undefined when they have another shape. */
function readUsage(s: string, p: number): ChatUsage | undefined {
  const promptStart = literal(s, p, USAGE);
  const promptEnd = intEnd(s, promptStart);
  const completionStart = literal(s, intEnd(s, literal(s, promptEnd, TOTAL)), COMPLETION);
  const completionEnd = intEnd(s, completionStart);
  if (completionEnd < 0) return undefined;
  const usage: ChatUsage = { prompt_tokens: intAt(s, promptStart, promptEnd), completion_tokens: intAt(s, completionStart, completionEnd) };
  let q = completionEnd;
  if (s.startsWith(DETAILS, q)) {
    q += DETAILS.length;
    if (s.startsWith('null', q)) {
      q += 4;
      usage.prompt_tokens_details = null;
    } else {
      const cachedStart = literal(s, q, CACHED);
      const cachedEnd = intEnd(s, cachedStart);
      q = literal(s, cachedEnd, '}');
      if (q < 0) return undefined;
      usage.prompt_tokens_details = { cached_tokens: intAt(s, cachedStart, cachedEnd) };
    }
  }
  return q + 2 === s.length && s.charCodeAt(q) === 0x7d && s.charCodeAt(q + 1) === 0x7d ? usage : undefined;
}

/**
 * The chunk in `data` when it has one of the plain shapes, else undefined (JSON.parse then reads
 * it, and finds what it holds or that it is malformed). A content with a bad escape is undefined
 * too: JSON.parse then throws on it.
 */
export function textChunk(data: string): TextChunk | undefined {
  let p = plainEnd(data, literal(data, 0, HEAD));
  p = intEnd(data, literal(data, p, OBJECT));
  p = literal(data, plainEnd(data, literal(data, p, MODEL)), CHOICES);
  if (p < 0) return undefined;
  let content: string | undefined;
  let finish: string | null = null;
  if (data.charCodeAt(p) === 0x7b) {
    p = readChoice(data, p);
    if (p < 0) return undefined;
    content = choice.content;
    finish = choice.finish;
  }
  const usage = readUsage(data, p);
  if (usage === undefined) return undefined;
  if (content !== undefined && choice.escaped) {
    try {
      content = JSON.parse(`"${content}"`) as string;
    } catch {
      return undefined;
    }
  }
  return { content, finish, usage };
}
