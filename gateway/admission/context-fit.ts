// What the gateway knows of a prompt's size, for every protocol (issues 15, #27, #28): an upper
// bound from the request's bytes (free), and the exact count from the backend's own /tokenize
// (a round trip, asked only when the bound is not good enough).
//
// The bound (`inputBound`): a prompt has at most 2 × (request body bytes) + TEMPLATE_MARGIN
// tokens. Why, for a byte-level tokenizer (BPE over UTF-8 bytes, as vLLM's models use; the
// sim's tokenizer too): each token covers at least one byte of the rendered prompt (a special
// token covers several), so tokens <= rendered bytes. What the template renders from the request:
// - text (message contents, system, tool results) as its UTF-8, never longer than the JSON
//   string that carried it in the body (escapes only lengthen);
// - JSON it re-serializes (tool definitions, tool-call arguments) with `tojson`, which adds at
//   most one separator space per `,` or `:` of the compact JSON: at most twice its body bytes;
// - per message and per tool a few marker tokens (`<|im_start|>user\n` ... `<|im_end|>\n`: five
//   to seven tokens), fewer than the body's own wrapper bytes of that message
//   (`{"role":"user","content":""}` is 28);
// - text of its own (a default system prompt, tool-use instructions): under TEMPLATE_MARGIN.
// So the body's bytes, doubled, plus the margin bound the prompt (a plain-text request uses about
// half of it: the doubling is there for re-serialized JSON). Known gap: an image by URL counts as
// its URL's bytes, and a remote image may take more tokens than that.
//
// Fitting max_tokens into the context (`fitPrompt`, on every protocol by default): when bound +
// max_tokens fits the context nothing more is done (the common case: one comparison). Else the
// rendered prompt's JSON bytes (messages and tools serialized, about 3 µs per 10 KB) are tried,
// a good estimate though not a strict bound (the doubling above is for the worst case of
// re-serialized JSON; an underestimate here only lets the backend's own error through); then the
// prompt is counted the backend's way (tokenize.ts): max_tokens lowered to context - count, or a prompt that
// alone fills the context refused. The count holds an in-flight slot like any backend call (none
// free: no count, the backend judges); like count_tokens it is not gated.
//
// The context window: the catalog entry's maxContext, else the one the backend reports in its
// /v1/models (backends/backend-kind.ts: vLLM's and SGLang's max_model_len, llama.cpp's slot
// n_ctx), learned before the first fitting of a model (one GET per backend, then kept) and the
// smallest over its upstreams. Not /tokenize's max_model_len: SGLang reports its tokenizer's
// limit there (often 131072), not the server's context.
import type { ModelState } from '../backends/model-catalog.js';
import { CLIENT_CLOSED } from '../metrics.js';
import type { ModelRequest } from '../request/lifecycle.js';
import type { ProtocolError } from '../request/protocol.js';
import type { PromptParts } from './prompt.js';
import { backendContext, backendLearned, learnBackend } from '../backends/backend-kind.js';
import { canCount, countWithBackend } from './tokenize.js';

export type FitResult =
  /** Forward as it is. `promptTokens`: the exact count, when one was made. */
  | { kind: 'fits'; promptTokens?: number | undefined }
  /** Forward with max_tokens lowered to `maxTokens` (`promptTokens`: the count it was fitted to; absent: fitted to the bound). */
  | { kind: 'lowered'; maxTokens: number; promptTokens?: number | undefined; maxContext: number }
  /** Refuse: the prompt alone leaves no room for one output token. */
  | { kind: 'too-long'; promptTokens: number; maximum: number };

const FITS: FitResult = Object.freeze({ kind: 'fits' });
/** Tokens a chat template may add beyond the messages and tools themselves. */
export const TEMPLATE_MARGIN = 256;

/** An upper bound of the prompt tokens of a request whose body has `bodyBytes` bytes (see above). */
export function inputBound(bodyBytes: number): number {
  return 2 * bodyBytes + TEMPLATE_MARGIN;
}

/** The context window of `model`, when known. */
export function contextWindow(model: ModelState): number | undefined {
  return model.entry.maxContext ?? backendContext(model);
}

/** The context assumed for bounding max_tokens to an account's allowance when none is known (vLLM's common default). */
export const ASSUMED_CONTEXT = 32768;

/** The context the exact caps bound max_tokens within (admit.ts boundedMaxTokens). */
export function boundingContext(model: ModelState): number {
  return contextWindow(model) ?? ASSUMED_CONTEXT;
}

export { canCount } from './tokenize.js';

/** The message of the prompt-too-long refusal (the messages protocol's wording, used on every protocol). */
export function promptTooLongMessage(r: { promptTokens: number; maximum: number }): string {
  return `prompt is too long: ${r.promptTokens} tokens > ${r.maximum} maximum`;
}

/**
 * Fits `r.maxTokens` into the context of `r.model`: `done` gets the result, at once when the
 * bound shows it fits (no promise, abort signal or closure), else after the count, which a client
 * that goes away aborts. Without a count (none possible, or it failed) max tokens are fitted to the
 * bound (fitUncounted). `r.prompt` is
 * built only when needed; undefined: the request cannot be counted (the backend judges).
 * A client that left during the count: `done` is not called, the request finishes as
 * client-closed (below, "A count the client left").
 */
export function fitPrompt<E extends ProtocolError>(r: ModelRequest<E>, done: (r: ModelRequest<E>, fit: FitResult) => void): void {
  const model = r.model!;
  // The first request of a model waits for what its backends report (context, kind); once.
  if (model.entry.maxContext === undefined && !backendLearned(model)) {
    void learnBackend(model).then(() => {
      if (r.res.aborted) r.finish(CLIENT_CLOSED, undefined);
      else fitPrompt(r, done);
    });
    return;
  }
  const known = contextWindow(model);
  const wanted = r.maxTokens ?? 1;
  if (known !== undefined && inputBound(r.bodyBytes) + wanted <= known) {
    done(r, FITS);
    return;
  }
  const uncounted = () => fitUncounted(model, r.bodyBytes, r.maxTokens);
  if (!canCount(model)) {
    done(r, uncounted());
    return;
  }
  const parts = r.prompt();
  if (parts === undefined) {
    done(r, uncounted());
    return;
  }
  let body: string;
  try {
    body = JSON.stringify(parts);
  } catch {
    done(r, uncounted()); // nests deeper than the stack allows: no count
    return;
  }
  if (known !== undefined && Buffer.byteLength(body) + wanted + TEMPLATE_MARGIN <= known) {
    done(r, FITS);
    return;
  }
  const ctx = r.ctx;
  // The count holds a slot of its own, released when it ends (the request takes its own at admission).
  if (!ctx.admission.tryEnter()) {
    done(r, uncounted());
    return;
  }
  countJson(r, body, (count) => {
    ctx.admission.leave();
    if (r.res.aborted) r.finish(CLIENT_CLOSED, undefined);
    else done(r, count === undefined ? uncounted() : fitCounted(model, count, r.maxTokens));
  });
}

/**
 * Fitting without a count (the backend cannot count, as SGLang 0.5, or the count failed): max
 * tokens lowered to the context less the prompt's bound, a strict upper bound of its tokens, so the
 * backend never refuses the request for max tokens; when the bound alone fills the context (a long
 * prompt), nothing is lowered and the backend judges.
 */
export function fitUncounted(model: ModelState, bodyBytes: number, maxTokens: number | undefined): FitResult {
  const maxContext = contextWindow(model);
  if (maxContext === undefined || maxTokens === undefined) return FITS;
  const room = maxContext - inputBound(bodyBytes);
  return room > 0 && maxTokens > room ? { kind: 'lowered', maxTokens: room, maxContext } : FITS;
}

/** The fitting of a counted prompt (undefined: no count, the backend judges). */
export function fitCounted(model: ModelState, count: number | undefined, maxTokens: number | undefined): FitResult {
  if (count === undefined) return FITS;
  const maxContext = contextWindow(model);
  if (maxContext === undefined) return { kind: 'fits', promptTokens: count };
  // The backend needs room for at least one output token.
  if (count >= maxContext) return { kind: 'too-long', promptTokens: count, maximum: maxContext - 1 };
  if (maxTokens !== undefined && count + maxTokens > maxContext) return { kind: 'lowered', maxTokens: maxContext - count, promptTokens: count, maxContext };
  return { kind: 'fits', promptTokens: count };
}

/**
 * Counts `prompt` with the backend's /tokenize (the request holds an in-flight slot for it);
 * `done` gets the count, or undefined when there is none (no /tokenize, an error, a malformed
 * answer, the client gone: it aborts the call). Always called, once; check `r.res.aborted`.
 */
export function countPrompt<E extends ProtocolError>(r: ModelRequest<E>, prompt: PromptParts, done: (count: number | undefined) => void): void {
  let body: string;
  try {
    body = JSON.stringify(prompt);
  } catch {
    done(undefined);
    return;
  }
  countJson(r, body, done);
}

// A count the client left (its abort cancels the /tokenize call, which then fails): the one
// behaviour on every route that counts (fitting, the gate's recount, count_tokens). Nothing is
// answered and nothing is logged (the abort is what failed the count); the request finishes as
// client-closed (499 in the metrics): its slot released, nothing reserved (count_tokens settles
// its request-bucket reservation with zero usage).
function countJson<E extends ProtocolError>(r: ModelRequest<E>, body: string, done: (count: number | undefined) => void): void {
  const res = r.res;
  const model = r.model!;
  const ac = new AbortController();
  res.onAbort = () => ac.abort();
  tokenize(r, model, body, ac.signal).then(
    (count) => {
      res.onAbort = undefined;
      done(count);
    },
    (err: unknown) => {
      res.onAbort = undefined;
      r.ctx.logger.error('counting the prompt failed', { err, model: model.name });
      done(undefined);
    },
  );
}

/** The backend's count of `body` (the kind learned first), or undefined when it cannot say. */
async function tokenize<E extends ProtocolError>(r: ModelRequest<E>, model: ModelState, body: string, signal: AbortSignal): Promise<number | undefined> {
  try {
    if (!backendLearned(model)) await learnBackend(model);
    const c = await countWithBackend(r.ctx, model, r.routeHint, body, signal);
    return c.kind === 'counted' ? c.count : undefined;
  } catch {
    return undefined; // down, timed out, aborted: asked again next time
  }
}
