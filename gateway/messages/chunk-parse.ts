// Parsing one upstream stream chunk. JSON.parse of a backend chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunks of a plain text answer always have the same
// few shapes, so they are matched by one anchored regex per key order (several times cheaper),
// and what the translator reads of them (text, finish reason, usage; not id, created, model or
// total_tokens) is taken from its groups. Anything else (reasoning, tool calls, errors, other key
// orders or fields) goes through JSON.parse: the result is the same either way
// (test/gateway/messages/chunk-parse.test.ts, flavours.test.ts).
//
// The shapes, read from each server's source (test/gateway/messages/flavours.ts has one stream of
// each, byte for byte, with the file it was read from):
// - vLLM (pydantic, `model_dump_json(exclude_unset=True)`: field order, only the fields set) and
//   SGLang (pydantic before its msgspec encoder, msgspec after: struct field order) write
//   id, object, created, model, choices, usage. A choice: index, delta, logprobs, finish_reason,
//   then vLLM's stop_reason (the finish chunk) or SGLang's matched_stop (every chunk), then vLLM
//   0.10.2+'s `"token_ids":null`. A delta: its content, with null members around it (vLLM
//   0.11.1-0.15's `"reasoning_content":null`, SGLang 0.5's `"role":null` before and
//   `"reasoning_content":null,"tool_calls":null` after), or none (an empty finish delta).
// - llama.cpp (nlohmann::json: keys sorted) writes choices, created, id, model, object,
//   system_fingerprint, timings, usage; a choice: delta, finish_reason, index.
// The two orders are told apart by the first key, so each event is tried against one regex only.
import { COMPACT_USAGE_AT, compactUsageExtras, compactUsagePattern, countsOf, JSON_INT as INT } from '../usage.js';
import type { ChatUsage } from './translate-response.js';

// A JSON string body without escapes or control characters; the content may hold escapes
// (validated below by JSON.parse of the literal). Numbers in JSON's own grammar.
const PLAIN = String.raw`[^"\\\x00-\x1f]*`;
/** Any JSON number (llama.cpp's timings). */
const NUM = String.raw`-?${INT}(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?`;
// The content: a run without escapes first (one greedy loop over a class: the usual token); at a
// backslash that branch fails and the second reads the content with its escapes; or null.
// Which group is set tells whether there are escapes, without a search of the content for a
// backslash. Groups: 1 content without escapes, 2 content with escapes (neither: null, or no
// content or choice at all).
const CONTENT = String.raw`(?:"(?:(${PLAIN})"|((?:[^"\\\x00-\x1f]|\\.)*)")|null)`;
// Every optional part and alternative costs the regex a backtracking entry (about 90 instructions
// under callgrind, each time it is tried), so the rare ones are nested inside one optional group
// that fails at its first character on the common chunk.
/**
 * A delta: the content with the members around it that change nothing the translator reads
 * (JSON.parse of them gives no reasoning and no tool call): a role before it (SGLang 0.5's null,
 * or the first chunk's assistant), null members after it (vLLM 0.11.1-0.15's reasoning_content,
 * SGLang 0.5's reasoning_content and tool_calls), llama.cpp's role after it (keys sorted); or an
 * empty delta. `content` occurs once.
 */
const AFTER = `(?:,(?:"reasoning_content":null(?:,"reasoning":null)?(?:,"tool_calls":null)?|"reasoning":null|"tool_calls":null|"role":"assistant"))?`;
const DELTA = String.raw`\{(?:(?:"role":(?:null|"assistant"),)?"content":${CONTENT}${AFTER})?\}`;
/** Group 3: the finish reason (none when null). */
const FINISH = `"finish_reason":(?:null|"([a-z_]+)")`;
/** What follows a vLLM or SGLang choice's finish reason: vLLM's stop_reason or SGLang's matched_stop, then vLLM's token_ids. */
const STOP = `(?:,"(?:(?:stop_reason|matched_stop)":(?:null|${INT}|"${PLAIN}")(?:,"token_ids":null)?|token_ids":null))?`;
/**
 * The usage member's value, group 4 set when there is a usage object (`()` before it: a mark
 * that costs no string). vLLM's key order (vLLM, SGLang) is matched once, its extras after its
 * counts (compactUsagePattern's, in one optional group); llama.cpp's its own.
 */
const USAGE_VLLM = String.raw`(?:()\{"prompt_tokens":${INT},"total_tokens":${INT},"completion_tokens":${INT}(?:,"prompt_tokens_details":(?:null|\{"cached_tokens":${INT}\}))?${compactUsageExtras()}\}|null)`;
const USAGE_LLAMA = `(?:()${compactUsagePattern(false)}|null)`;

/** vLLM and SGLang: id, object, created, model, choices, usage. */
const BODY_VLLM =
  String.raw`\{"id":"${PLAIN}","object":"chat\.completion\.chunk","created":${INT},"model":"${PLAIN}",` +
  String.raw`"choices":\[(?:\{"index":0,"delta":${DELTA},"logprobs":null,${FINISH}${STOP}\})?\](?:,"usage":${USAGE_VLLM})?\}`;
/** llama.cpp: its keys sorted. */
const BODY_LLAMA =
  String.raw`\{"choices":\[(?:\{"delta":${DELTA},${FINISH},"index":0\})?\],"created":${INT},"id":"${PLAIN}","model":"${PLAIN}",` +
  String.raw`"object":"chat\.completion\.chunk"(?:,"system_fingerprint":"${PLAIN}")?` +
  String.raw`(?:,"timings":\{(?:"[a-z_]+":${NUM}(?:,"[a-z_]+":${NUM})*)?\})?(?:,"usage":${USAGE_LLAMA})?\}`;

/** Whether a matched chunk has a usage object (ChunkFields.usage). */
export const NO_USAGE = 0;
/** A compact usage object closes the chunk: usageOf reads it. */
export const HAS_USAGE = 1;
export type UsageKind = typeof NO_USAGE | typeof HAS_USAGE;

/** One key order: its chunk regexes and how many groups one event has. */
interface Shape {
  /** The data alone, anchored. */
  chunk: RegExp;
  /** One event (`data: ` to the blank line), sticky. */
  one: RegExp;
  /** One to EVENTS_AT_ONCE events in a row, sticky. */
  row: RegExp;
}

/** Groups per event: the whole event, plain content, escaped content, finish, usage. */
const EVENT_GROUPS = 5;

/**
 * How many events in a row a row regex matches at most. One exec for several events: the exec's
 * own cost (its result array and captures, about 450 instructions under callgrind) was a quarter
 * of a token's cost beyond the match itself.
 */
const EVENTS_AT_ONCE = 4;

function shape(body: string): Shape {
  // Each event in a group of its own (its length tells where the event ends).
  const event = `(data: ${body}\n\n)`;
  return {
    chunk: new RegExp(`^${body}$`),
    one: new RegExp(event, 'y'),
    // `E(?:E(?:E(?:E)?)?)?`
    row: new RegExp(
      Array.from({ length: EVENTS_AT_ONCE - 1 }).reduce<string>((inner) => `${event}(?:${inner})?`, event),
      'y',
    ),
  };
}

const VLLM = shape(BODY_VLLM);
const LLAMA = shape(BODY_LLAMA);

/**
 * Below this much text left in a read, one event is matched at a time: a read of a paced stream
 * holds one event (vLLM's are about 300 bytes), and a row's exec costs more there (a result of 17
 * entries or more, and a try at a second event) than one event's. Only the cost depends on the choice.
 */
const ROW_MIN_TEXT = 512;

/** The shape whose first key starts at `at` in `s` (`i`: id, vLLM and SGLang; `c`: choices, llama.cpp), or undefined. */
function shapeAt(s: string, at: number): Shape | undefined {
  const c = s.charCodeAt(at);
  return c === 0x69 ? VLLM : c === 0x63 ? LLAMA : undefined;
}

/** What the translator reads of a plain text-token chunk (or of a usage-only one). */
export interface TextChunk {
  /** The text, unescaped; undefined for a chunk without text (null or no content, or no choice). */
  content: string | undefined;
  /** The finish reason, null while the text goes on. */
  finish: string | null;
  /** undefined when the chunk has none (no usage member, or null). */
  usage: ChatUsage | undefined;
}

/**
 * The chunk in `data` when it has one of the plain shapes, else undefined (JSON.parse then reads
 * it, and finds what it holds or that it is malformed). A content with a bad escape is undefined
 * too: JSON.parse then throws on it.
 */
export function textChunk(data: string): TextChunk | undefined {
  const sh = shapeAt(data, 2);
  if (sh === undefined) return undefined;
  const m = sh.chunk.exec(data);
  if (m === null) return undefined;
  // The groups are the event's, less the event's own.
  const content = contentOf(m[1], m[2]);
  if (content === false) return undefined;
  // usageOf reads from an event's end: the data's end plus its blank line.
  return { content, finish: m[3] ?? null, usage: m[4] === undefined ? undefined : usageOf(data, data.length + 2) };
}

/**
 * The plain chunks of the events in a row at `from` in `s` (the text of a read), up to
 * EVENTS_AT_ONCE of them, each handed to `onChunk` in order with `plain` true when its content had
 * no escape; returns where the last one ends, or -1 when the event at `from` is not a plain chunk
 * (nothing was handed over). Another event or line ends the row, and so does a chunk of another
 * shape or with a bad escape in its content: as the data of a `data: ` line followed by the blank
 * line, it is one textChunk leaves to JSON.parse too.
 */
export function textChunksAt(s: string, from: number, onChunk: (c: ChunkFields, plain: boolean) => void): number {
  // `data: {"` then the first key.
  const sh = shapeAt(s, from + 8);
  if (sh === undefined) return -1;
  const re = s.length - from < ROW_MIN_TEXT ? sh.one : sh.row;
  re.lastIndex = from;
  const m = re.exec(s);
  if (m === null) return -1;
  let end = from;
  for (let g = 1; g < m.length; g += EVENT_GROUPS) {
    const event = m[g];
    if (event === undefined) break;
    const escaped = m[g + 2];
    const content = contentOf(m[g + 1], escaped);
    if (content === false) break;
    end += event.length;
    onChunk({ content, finish: m[g + 3] ?? null, text: s, end, usage: m[g + 4] === undefined ? NO_USAGE : HAS_USAGE }, escaped === undefined);
  }
  return end === from ? -1 : end;
}

/**
 * A plain chunk read in place (textChunksAt): TextChunk's content and finish reason; its usage is
 * left in the read's text (usageOf reads it), since a stream's translator needs only the last
 * chunk's usage of a read, not every chunk's.
 */
export interface ChunkFields {
  content: string | undefined;
  finish: string | null;
  /** The read's text and where the chunk's event ends in it. */
  text: string;
  end: number;
  /** Whether the chunk has a usage object (usageOf reads it). */
  usage: UsageKind;
}

// The usage object's keys between its numbers, read backwards from the event's end (usageOf): their lengths.
const CACHED_KEY_LENGTH = ',"prompt_tokens_details":{"cached_tokens":'.length;
const NULL_DETAILS_LENGTH = ',"prompt_tokens_details":null'.length;
const COMPLETION_KEY_LENGTH = ',"completion_tokens":'.length;
const TOTAL_KEY_LENGTH = ',"total_tokens":'.length;
const COMPLETION_DETAILS_KEY_LENGTH = ',"completion_tokens_details":'.length;
const REASONING_KEY_LENGTH = ',"reasoning_tokens":'.length;
const USAGE_KEY = '"usage":{';

/**
 * The usage of a chunk with one (textChunksAt: `s` its read's text, `end` its event's end), read
 * backwards from the end of its event. The event regex matched the event whole, so a compact usage
 * object closes it (`}}\n\n`) and is one of the shapes usage.ts's pattern allows: every key there
 * is known, so one character where the possible keys differ tells which one is there, and only
 * the digits are scanned (the keys checked whole with startsWith cost about 450 instructions
 * each under callgrind, 2k a usage read in all; a lastIndexOf of the key and a regex over the
 * object about as much). vLLM's order (vLLM, SGLang, the sim): the extras current vLLM and SGLang
 * write after the counts are stepped over (beforeExtras), then `null` or `{"cached_tokens":N}` as
 * the prompt details, then the completion, total and prompt counts, each after its fixed key.
 * llama.cpp's order ends with its total count: read by one sticky regex from the last
 * `"usage":{` before the end (the usage is the chunk's last member in every shape, and a string
 * cannot hold the key's bytes: its quotes are escaped).
 */
export function usageOf(s: string, end: number): ChatUsage {
  // end - 5: the usage object's last character before its `}`.
  const last = beforeExtras(s, end - 5);
  return last < 0 ? compactUsageOf(s, end) : countsBefore(s, last);
}

/** usageOf's counts in vLLM's order, read backwards from `last`, the last character of the prompt details or of the completion count. */
function countsBefore(s: string, last: number): ChatUsage {
  let at = last;
  let details: ChatUsage['prompt_tokens_details'];
  const ch = s.charCodeAt(at);
  if (ch === 0x7d) {
    // `{"cached_tokens":N}`
    const from = digitsFrom(s, at - 1);
    details = { cached_tokens: intIn(s, from, at) };
    at = from - CACHED_KEY_LENGTH - 1;
  } else if (ch === 0x6c) {
    // `null`
    details = null;
    at -= NULL_DETAILS_LENGTH;
  }
  const completionFrom = digitsFrom(s, at);
  const totalFrom = digitsFrom(s, completionFrom - COMPLETION_KEY_LENGTH - 1);
  const promptEnd = totalFrom - TOTAL_KEY_LENGTH;
  const usage: ChatUsage = { prompt_tokens: intIn(s, digitsFrom(s, promptEnd - 1), promptEnd), completion_tokens: intIn(s, completionFrom, at + 1) };
  if (details !== undefined) usage.prompt_tokens_details = details;
  return usage;
}

/**
 * From `last`, the usage object's last character: the index of its last character before its
 * extras (itself when there are none), or -1 for llama.cpp's key order. What the pattern allows
 * there, from the end: the completion details (current vLLM: `,"completion_tokens_details":` with
 * a flat object or null), SGLang's `,"reasoning_tokens":N`, the prompt details (`null` or
 * `{"cached_tokens":N}`), a count (vLLM's completion count, llama.cpp's total). A `}` or a `null`
 * closes one of the two details (their keys differ 23 characters before the value: `"prompt...`
 * has its `p` there, `"completion...` its `l`; the completion details' object is flat, so the `{`
 * before the end opens it); a count's key is told by its 10th character from the end (`g` of
 * reasoning_tokens, `n` of completion_tokens, `l` of total_tokens).
 */
function beforeExtras(s: string, last: number): number {
  let at = last;
  let ch = s.charCodeAt(at);
  if (ch === 0x7d || ch === 0x6c) {
    // Where the value starts: `null`'s `n`, or the `{` that opens the object.
    let value = at - 3;
    if (ch === 0x7d) {
      value = at - 1;
      while (s.charCodeAt(value) !== 0x7b) value--;
    }
    if (s.charCodeAt(value - 23) !== 0x6c) return at; // the prompt details
    at = value - COMPLETION_DETAILS_KEY_LENGTH - 1;
    ch = s.charCodeAt(at);
  }
  if (ch < 0x30 || ch > 0x39) return at; // the prompt details' end
  const digits = digitsFrom(s, at);
  const key = s.charCodeAt(digits - 10);
  if (key === 0x67) return digits - REASONING_KEY_LENGTH - 1; // reasoning_tokens
  return key === 0x6e ? at : -1; // completion_tokens, or llama.cpp's total_tokens
}

/** usageOf of any compact usage: the last `"usage":{` before `end`, read by one sticky regex. */
function compactUsageOf(s: string, end: number): ChatUsage {
  COMPACT_USAGE_AT.lastIndex = s.lastIndexOf(USAGE_KEY, end);
  const c = countsOf(COMPACT_USAGE_AT.exec(s)!);
  const usage: ChatUsage = { prompt_tokens: c.prompt, completion_tokens: c.completion };
  if (c.cached >= 0) usage.prompt_tokens_details = { cached_tokens: c.cached };
  else if (c.cached === -2) usage.prompt_tokens_details = null;
  return usage;
}

/** Where the run of digits that ends at `last` (inclusive) starts. */
function digitsFrom(s: string, last: number): number {
  let i = last;
  while (i > 0 && s.charCodeAt(i - 1) >= 0x30 && s.charCodeAt(i - 1) <= 0x39) i--;
  return i;
}

/** The value of the JSON integer s[from, end), as intOf reads it. */
function intIn(s: string, from: number, end: number): number {
  if (end - from > 15) return Number(s.slice(from, end));
  let n = 0;
  for (let i = from; i < end; i++) n = n * 10 + s.charCodeAt(i) - 0x30;
  return n;
}

/** The content of the groups `plain` or `escaped` (decoded by JSON.parse), undefined with neither; false for a bad escape (JSON.parse throws on the chunk). */
function contentOf(plain: string | undefined, escaped: string | undefined): string | undefined | false {
  if (escaped === undefined) return plain;
  try {
    return JSON.parse(`"${escaped}"`) as string;
  } catch {
    return false;
  }
}
