// Parsing one upstream stream chunk. JSON.parse of a vLLM chunk (~300 bytes with continuous
// usage) is most of the translation's CPU; the chunks of a plain text answer always have the same
// few shapes, so they are matched by one anchored regex (several times cheaper), and what the
// translator reads of them (text, finish reason, usage; not id, created, model or total_tokens)
// is taken from its groups. The shapes: a text token, the first chunk (role and empty content),
// the last token with its finish reason (and vLLM's stop_reason), and the usage-only chunk (no
// choices, cached-token details). Anything else (reasoning, tool calls, errors, other key orders
// or extra fields) goes through JSON.parse: the result is the same either way
// (test/gateway/messages/chunk-parse.test.ts).
import { compactUsagePattern, intOf, JSON_INT as INT } from '../usage.js';
import type { ChatUsage } from './translate-response.js';

// A JSON string body without escapes or control characters; the content may hold escapes
// (validated below by JSON.parse of the literal). Numbers in JSON's own grammar.
const PLAIN = String.raw`[^"\\\x00-\x1f]*`;
// Groups: 1 content without escapes, 2 content with escapes (one of the two is set when there is
// a choice), 3 finish reason (none when null), 4 prompt tokens, 5 completion tokens, 6 `null`
// details, 7 cached tokens. No choice at all leaves 1 to 3 undefined.
/** The usage object (usage.ts), then the chunk's closing brace; `c`: its numbers and `null` captured (groups 1-4 of its own). */
const usage = (c: boolean) => `${compactUsagePattern(c)}\\}`;
// The content: a run without escapes first (one greedy loop over a class: the usual token); at a
// backslash that branch fails and the second reads the content with its escapes. Which group is
// set tells whether there are escapes, without a search of the content for a backslash.
const CONTENT = String.raw`"(?:(${PLAIN})"|((?:[^"\\\x00-\x1f]|\\.)*)")`;
const BODY =
  String.raw`\{"id":"${PLAIN}","object":"chat\.completion\.chunk","created":${INT},"model":"${PLAIN}",` +
  String.raw`"choices":\[(?:\{"index":0,"delta":\{(?:"role":"assistant",)?"content":${CONTENT}\},"logprobs":null,` +
  String.raw`"finish_reason":(?:null|"([a-z_]+)")(?:,"stop_reason":(?:null|${INT}|"${PLAIN}"))?\})?\],`;
const CHUNK = new RegExp(`^${BODY}${usage(true)}$`);
/**
 * The same chunk as a whole SSE event in a read's text, `data: ` to the blank line, in a group of
 * its own (its length tells where the event ends). Only the content and the finish reason are
 * captured besides (each capture is a string made on every match); the usage is read again from
 * the event's text when it is asked for (usageOf).
 */
const EVENT = `(data: ${BODY}${usage(false)}\n\n)`;
/** The groups of one EVENT: the whole event, plain content, escaped content, finish reason. */
const EVENT_GROUPS = 4;
/**
 * How many events in a row EVENTS matches at most. One exec for several events: the exec's own
 * cost (its result array and captures, about 450 instructions under callgrind) was a quarter of
 * a token's cost beyond the match itself.
 */
const EVENTS_AT_ONCE = 4;
/** One to EVENTS_AT_ONCE events in a row, matched where lastIndex says (sticky): `E(?:E(?:E(?:E)?)?)?`. */
const EVENTS = new RegExp(
  Array.from({ length: EVENTS_AT_ONCE - 1 }).reduce<string>((inner) => `${EVENT}(?:${inner})?`, EVENT),
  'y',
);
/** One event (the same groups as the first of EVENTS). */
const ONE_EVENT = new RegExp(EVENT, 'y');
/**
 * Below this much text left in a read, one event is matched at a time: a read of a paced stream
 * holds one event (vLLM's are about 300 bytes), and EVENTS' exec costs more there (a result of 17
 * entries, and a try at a second event) than ONE_EVENT's. Only the cost depends on the choice.
 */
const ROW_MIN_TEXT = 512;

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

/**
 * The plain chunks of the events in a row at `from` in `s` (the text of a read), up to
 * EVENTS_AT_ONCE of them, each handed to `onChunk` in order with `plain` true when its content had
 * no escape; returns where the last one ends, or -1 when the event at `from` is not a plain chunk
 * (nothing was handed over). Another event or line ends the row, and so does a chunk of another
 * shape or with a bad escape in its content: as the data of a `data: ` line followed by the blank
 * line, it is one textChunk leaves to JSON.parse too.
 */
export function textChunksAt(s: string, from: number, onChunk: (c: ChunkFields, plain: boolean) => void): number {
  const re = s.length - from < ROW_MIN_TEXT ? ONE_EVENT : EVENTS;
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
    onChunk({ content, finish: m[g + 3] ?? null, text: s, end }, escaped === undefined);
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
}

// The usage object's keys between its numbers, read backwards from the event's end (usageOf).
const CACHED_KEY = ',"prompt_tokens_details":{"cached_tokens":'.length;
const NULL_DETAILS = ',"prompt_tokens_details":null'.length;
const COMPLETION_KEY = ',"completion_tokens":'.length;
const TOTAL_KEY = ',"total_tokens":'.length;

/**
 * The usage of a chunk textChunksAt read (`s` its read's text, `end` its event's end, ChunkFields),
 * read backwards from the end of its event: EVENT matched the event whole, so the usage object
 * closes it (`}}\n\n`) and holds, from its end, either nothing, `null` or `{"cached_tokens":N}`
 * as details, then the completion, total and prompt counts, each after its fixed key. Only digits are scanned (a lastIndexOf of the key and a regex
 * over the object cost about 2k instructions a call under callgrind).
 */
export function usageOf(s: string, end: number): ChatUsage {
  let last = end - 5; // the usage object's last character before its `}`
  let details: ChatUsage['prompt_tokens_details'];
  const ch = s.charCodeAt(last);
  if (ch === 0x7d) {
    // `{"cached_tokens":N}`
    const from = digitsFrom(s, last - 1);
    details = { cached_tokens: intIn(s, from, last) };
    last = from - CACHED_KEY - 1;
  } else if (ch === 0x6c) {
    // `null`
    details = null;
    last -= NULL_DETAILS;
  }
  const completionFrom = digitsFrom(s, last);
  const completion = intIn(s, completionFrom, last + 1);
  const totalFrom = digitsFrom(s, completionFrom - COMPLETION_KEY - 1);
  const promptEnd = totalFrom - TOTAL_KEY;
  const usage: ChatUsage = { prompt_tokens: intIn(s, digitsFrom(s, promptEnd - 1), promptEnd), completion_tokens: completion };
  if (details !== undefined) usage.prompt_tokens_details = details;
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

/** The usage in the groups of a match, from group `g` on: prompt, completion, `null` details, cached. */
function usageFrom(m: RegExpExecArray, g: number): ChatUsage {
  const usage: ChatUsage = { prompt_tokens: intOf(m[g]!), completion_tokens: intOf(m[g + 1]!) };
  if (m[g + 3] !== undefined) usage.prompt_tokens_details = { cached_tokens: intOf(m[g + 3]!) };
  else if (m[g + 2] !== undefined) usage.prompt_tokens_details = null;
  return usage;
}

/** The content of the groups `plain` or `escaped` (decoded by JSON.parse), undefined with no choice; false for a bad escape (JSON.parse throws on the chunk). */
function contentOf(plain: string | undefined, escaped: string | undefined): string | undefined | false {
  if (escaped === undefined) return plain;
  try {
    return JSON.parse(`"${escaped}"`) as string;
  } catch {
    return false;
  }
}

function chunkOf(m: RegExpExecArray | null): TextChunk | undefined {
  if (m === null) return undefined;
  const content = contentOf(m[1], m[2]);
  if (content === false) return undefined;
  return { content, finish: m[3] ?? null, usage: usageFrom(m, 4) };
}
