// Counting a prompt with the backend's own endpoints, the one way the gateway asks a backend to
// count: for fitting max tokens and for the gate's exact count (context-fit.ts), and for
// count_tokens (messages/count-tokens.ts). Each backend kind (backends/backend-kind.ts) counts
// its own way, read in its source:
//
// - vLLM, and SGLang since its chat /tokenize: POST /tokenize with the chat request's prompt part
//   (`{model, messages, tools, chat_template_kwargs}`) answers `{count, max_model_len, tokens}`
//   (vllm/entrypoints/openai/protocol.py TokenizeChatRequest; sglang
//   python/sglang/srt/entrypoints/openai/serving_tokenize.py).
// - llama.cpp: POST /apply-template with the same prompt part answers `{prompt}` (the chat
//   template applied), then POST /tokenize `{content, add_special: true}` answers `{tokens: [...]}`
//   (tools/server/server-context.cpp; the completion path tokenizes its prompt with special
//   tokens added and parsed, /tokenize parses them by default and adds them when asked).
// - SGLang 0.5: its /tokenize takes a `prompt` string only, and answers a chat body with its
//   validation 400 naming the missing `prompt`: that backend cannot count a chat prompt.
//
// What cannot count is remembered per upstream (it outlives catalog reloads) and never asked
// again: a 404, 405 or 501 (no endpoint), a 200 that is not a count, SGLang 0.5's 400. Then
// count_tokens answers the documented estimate and fitting leaves the backend to judge.
import { canCount, cannotCount, noteKind, serverKind } from '../backends/backend-kind.js';
import type { ModelState } from '../backends/model-catalog.js';
import { requestUpstream, type Route } from '../backends/upstreams.js';
import type { GatewayContext } from '../context.js';

/** Statuses of a backend without the endpoint. */
const NO_ENDPOINT = new Set([404, 405, 501]);
const MAX_TOKENIZE_RESPONSE_BYTES = 16 * 1024 * 1024;
export const TOKENIZE_PATH = '/tokenize';
export const APPLY_TEMPLATE_PATH = '/apply-template';

/**
 * SGLang 0.5's answer to a chat body on /tokenize: the validation error for its missing `prompt`
 * field, in whichever of the forms its releases write (`'loc': ('body', 'prompt')` in SGLang's 400
 * message, FastAPI's own 422 detail `"loc":["body","prompt"]`, or the short `prompt: Field
 * required` of SGLang's error response, which the sim's sglang-0.5 flavour writes).
 */
const PROMPT_REQUIRED = /\(\s*'body',\s*'prompt'\s*\)|"loc":\s*\[\s*"body",\s*"prompt"\s*\]|\bprompt: Field required\b/;

// What cannot count is kept with the other facts of a backend (backends/backend-kind.ts).
export { canCount };

/** The outcome of a count. */
export type CountOutcome =
  | { kind: 'counted'; count: number }
  /** The backend cannot count (remembered): estimate, or let the backend judge. */
  | { kind: 'cannot' }
  /** The backend answered an error: its status and body (count_tokens relays it). */
  | { kind: 'refused'; status: number; body: Buffer; retryAfter: string | undefined };

const CANNOT: CountOutcome = Object.freeze({ kind: 'cannot' });

/**
 * Counts `json` (a serialized PromptParts) with the backend of `model` that `route` picks, the way
 * its kind counts; rejects with UpstreamError when the backend cannot be reached (asked again
 * next time). The kind should be learned first (backend-kind.ts learnBackend); unknown, the
 * /tokenize answer's shape tells llama.cpp apart.
 */
export async function countWithBackend(ctx: GatewayContext, model: ModelState, route: Route, json: string, signal: AbortSignal): Promise<CountOutcome> {
  if (!canCount(model)) return CANNOT;
  if (serverKind(model) === 'llama.cpp') return countLlamaCpp(ctx, model, route, json, signal);
  const up = await post(ctx, model, route, TOKENIZE_PATH, json, signal);
  if (NO_ENDPOINT.has(up.status)) return cannotNow(model);
  if (up.status !== 200) {
    if ((up.status === 400 || up.status === 422) && PROMPT_REQUIRED.test(up.body.toString('utf8'))) return cannotNow(model);
    return { kind: 'refused', status: up.status, body: up.body, retryAfter: up.headers['retry-after'] };
  }
  const v = parseJson(up.body);
  const count = isRecord(v) ? v.count : undefined;
  if (isCount(count)) return { kind: 'counted', count };
  // llama.cpp's /tokenize answers a body without `content` with `{"tokens": []}`.
  if (isRecord(v) && Array.isArray(v.tokens) && v.count === undefined) {
    noteKind(model, 'llama.cpp');
    return countLlamaCpp(ctx, model, route, json, signal);
  }
  // A 200 that is not a count (a proxy's page, another API).
  return cannotNow(model);
}

/** llama.cpp: the template applied, then its text tokenized with the special tokens the completion adds. */
async function countLlamaCpp(ctx: GatewayContext, model: ModelState, route: Route, json: string, signal: AbortSignal): Promise<CountOutcome> {
  const applied = await post(ctx, model, route, APPLY_TEMPLATE_PATH, json, signal);
  if (NO_ENDPOINT.has(applied.status)) return cannotNow(model);
  if (applied.status !== 200) return { kind: 'refused', status: applied.status, body: applied.body, retryAfter: applied.headers['retry-after'] };
  const t = parseJson(applied.body);
  if (!isRecord(t) || typeof t.prompt !== 'string') return cannotNow(model);
  const up = await post(ctx, model, route, TOKENIZE_PATH, JSON.stringify({ content: t.prompt, add_special: true }), signal);
  if (NO_ENDPOINT.has(up.status)) return cannotNow(model);
  if (up.status !== 200) return { kind: 'refused', status: up.status, body: up.body, retryAfter: up.headers['retry-after'] };
  const v = parseJson(up.body);
  if (!isRecord(v) || !Array.isArray(v.tokens)) return cannotNow(model);
  return { kind: 'counted', count: v.tokens.length };
}

function cannotNow(model: ModelState): CountOutcome {
  cannotCount(model);
  return CANNOT;
}

function post(ctx: GatewayContext, model: ModelState, route: Route, path: string, body: string, signal: AbortSignal) {
  return requestUpstream(ctx.upstreams, model, route, body, { path, signal, maxBytes: MAX_TOKENIZE_RESPONSE_BYTES });
}

function parseJson(body: Buffer): unknown {
  try {
    return JSON.parse(body.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}
