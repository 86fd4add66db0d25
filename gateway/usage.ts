// Finding token usage in backend bytes without parsing them: a native search for `"usage":{`,
// then the two counts read digit by digit from the few bytes that follow. OpenAI-compatible
// backends (vLLM, SGLang, sim) serialize compactly, so the key has no space before its object.
//
// Why the search looks for `ge":{` and then checks the four bytes before it: Node's
// Buffer#indexOf is slow for a needle that starts with `"` (the most frequent byte in JSON, so
// almost every position is a candidate): about 2 µs for a 4.6 KB stream chunk, against 0.25 µs
// for `ge":{`, whose first byte is rare. This runs on every relayed chunk.
import type { GateUsage } from './gate.js';

export const USAGE_KEY = Buffer.from('"usage":{');
/** The tail of USAGE_KEY after `"usa` (4 bytes): what the native search looks for. */
const USAGE_TAIL = Buffer.from('ge":{');
const PROMPT_KEY = Buffer.from('"prompt_tokens":');
const COMPLETION_KEY = Buffer.from('"completion_tokens":');
/** The Responses API's names for the same two counts. */
const INPUT_KEY = Buffer.from('"input_tokens":');
const OUTPUT_KEY = Buffer.from('"output_tokens":');
/** `prompt_tokens_details.cached_tokens` / `input_tokens_details.cached_tokens` (prefix cache hits). */
const CACHED_KEY = Buffer.from('"cached_tokens":');
/** The usage object is short; this bounds the bytes we look at. */
const WINDOW = 512;

/** True when `buf[s..s+4)` is `"usa` (the head of USAGE_KEY). */
function usageHeadAt(buf: Buffer, s: number): boolean {
  return s >= 0 && buf[s] === 0x22 && buf[s + 1] === 0x75 && buf[s + 2] === 0x73 && buf[s + 3] === 0x61;
}

/** Index of the first `"usage":{` at or after `from`, or -1. */
export function indexOfUsage(buf: Buffer, from = 0): number {
  let p = buf.indexOf(USAGE_TAIL, from + 4);
  while (p >= 0) {
    if (usageHeadAt(buf, p - 4)) return p - 4;
    p = buf.indexOf(USAGE_TAIL, p + 1);
  }
  return -1;
}

/** Index of the last `"usage":{` in `buf`, or -1. */
export function lastIndexOfUsage(buf: Buffer): number {
  let p = buf.lastIndexOf(USAGE_TAIL);
  while (p >= 0) {
    if (usageHeadAt(buf, p - 4)) return p - 4;
    if (p === 0) return -1;
    p = buf.lastIndexOf(USAGE_TAIL, p - 1);
  }
  return -1;
}

/** The non-negative integer after `key` (whitespace allowed before it) within [from, stop), or -1. */
function countAfter(buf: Buffer, key: Buffer, from: number, stop: number): number {
  const k = buf.indexOf(key, from);
  if (k < 0 || k + key.length >= stop) return -1;
  let i = k + key.length;
  while (i < stop && (buf[i] === 0x20 || buf[i] === 0x0a || buf[i] === 0x0d || buf[i] === 0x09)) i++;
  let n = 0;
  const first = i;
  for (; i < stop; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) break;
    n = n * 10 + d;
  }
  return i > first ? n : -1;
}

/** Usage read from the object starting at `pos` (the index of `"usage":{`), looking no further than `end`. */
export function usageAt(buf: Buffer, pos: number, end = buf.length): GateUsage | undefined {
  const stop = Math.min(end, pos + WINDOW);
  let input = countAfter(buf, PROMPT_KEY, pos, stop);
  let output = countAfter(buf, COMPLETION_KEY, pos, stop);
  if (input < 0 && output < 0) {
    // Not a chat completion's usage: a Responses API one (/v1/responses)?
    input = countAfter(buf, INPUT_KEY, pos, stop);
    output = countAfter(buf, OUTPUT_KEY, pos, stop);
    if (input < 0 && output < 0) return undefined;
  }
  const cached = countAfter(buf, CACHED_KEY, pos, stop);
  return cached > 0
    ? { inputTokens: input < 0 ? 0 : input, outputTokens: output < 0 ? 0 : output, cachedTokens: cached }
    : { inputTokens: input < 0 ? 0 : input, outputTokens: output < 0 ? 0 : output };
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
