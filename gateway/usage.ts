// Finding token usage in backend bytes without parsing them: a native indexOf for `"usage":{`,
// then two small regexes over the few hundred bytes that follow. OpenAI-compatible backends
// (vLLM, SGLang, sim) serialize compactly, so the key has no space before its object.
import type { GateUsage } from './gate.js';

export const USAGE_KEY = Buffer.from('"usage":{');
const PROMPT = /"prompt_tokens":\s*(\d+)/;
const COMPLETION = /"completion_tokens":\s*(\d+)/;
/** The usage object is short; this bounds the text we look at. */
const WINDOW = 512;

/** Usage read from the object starting at `pos` (the index of `"usage":{`), looking no further than `end`. */
export function usageAt(buf: Buffer, pos: number, end = buf.length): GateUsage | undefined {
  const text = buf.toString('latin1', pos, Math.min(end, pos + WINDOW));
  const p = PROMPT.exec(text);
  const c = COMPLETION.exec(text);
  if (!p && !c) return undefined;
  return { inputTokens: p ? Number(p[1]) : 0, outputTokens: c ? Number(c[1]) : 0 };
}

/** The last usage object in `buf` (a whole non-stream response body), if any. */
export function findUsage(buf: Buffer): GateUsage | undefined {
  const pos = buf.lastIndexOf(USAGE_KEY);
  return pos < 0 ? undefined : usageAt(buf, pos);
}

export const ZERO_USAGE: GateUsage = Object.freeze({ inputTokens: 0, outputTokens: 0 });
