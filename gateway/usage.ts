// Finding token usage in backend bytes without parsing them: native searches for `"usage":{`,
// then the two counts read digit by digit from the few bytes that follow. OpenAI-compatible
// backends (vLLM, SGLang, sim) serialize compactly, so the key has no space before its object.
//
// The searches look for the key's tail `ge":{` and check the four bytes before it: Node's
// Buffer#indexOf is slow for a needle that starts with `"` (the most frequent byte in JSON, so
// almost every position is a candidate): about 2 µs for a 4.6 KB stream chunk, against 0.25 µs
// for `ge":{`, whose first byte is rare. This runs on every relayed chunk. The last usage of a
// whole completion is found from the end `{` by `{` instead (one-byte searches, V8's fast API
// call, about a tenth of a Buffer-needle search's set-up): its usage object closes it.
import { decode, indexOf, lastIndexOf } from '../lib/bytes.js';
import type { GateUsage } from './gates/gate.js';

export const USAGE_KEY = Buffer.from('"usage":{');
/** The tail of USAGE_KEY after `"usa` (4 bytes): what the native search looks for. */
const USAGE_TAIL = Buffer.from('ge":{');
/** The usage object is short; this bounds the bytes we look at. */
const WINDOW = 512;
/** How many `{` lastIndexOfUsage tries one by one before the search for the key's tail takes over. */
const BRACES_TRIED = 8;

/** True when `buf[s..s+4)` is `"usa` (the head of USAGE_KEY). */
function usageHeadAt(buf: Buffer, s: number): boolean {
  return s >= 0 && buf[s] === 0x22 && buf[s + 1] === 0x75 && buf[s + 2] === 0x73 && buf[s + 3] === 0x61;
}

/** True when the `{` at `open` ends a USAGE_KEY (`"usage":` is just before it). */
function usageKeyEndsAt(buf: Buffer, open: number): boolean {
  return usageHeadAt(buf, open - 8) && buf[open - 4] === 0x67 && buf[open - 3] === 0x65 && buf[open - 2] === 0x22 && buf[open - 1] === 0x3a;
}

/**
 * Index of the first `"usage":{` at or after `from`, or -1. A search for the key's tail: a read of
 * a stream that carries no usage (most of them, when only the last event has it) is searched to
 * its end, which one native search does at a fixed cost, where stepping from `{` to `{` would
 * call into Node's Buffer#indexOf once per `{`.
 */
export function indexOfUsage(buf: Buffer, from = 0): number {
  let p = indexOf(buf, USAGE_TAIL, from + 4);
  while (p >= 0) {
    if (usageHeadAt(buf, p - 4)) return p - 4;
    p = indexOf(buf, USAGE_TAIL, p + 1);
  }
  return -1;
}

/**
 * Index of the last `"usage":{` in `buf`, or -1: from the end, `{` by `{`. A whole completion's
 * usage object closes it, so its `{` is the last or the one before.
 */
export function lastIndexOfUsage(buf: Buffer): number {
  let open = lastIndexOf(buf, 0x7b);
  for (let tried = 0; open >= 0 && tried < BRACES_TRIED; tried++) {
    if (usageKeyEndsAt(buf, open)) return open - 8;
    open = open === 0 ? -1 : lastIndexOf(buf, 0x7b, open - 1);
  }
  if (open < 0) return -1;
  // Every `{` after `open` was checked: the key, if there is one, ends at or before it.
  let p = lastIndexOf(buf, USAGE_TAIL, open - 4);
  while (p >= 0) {
    if (usageHeadAt(buf, p - 4)) return p - 4;
    if (p === 0) return -1;
    p = lastIndexOf(buf, USAGE_TAIL, p - 1);
  }
  return -1;
}

// The keys usageAt reads, without their quotes.
const PROMPT = 'prompt_tokens';
const COMPLETION = 'completion_tokens';
/** The Responses API's names for the same two counts. */
const INPUT = 'input_tokens';
const OUTPUT = 'output_tokens';
/** `prompt_tokens_details.cached_tokens` / `input_tokens_details.cached_tokens` (prefix cache hits). */
const CACHED = 'cached_tokens';

/** The index of the quote that ends the JSON string whose body starts at `from` (escaped quotes skipped), or -1. */
function closingQuote(s: string, from: number): number {
  let q = s.indexOf('"', from);
  while (q > 0) {
    let slashes = 0;
    while (s.charCodeAt(q - 1 - slashes) === 0x5c) slashes++;
    if ((slashes & 1) === 0) return q;
    q = s.indexOf('"', q + 1);
  }
  return q;
}

/** The non-negative integer at s[i] (whitespace allowed before it), or -1. */
function countAt(s: string, i: number): number {
  const stop = s.length;
  let c = s.charCodeAt(i);
  while (i < stop && (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09)) c = s.charCodeAt(++i);
  let n = 0;
  const first = i;
  for (; i < stop; i++) {
    const d = s.charCodeAt(i) - 0x30;
    if (d < 0 || d > 9) break;
    n = n * 10 + d;
  }
  return i > first ? n : -1;
}

/** A JSON integer (non-negative), in JSON's own grammar. */
export const JSON_INT = '(?:0|[1-9][0-9]*)';

/**
 * The members a usage object may carry besides its counts, which no reader here reads: SGLang's
 * `"reasoning_tokens":N` (protocol.py UsageInfo, every version) and vLLM's
 * `completion_tokens_details` (current main: a flat object of counts, or null). Their names are
 * none of the counts' (`cached_tokens` included), so the first occurrence of each count's name
 * (usageAt's general scan) is the one the pattern captured.
 */
const DETAILS_MEMBER = `"(?!(?:prompt|completion|cached|input|output)_tokens")[a-z_]+":(?:null|${JSON_INT})`;
const DETAILS = String.raw`"completion_tokens_details":(?:null|\{(?:${DETAILS_MEMBER}(?:,${DETAILS_MEMBER})*)?\})`;
/** The extras, in one optional group (each optional part tried costs a regex about 90 instructions under callgrind). */
const USAGE_EXTRAS = `(?:,(?:"reasoning_tokens":${JSON_INT}(?:,${DETAILS})?|${DETAILS}))?`;

/** USAGE_EXTRAS as a regex source (messages/chunk-parse.ts). */
export function compactUsageExtras(): string {
  return USAGE_EXTRAS;
}

/**
 * The usage object as the backends write it, compact, as a regex source (`"usage":` excluded,
 * `{` to its `}`), in its two key orders:
 * - vLLM (every version; protocol.py / engine/protocol.py UsageInfo, pydantic, field order) and
 *   SGLang (protocol.py UsageInfo; msgspec or pydantic, the same order) and the sim:
 *   `{"prompt_tokens":P,"total_tokens":T,"completion_tokens":C}`, then `prompt_tokens_details`
 *   (null or `{"cached_tokens":N}`) when the server reports it, then the extras above;
 * - llama.cpp (tools/server/server-task.cpp usage_json_oaicompat, nlohmann::json, whose objects
 *   keep their keys sorted): `{"completion_tokens":C,"prompt_tokens":P,"prompt_tokens_details":{"cached_tokens":N},"total_tokens":T}`,
 *   the details in newer builds only.
 * `capture`: groups of its own, vLLM order: (1) prompt, (2) completion, (3) `null` details,
 * (4) cached; llama.cpp order: (5) completion, (6) prompt, (7) cached.
 * Read here (usageAt) and in every chunk of a translated stream (messages/chunk-parse.ts), one
 * definition of the shape for both.
 */
export function compactUsagePattern(capture: boolean): string {
  const n = capture ? `(${JSON_INT})` : JSON_INT;
  return (
    String.raw`\{(?:"prompt_tokens":${n},"total_tokens":${JSON_INT},"completion_tokens":${n}` +
    String.raw`(?:,"prompt_tokens_details":(?:${capture ? '(null)' : 'null'}|\{"cached_tokens":${n}\}))?${USAGE_EXTRAS}` +
    String.raw`|"completion_tokens":${n},"prompt_tokens":${n}(?:,"prompt_tokens_details":\{"cached_tokens":${n}\})?,"total_tokens":${JSON_INT})\}`
  );
}

/** The counts a compact usage object holds (countsOf). */
export interface UsageCounts {
  prompt: number;
  completion: number;
  /** -1: no details; -2: `null` details; else the cached tokens. */
  cached: number;
}

/**
 * compactUsagePattern anchored after the key: one regex, about half the cost of the scan of
 * names below (the general case, which gives the same counts for it).
 */
const COMPACT_USAGE = new RegExp(`^"usage":${compactUsagePattern(true)}`);
/** The same, sticky: read where lastIndex says (messages/chunk-parse.ts). */
export const COMPACT_USAGE_AT = new RegExp(`"usage":${compactUsagePattern(true)}`, 'y');

/** The counts of a COMPACT_USAGE(_AT) match. */
export function countsOf(m: RegExpExecArray): UsageCounts {
  if (m[1] !== undefined) return { prompt: intOf(m[1]), completion: intOf(m[2]!), cached: m[4] !== undefined ? intOf(m[4]) : m[3] !== undefined ? -2 : -1 };
  return { prompt: intOf(m[6]!), completion: intOf(m[5]!), cached: m[7] !== undefined ? intOf(m[7]) : -1 };
}

/**
 * The value of a regex-matched JSON integer. Number() of a string computes the string's hash on
 * the way (an array-index check), several times the cost of reading two or three digits; past 15
 * digits, where a double can no longer hold every integer, Number() rounds as JSON.parse does.
 */
export function intOf(digits: string): number {
  if (digits.length > 15) return Number(digits);
  let n = 0;
  for (let i = 0; i < digits.length; i++) n = n * 10 + digits.charCodeAt(i) - 0x30;
  return n;
}

/** A usage with its counts (cachedTokens only when some were). */
function usageOf(prompt: number, completion: number, cached: number): GateUsage {
  return cached > 0 ? { inputTokens: prompt, outputTokens: completion, cachedTokens: cached } : { inputTokens: prompt, outputTokens: completion };
}

/** `depth` after the braces in s[from, to) (bytes outside any string). */
function depthAfter(s: string, from: number, to: number, depth: number): number {
  for (let i = from; i < to; i++) {
    const c = s.charCodeAt(i);
    if (c === 0x7b) depth++;
    else if (c === 0x7d && --depth === 0) return 0;
  }
  return depth;
}

/**
 * Usage read from the object starting at `pos` (the index of `"usage":{`), looking no further than
 * `end`. One pass over the quoted names in the window, read as one latin1 string (one byte, one
 * character): String#indexOf and charCodeAt cost a fraction of Buffer#indexOf's calls (its JS
 * wrapper and property loads, some 500 instructions each, seven or more per usage object). The
 * first occurrence of each count's `"name":` in the object wins.
 */
export function usageAt(buf: Buffer, pos: number, end = buf.length): GateUsage | undefined {
  const stop = Math.min(end, pos + WINDOW);
  if (stop <= pos + USAGE_KEY.length) return undefined;
  const s = decode(buf, 'latin1', pos, stop);
  const m = COMPACT_USAGE.exec(s);
  if (m !== null) {
    const c = countsOf(m);
    return usageOf(c.prompt, c.completion, c.cached < 0 ? 0 : c.cached);
  }
  let prompt = -1;
  let completion = -1;
  let input = -1;
  let output = -1;
  let cached = -1;
  // The object's end: its braces are counted in the bytes between strings (the only place a
  // structural brace can be), so the names after it (vLLM's prompt_logprobs, kv_transfer_params
  // and the like) are not read.
  let open = s.indexOf('"', USAGE_KEY.length);
  let depth = depthAfter(s, USAGE_KEY.length, open < 0 ? s.length : open, 1);
  while (open >= 0 && depth > 0) {
    const close = closingQuote(s, open + 1);
    if (close < 0) break;
    // A name is a quoted string followed by ':' (a string value never is).
    if (s.charCodeAt(close + 1) === 0x3a) {
      const n = close - open - 1;
      const a = open + 1;
      if (n === 13) {
        if (prompt < 0 && s.startsWith(PROMPT, a)) prompt = countAt(s, close + 2);
        else if (cached < 0 && s.startsWith(CACHED, a)) cached = countAt(s, close + 2);
        else if (output < 0 && s.startsWith(OUTPUT, a)) output = countAt(s, close + 2);
      } else if (n === 17) {
        if (completion < 0 && s.startsWith(COMPLETION, a)) completion = countAt(s, close + 2);
      } else if (n === 12 && input < 0 && s.startsWith(INPUT, a)) input = countAt(s, close + 2);
    }
    open = s.indexOf('"', close + 1);
    depth = depthAfter(s, close + 1, open < 0 ? s.length : open, depth);
  }
  if (prompt < 0 && completion < 0) {
    // Not a chat completion's usage: a Responses API one (/v1/responses)?
    if (input < 0 && output < 0) return undefined;
    prompt = input;
    completion = output;
  }
  return usageOf(prompt < 0 ? 0 : prompt, completion < 0 ? 0 : completion, cached);
}

/** The last usage object in `buf` (a whole non-stream response body), if any. */
export function findUsage(buf: Buffer): GateUsage | undefined {
  const pos = lastIndexOfUsage(buf);
  return pos < 0 ? undefined : usageAt(buf, pos);
}

export const ZERO_USAGE: GateUsage = Object.freeze({ inputTokens: 0, outputTokens: 0 });

/**
 * What a request ended without the backend's usage is charged (gateway/gates/README.md, "Exact
 * caps"). A stream: the input estimate plus one output token per relayed event (a backend streams
 * one event per decoding step). A request abandoned before its answer: its whole reservation.
 */
export function relayedUsage(inputTokens: number, events: number): GateUsage {
  return { inputTokens, outputTokens: events };
}

export function reservedUsage(inputTokens: number, reservedTokens: number): GateUsage {
  return { inputTokens, outputTokens: Math.max(0, reservedTokens - inputTokens) };
}
