// The way into a backend for a model request of every protocol (chat completions, messages,
// responses): max tokens fitted into the model's context (context-fit.ts, issue #28), then
// admission (admit.ts) on an upper bound of the input (issue #27), counted exactly with the
// backend's /tokenize when that bound would refuse the request or lower its max tokens.
//
// Why a bound and not an estimate: reservations are what keep concurrent requests within an
// account's daily cap and token bucket. With `bytes / 4` as the input, two prompts of 32,000
// commas (a token per byte) were admitted together on a cap of 20,000 and charged 64,060. With
// the bound (context-fit.ts `inputBound`) or an exact count, every reservation covers its request's
// real input, and the gate bounds the output to what is left: the sum stays within the cap.
// The bound is free; the count is a round trip, made only when the bound bites (the account is
// near a limit, or the bound fills the context), so the common case costs nothing more.
import type { Route } from '../backends/upstreams.js';
import { headerName } from '../../lib/http.js';
import { CHAT_CODES } from '../errors.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { ModelRequest } from '../request/lifecycle.js';
import type { ProtocolError } from '../request/protocol.js';
import { admit, boundedMaxTokens, gateRequestFor } from './admit.js';
import { boundingContext, canCount, countPrompt, fitCounted, fitPrompt, inputBound, promptTooLongMessage, type FitResult } from './context-fit.js';
import type { PromptParts } from './prompt.js';

/** The request header that turns fitting on or off for one request (read it synchronously in the uWS handler: `r.fitHeader`). */
export const FIT_HEADER = headerName('x-rc-fit-max-tokens');

/**
 * Whether fitting applies: the header `x-rc-fit-max-tokens` (`1`/`true` on, `0`/`false` off)
 * wins, else the catalog entry's `fitMaxTokens` (default on).
 */
export function fitRequested(model: ModelState, headerValue: string): boolean {
  if (headerValue === '') return model.entry.fitMaxTokens;
  const v = headerValue.toLowerCase();
  if (v === '0' || v === 'false') return false;
  if (v === '1' || v === 'true') return true;
  return model.entry.fitMaxTokens;
}

/**
 * A model call on `model`: binds it to the request (its route, max tokens, the prompt builder),
 * fits its max tokens, admits it (counting the input when its bound bites), then calls `forward`
 * with the request admitted (`r.forwardMaxTokens`, `r.inputTokens` and `r.decision` set); answers
 * a too-long prompt or a refusal itself. A stream (`r.stream`) first takes its place per account
 * and address (request/held-streams.ts): call it in the body's callback. The request's `finish` settles and releases from then on.
 */
export function fitAndAdmit<E extends ProtocolError>(
  r: ModelRequest<E>,
  model: ModelState,
  route: Route,
  maxTokens: number | undefined,
  prompt: () => PromptParts | undefined,
  forward: (r: ModelRequest<E>) => void,
): void {
  r.model = model;
  if (r.stream && !holdStream(r)) return;
  r.routeHint = route;
  r.maxTokens = maxTokens;
  r.prompt = prompt;
  r.forward = forward;
  r.fit = fitRequested(model, r.fitHeader);
  if (!r.fit) admitCall(r, undefined);
  else fitPrompt(r, admitCall);
}

/** Takes the stream's place (request/held-streams.ts), or answers 429 stream_limit_exceeded and finishes the request. */
function holdStream<E extends ProtocolError>(r: ModelRequest<E>): boolean {
  const refusal = r.holdStream();
  if (refusal === undefined) return true;
  r.protocol.refuse(r.res, {
    kind: 'rate_limited',
    code: CHAT_CODES.streamLimit,
    retryAfterSec: refusal.retryAfterSec,
    headers: { 'x-rc-limit': refusal.message },
    message: refusal.message,
  });
  r.finish(429, undefined);
  return false;
}

function admitCall<E extends ProtocolError>(r: ModelRequest<E>, fit: FitResult | undefined): void {
  if (fit?.kind === 'too-long') {
    r.fail(r.protocol.tooLong(promptTooLongMessage(fit)));
    return;
  }
  const model = r.model!;
  if (fit?.kind === 'lowered') r.maxTokens = r.fittedMaxTokens = fit.maxTokens;
  const counted = (r.promptTokens = fit?.promptTokens);
  const maxTokens = r.maxTokens;
  const gateRequest = gateRequestFor(r.ctx, r.accountId, model.name, counted ?? inputBound(r.bodyBytes), maxTokens);
  // The bound may be replaced by a count: let the gate say when it bites (refuses, or leaves
  // fewer output tokens than asked; without max_tokens, less than the context, the most a
  // backend would generate).
  if (counted === undefined && canCount(model)) gateRequest.recountBelow = maxTokens ?? boundingContext(model);
  r.gateRequest = gateRequest;
  admit(r, admitted, recountInput);
}

/** The call is admitted: what to forward, then the route's `forward`. */
function admitted<E extends ProtocolError>(r: ModelRequest<E>): void {
  const estimate = r.promptTokens ?? Math.ceil(r.bodyBytes / 4);
  const bound = boundedMaxTokens(r.decision!, r.maxTokens, boundingContext(r.model!), estimate);
  r.forwardMaxTokens = bound ?? r.fittedMaxTokens;
  r.inputTokens = estimate;
  r.forward(r);
}

/** The gate asked for a count: the input's bound replaced by the prompt's /tokenize count (admit.ts Recount). */
function recountInput<E extends ProtocolError>(r: ModelRequest<E>, done: () => void): void {
  const parts = r.prompt();
  if (parts === undefined) return done();
  const model = r.model!;
  countPrompt(r, parts, (count) => {
    if (count !== undefined) {
      const gr = r.gateRequest!;
      let output = gr.estimatedTokens - (gr.inputTokens ?? 0);
      if (r.fit) {
        // The count may show what the bytes did not: max tokens past the context. (A prompt
        // alone too long goes on: the backend's own error answers it, nothing is charged.)
        const f = fitCounted(model, count, r.maxTokens);
        if (f.kind === 'lowered') r.fittedMaxTokens = r.maxTokens = output = f.maxTokens;
      }
      r.promptTokens = count;
      gr.inputTokens = count;
      gr.estimatedTokens = count + output;
    }
    done();
  });
}
