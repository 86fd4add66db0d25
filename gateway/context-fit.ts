// Fitting max_tokens into the model's context window (issue 15).
//
// Coding agents ask for 32,000 output tokens on models with 32k contexts; the backend then
// refuses the request ("'max_tokens' ... is too large"). When prompt + max_tokens might exceed
// the context, the prompt is counted exactly with the backend's own /tokenize and max_tokens is
// lowered to what fits; a prompt that alone fills the context is refused with the
// messages protocol's `prompt is too long: N tokens > M maximum`, which agents read to compact
// their history.
//
// Cost: the common case makes no extra round trip. The JSON of the rendered messages and tools,
// in UTF-8 bytes, bounds the prompt's token count from above (a byte-level tokenizer makes at
// most one token per byte, and a chat template adds fewer tokens per message than the JSON's
// own punctuation), so only when bytes + max_tokens (+ TEMPLATE_MARGIN, for what a chat template
// adds on its own: default system prompts, tool-use instructions) exceed the context is
// /tokenize called. The count holds an in-flight slot like any backend call (none free: no
// count, the request goes as it is and admission decides); like count_tokens it is not gated.
// Cheaper still, before any serializing: the client's request body bounds the rendered JSON too
// (`2 × body bytes + 128 per message and tool`: re-escaping tool arguments at most doubles a
// byte, and each chat message or tool wrapper adds less than 128 bytes), so a small request
// costs one comparison.
// Known gap: an image given by URL counts as its URL's bytes, and a remote image can take more
// tokens than that; the backend's own error then passes through.
//
// The context window: the catalog entry's maxContext, else the `max_model_len` the backend
// reports in its /tokenize answer (vLLM's, the same value as its /v1/models), learned on the
// first count and kept per catalog model (the smallest seen over its upstreams). Until known,
// every request counts.
import type { Res } from '../lib/http.js';
import type { ModelState } from './catalog.js';
import type { GatewayContext } from './context.js';
import { requestUpstream } from './upstreams.js';

/** What /tokenize takes: the chat request's prompt part. */
export interface PromptParts {
  model: string;
  messages: unknown[];
  tools?: unknown[] | undefined;
  chat_template_kwargs?: Record<string, unknown> | undefined;
}

export type FitResult =
  /** Forward as it is. */
  | { kind: 'fits' }
  /** Forward with max_tokens lowered to `maxTokens`. */
  | { kind: 'lowered'; maxTokens: number; promptTokens: number; maxContext: number }
  /** Refuse: the prompt alone leaves no room for one output token. */
  | { kind: 'too-long'; promptTokens: number; maximum: number };

const FITS: FitResult = { kind: 'fits' };
/** Tokens a chat template may add beyond the messages and tools themselves. */
export const TEMPLATE_MARGIN = 256;
const MAX_TOKENIZE_RESPONSE_BYTES = 16 * 1024 * 1024;

/** max_model_len learned from the backends, per catalog model. */
const learned = new WeakMap<ModelState, number>();
/** Catalog models whose backend has no /tokenize (404, 405, 501): never asked again. */
const noTokenize = new WeakSet<ModelState>();
const NO_TOKENIZE = new Set([404, 405, 501]);

/** The context window of `model`, when known. */
export function contextWindow(model: ModelState): number | undefined {
  return model.entry.maxContext ?? learned.get(model);
}

/** The context assumed for bounding max_tokens to an account's allowance when none is known (vLLM's common default). */
export const ASSUMED_CONTEXT = 32768;

/** The context the exact caps bound max_tokens within (admit.ts boundedMaxTokens). */
export function boundingContext(model: ModelState): number {
  return contextWindow(model) ?? ASSUMED_CONTEXT;
}

/** The message of the prompt-too-long refusal (the messages protocol's wording). */
export function promptTooLongMessage(r: { promptTokens: number; maximum: number }): string {
  return `prompt is too long: ${r.promptTokens} tokens > ${r.maximum} maximum`;
}

/**
 * The common case of fitMaxTokens, decided synchronously: the client's request body alone shows
 * that the prompt and `maxTokens` fit the known context (fitForResponse asks it first).
 */
function fitsByRequestSize(model: ModelState, prompt: PromptParts, maxTokens: number | undefined, requestBytes: number): boolean {
  const known = contextWindow(model);
  if (known === undefined) return false;
  const bound = 2 * requestBytes + 128 * (prompt.messages.length + (prompt.tools?.length ?? 0) + 1);
  return bound + (maxTokens ?? 1) + TEMPLATE_MARGIN <= known;
}

/**
 * fitMaxTokens for a request in flight on `res` (the chat and messages routes): `done` gets the
 * result, at once when the request's size shows it fits (no promise, abort signal or closure),
 * else after the count, which a client that goes away aborts. `done` is never called once the
 * client has gone; a count that fails gives `fits` (the backend then judges).
 */
export function fitForResponse(
  ctx: GatewayContext,
  res: Res,
  model: ModelState,
  stickyKey: string | undefined,
  prompt: PromptParts,
  maxTokens: number | undefined,
  requestBytes: number,
  done: (r: FitResult) => void,
): void {
  if (fitsByRequestSize(model, prompt, maxTokens, requestBytes)) {
    done(FITS);
    return;
  }
  const ac = new AbortController();
  res.onAbort = () => ac.abort();
  fitMaxTokens(ctx, model, stickyKey, prompt, maxTokens, ac.signal).then(
    (r) => {
      res.onAbort = undefined;
      if (!res.aborted) done(r);
    },
    (err: unknown) => {
      res.onAbort = undefined;
      ctx.logger.error('fitting max_tokens failed', { err, model: model.name });
      if (!res.aborted) done(FITS);
    },
  );
}

/**
 * Whether `prompt` with `maxTokens` output tokens fits `model`'s context; counts with /tokenize
 * only when it might not. `maxTokens` undefined: only the prompt is checked. Any failure of the
 * count (no /tokenize, backend down, odd answer) gives `fits`: the backend then judges. Called
 * by fitForResponse once the request's size alone did not show a fit.
 */
async function fitMaxTokens(
  ctx: GatewayContext,
  model: ModelState,
  stickyKey: string | undefined,
  prompt: PromptParts,
  maxTokens: number | undefined,
  signal: AbortSignal,
): Promise<FitResult> {
  const known = contextWindow(model);
  const wanted = maxTokens ?? 1;
  if (noTokenize.has(model)) return FITS;
  const body = JSON.stringify(prompt);
  if (known !== undefined && Buffer.byteLength(body) + wanted + TEMPLATE_MARGIN <= known) return FITS;
  if (!ctx.admission.tryEnter()) return FITS;
  let counted: Awaited<ReturnType<typeof tokenize>>;
  try {
    counted = await tokenize(ctx, model, stickyKey, body, signal);
  } finally {
    ctx.admission.leave();
  }
  if (!counted) return FITS;
  if (counted.maxModelLen !== undefined && model.entry.maxContext === undefined) {
    const prev = learned.get(model);
    if (prev === undefined || counted.maxModelLen < prev) learned.set(model, counted.maxModelLen);
  }
  const maxContext = contextWindow(model);
  if (maxContext === undefined) return FITS;
  const n = counted.count;
  // The backend needs room for at least one output token.
  if (n >= maxContext) return { kind: 'too-long', promptTokens: n, maximum: maxContext - 1 };
  if (maxTokens !== undefined && n + maxTokens > maxContext) return { kind: 'lowered', maxTokens: maxContext - n, promptTokens: n, maxContext };
  return FITS;
}

/** The backend's /tokenize of `body`: count and max_model_len, or undefined when it cannot say. */
async function tokenize(
  ctx: GatewayContext,
  model: ModelState,
  stickyKey: string | undefined,
  body: string,
  signal?: AbortSignal,
): Promise<{ count: number; maxModelLen: number | undefined } | undefined> {
  try {
    const up = await requestUpstream(ctx.upstreams, model, stickyKey, body, { path: '/tokenize', signal, maxBytes: MAX_TOKENIZE_RESPONSE_BYTES });
    if (NO_TOKENIZE.has(up.status)) noTokenize.add(model);
    if (up.status !== 200) return undefined;
    return parseTokenizeResponse(up.body);
  } catch {
    return undefined;
  }
}

/** `{count, max_model_len?}` of a /tokenize answer, or undefined when malformed. */
export function parseTokenizeResponse(body: Buffer): { count: number; maxModelLen: number | undefined } | undefined {
  try {
    const v = JSON.parse(body.toString('utf8')) as { count?: unknown; max_model_len?: unknown };
    if (!isCount(v.count)) return undefined;
    return { count: v.count, maxModelLen: isCount(v.max_model_len) && v.max_model_len > 0 ? v.max_model_len : undefined };
  } catch {
    return undefined;
  }
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}
