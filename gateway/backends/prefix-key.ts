// Prefix units of a chat prompt without tokenizing: a chain of 32-bit hashes, one per message in
// order (the tools and the leading system/developer messages folded into the first unit), each
// h_k = H(h_(k-1), message_k), so two requests that share their first k messages share h_1..h_k.
// A backend's prefix cache (vLLM's automatic prefix caching) reuses exactly such a shared run.
//
// The identity of a message is approximate and its cost bounded whatever its length: its role,
// the length of every text and SAMPLE characters from each end of it, the types of array
// content parts, tool calls' ids, names and sampled arguments (at most MAX_PARTS parts and
// MAX_PARTS calls, then their count); a tool, its name and the length of its description. Two
// different messages that agree on all of that collide; a collision only costs a worse route,
// never a wrong answer. Cost: about 2 * SAMPLE + 10 multiply-xor steps per message and per text
// part or call, about 20 per tool (measured: gateway/README.md "Routing").

/** Characters read from each end of a text. */
export const SAMPLE = 16;
/** Content parts, tool calls and tools looked at one by one; beyond, only their count. */
export const MAX_PARTS = 16;
export const MAX_TOOLS = 128;

// Hashes are folded as int32 (Math.imul's results; the offset basis as its int32 value), so the
// JIT keeps one number representation and the folds stay optimized; exported hashes are uint32.
const FNV_OFFSET = 0x811c9dc5 | 0;
const FNV_PRIME = 0x01000193;

/** 32-bit FNV-1a of a string's UTF-16 code units. */
export function fnv1a(s: string): number {
  let h = FNV_OFFSET;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, FNV_PRIME);
  }
  return h >>> 0;
}

/** Folds a string into `h`: its length, then at most SAMPLE characters from each end. */
export function foldText(h: number, s: string): number {
  const n = s.length;
  h = Math.imul(h ^ n, FNV_PRIME);
  if (n <= 2 * SAMPLE) {
    for (let i = 0; i < n; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
    return h;
  }
  for (let i = 0; i < SAMPLE; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  for (let i = n - SAMPLE; i < n; i++) h = Math.imul(h ^ s.charCodeAt(i), FNV_PRIME);
  return h;
}

/** Folds a value that should be a string (a role, an id); anything else folds its type tag. */
function foldField(h: number, v: unknown): number {
  if (typeof v === 'string') return foldText(h, v);
  return Math.imul(h ^ (v === undefined || v === null ? 0x55 : 0xaa), FNV_PRIME);
}

/** A content part (`{type, text}`, `{type, image_url: {url}}`...): its type and its text or URL. */
function foldPart(h: number, p: unknown): number {
  if (typeof p === 'string') return foldText(h, p);
  if (p === null || typeof p !== 'object') return foldField(h, undefined);
  const o = p as Record<string, unknown>;
  h = foldField(h, o.type);
  if (typeof o.text === 'string') return foldText(h, o.text);
  const img = o.image_url as { url?: unknown } | string | undefined;
  if (typeof img === 'string') return foldText(h, img);
  if (img !== null && typeof img === 'object') return foldField(h, img.url);
  return h;
}

/** A string, or an array of parts (at most MAX_PARTS, then their count). */
function foldContent(h: number, c: unknown): number {
  if (!Array.isArray(c)) return c === undefined ? h : foldPart(h, c);
  const n = c.length;
  h = Math.imul(h ^ n, FNV_PRIME);
  for (let i = 0; i < n && i < MAX_PARTS; i++) h = foldPart(h, c[i]);
  return h;
}

/** Tool calls of an assistant message: id, function name and sampled arguments. */
function foldCalls(h: number, calls: unknown): number {
  if (!Array.isArray(calls)) return h;
  const n = calls.length;
  h = Math.imul(h ^ n, FNV_PRIME);
  for (let i = 0; i < n && i < MAX_PARTS; i++) {
    const c = calls[i] as { id?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
    if (c === null || typeof c !== 'object') continue;
    h = foldField(h, c.id);
    const f = c.function;
    if (f !== null && typeof f === 'object') h = foldField(foldField(h, f.name), f.arguments);
  }
  return h;
}

/**
 * One message's hash: a chat message (`role`, `content`, `tool_calls`, `tool_call_id`, `name`) or
 * a Responses input item (`type`, `role`, `content`, `call_id`, `name`, `arguments`, `output`).
 */
export function messageHash(m: unknown): number {
  if (m === null || typeof m !== 'object') return foldField(FNV_OFFSET, m);
  const o = m as Record<string, unknown>;
  let h = foldField(FNV_OFFSET, o.role);
  if (o.type !== undefined) h = foldField(h, o.type);
  h = foldContent(h, o.content);
  if (o.tool_calls !== undefined) h = foldCalls(h, o.tool_calls);
  if (o.tool_call_id !== undefined) h = foldField(h, o.tool_call_id);
  if (o.call_id !== undefined) h = foldField(h, o.call_id);
  if (o.name !== undefined) h = foldField(h, o.name);
  if (o.arguments !== undefined) h = foldField(h, o.arguments);
  if (o.output !== undefined) h = foldContent(h, o.output);
  return h >>> 0;
}

/**
 * The tools' hash: their count, then each one's name and the length of its description (chat or
 * Responses shape). An agent sends the same tools on every request: their text is not read again.
 */
export function toolsHash(tools: unknown): number {
  if (!Array.isArray(tools)) return 0;
  const n = tools.length;
  let h = Math.imul(FNV_OFFSET ^ n, FNV_PRIME);
  for (let i = 0; i < n && i < MAX_TOOLS; i++) {
    const t = tools[i] as { name?: unknown; description?: unknown; function?: { name?: unknown; description?: unknown } } | null;
    if (t === null || typeof t !== 'object') continue;
    const f = t.function !== null && typeof t.function === 'object' ? t.function : t;
    h = foldField(h, f.name);
    h = Math.imul(h ^ (typeof f.description === 'string' ? f.description.length : 0), FNV_PRIME);
  }
  return h >>> 0;
}

/** murmur3's finalizer: spreads the bits of a 32-bit value. */
export function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The next link of the chain: H(h_(k-1), message hash). */
export function chain(prev: number, x: number): number {
  return mix(Math.imul(prev ^ 0x9e3779b9, 0x01000193) ^ x);
}

function isSystem(m: unknown): boolean {
  if (m === null || typeof m !== 'object') return false;
  const role = (m as { role?: unknown }).role;
  return role === 'system' || role === 'developer';
}

/** A prompt's units, and which of them is the conversation's first (its first non-system message). */
export interface PrefixUnits {
  readonly units: Uint32Array;
  /** Index in `units` of the unit that covers the first non-system message (the last unit when there is none). */
  readonly firstTurn: number;
}

/**
 * The units of `messages` (and `tools`, and `system`: text that precedes the messages, such as a
 * Responses request's instructions), chained from `seed`. undefined when there is no message.
 */
export function prefixUnits(seed: number, messages: readonly unknown[], tools: unknown, system?: string): PrefixUnits | undefined {
  const n = messages.length;
  let lead = 0;
  while (lead < n && isSystem(messages[lead])) lead++;
  const hasTools = Array.isArray(tools) && tools.length > 0;
  const head = lead > 0 || hasTools || system !== undefined;
  const count = (head ? 1 : 0) + n - lead;
  if (count === 0) return undefined;
  const units = new Uint32Array(count);
  let h = seed;
  let k = 0;
  if (head) {
    if (hasTools) h = chain(h, toolsHash(tools));
    if (system !== undefined) h = chain(h, foldText(FNV_OFFSET, system) >>> 0);
    for (let i = 0; i < lead; i++) h = chain(h, messageHash(messages[i]));
    units[k++] = h;
  }
  const firstTurn = k < count ? k : count - 1;
  for (let i = lead; i < n; i++) units[k++] = h = chain(h, messageHash(messages[i]));
  return { units, firstTurn };
}
