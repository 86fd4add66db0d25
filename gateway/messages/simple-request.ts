// The common messages request checked without zod: a model, max_tokens, the sampling settings,
// a string system prompt and messages whose content is a string (what a plain chat turn, a
// benchmark and most SDK calls send). zod's safeParse of such a body cost about 7.5k instructions
// a request under callgrind (its object walk, a check object per field), the checks below a
// fraction of it.
//
// The result must be exactly what the schema (schema.ts) gives: a body with any other field, any
// other kind of value, or any value the schema would refuse is left to zod, which then accepts it
// (stripping what it does not know) or names what is wrong. Since only known fields with valid
// values pass, the body itself is the parsed request: zod would copy the same fields and values.
// test/gateway/messages/simple-request.test.ts holds the two to the same answers.
import type { MessagesRequest } from './schema.js';

/** The top-level fields this check knows; any other field sends the body to zod. */
const KNOWN = new Set(['model', 'max_tokens', 'messages', 'stream', 'system', 'temperature', 'top_p', 'top_k']);

/**
 * `json` as the parsed request when it has the simple shape and the schema would accept it as it
 * is, else undefined (zod then parses it). `maxTokensRequired`: /v1/messages (count_tokens may
 * leave max_tokens out).
 */
export function simpleRequest(json: Record<string, unknown>, maxTokensRequired: boolean): MessagesRequest | undefined {
  for (const key in json) if (!KNOWN.has(key)) return undefined;
  const model = json.model;
  if (typeof model !== 'string' || model.length < 1 || model.length > 256) return undefined;
  const maxTokens = json.max_tokens;
  if (maxTokens === undefined ? maxTokensRequired : !(Number.isSafeInteger(maxTokens) && (maxTokens as number) >= 1)) return undefined;
  if (!simpleMessages(json.messages)) return undefined;
  if (json.stream !== undefined && typeof json.stream !== 'boolean') return undefined;
  if (json.system !== undefined && typeof json.system !== 'string') return undefined;
  if (!unitOrAbsent(json.temperature) || !unitOrAbsent(json.top_p)) return undefined;
  const topK = json.top_k;
  if (topK !== undefined && !(Number.isSafeInteger(topK) && (topK as number) >= 0)) return undefined;
  return json as unknown as MessagesRequest;
}

/** At least one message, each exactly `{role, content}` with a known role and string content. */
function simpleMessages(messages: unknown): boolean {
  if (!Array.isArray(messages) || messages.length === 0) return false;
  for (let i = 0; i < messages.length; i++) {
    const m: unknown = messages[i];
    if (typeof m !== 'object' || m === null || Array.isArray(m)) return false;
    let keys = 0;
    for (const _ in m) keys++;
    const { role, content } = m as { role?: unknown; content?: unknown };
    if (keys !== 2 || typeof content !== 'string' || (role !== 'user' && role !== 'assistant' && role !== 'system')) return false;
  }
  return true;
}

/** Absent, or a number from 0 to 1 (temperature, top_p). */
function unitOrAbsent(v: unknown): boolean {
  return v === undefined || (typeof v === 'number' && v >= 0 && v <= 1);
}
