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
import { headerName, type Res } from '../../lib/http.js';
import { admit, boundedMaxTokens, gateRequestFor, type Allowed, type RefusalReply } from './admit.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { GatewayContext } from '../context.js';
import {
  boundingContext,
  canCount,
  countPrompt,
  fitCounted,
  fitPrompt,
  inputBound,
  promptTooLongMessage,
  type FitResult,
  type PromptParts,
} from './context-fit.js';
import type { GateRequest } from '../gates/gate.js';

/** What a route knows of a model request once it has parsed it. */
export interface ModelCall {
  /** The metrics route name. */
  route: string;
  accountId: number;
  model: ModelState;
  /** Sticky routing key (a count goes to the backend the request will go to). */
  stickyKey: string | undefined;
  /** The prompt as /tokenize takes it, built only when a count is needed; undefined: it cannot be counted. */
  prompt: () => PromptParts | undefined;
  /** The request's max output tokens; undefined when it gave none. */
  maxTokens: number | undefined;
  /** The client's request body size (the input bound is made from it). */
  bodyBytes: number;
  /** Whether max tokens are fitted into the context (on by default: `fitRequested`). */
  fit: boolean;
}

/** A protocol's answers: a refused admission, and a prompt that alone is too long (400; the metrics are counted). */
export interface CallReplies {
  refuse: RefusalReply;
  tooLong(res: Res, message: string): void;
}

/** An admitted model request. */
export interface AdmittedCall {
  decision: Allowed;
  /** What the gate was asked (its input the count when one was made, else the bound); settle it with this. */
  gateRequest: GateRequest;
  /**
   * The max tokens to forward when they differ from the request's (fitted into the context,
   * or lowered to what the account has left); undefined: leave the request's own.
   */
  maxTokens: number | undefined;
  /** The input tokens to charge a stream cut before the backend's usage: the count when made, else bytes / 4. */
  inputTokens: number;
}

/** The request header that turns fitting on or off for one request (read it synchronously in the uWS handler). */
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
 * Fits, admits (counting the input when its bound bites), then calls `forward` with the admitted
 * request; answers a too-long prompt or a refusal itself. `forward` owns the slot and the
 * settlement from then on (admit.ts).
 */
export function fitAndAdmit(ctx: GatewayContext, res: Res, call: ModelCall, replies: CallReplies, forward: (a: AdmittedCall) => void): void {
  if (!call.fit) {
    admitCall(ctx, res, call, replies, forward, undefined);
    return;
  }
  fitPrompt(ctx, res, call.model, call.stickyKey, call.prompt, call.maxTokens, call.bodyBytes, (r) => admitCall(ctx, res, call, replies, forward, r));
}

function admitCall(ctx: GatewayContext, res: Res, call: ModelCall, replies: CallReplies, forward: (a: AdmittedCall) => void, fit: FitResult | undefined): void {
  if (fit?.kind === 'too-long') {
    ctx.metrics.request(call.route, call.model.name, 400);
    replies.tooLong(res, promptTooLongMessage(fit));
    return;
  }
  const model = call.model;
  /** The fitted max tokens, when lowered; the exact prompt count, when made. */
  let fitted = fit?.kind === 'lowered' ? fit.maxTokens : undefined;
  let counted = fit?.promptTokens;
  let maxTokens = fitted ?? call.maxTokens;
  const gateRequest = gateRequestFor(ctx, call.accountId, model.name, counted ?? inputBound(call.bodyBytes), maxTokens);
  // The bound may be replaced by a count: let the gate say when it bites (refuses, or leaves
  // fewer output tokens than asked; without max_tokens, less than the context, the most a
  // backend would generate).
  if (counted === undefined && canCount(model)) gateRequest.recountBelow = maxTokens ?? boundingContext(model);
  admit(
    ctx,
    res,
    call.route,
    gateRequest,
    replies.refuse,
    (decision) => {
      const estimate = counted ?? Math.ceil(call.bodyBytes / 4);
      const bound = boundedMaxTokens(decision, maxTokens, boundingContext(model), estimate);
      forward({ decision, gateRequest, maxTokens: bound ?? fitted, inputTokens: estimate });
    },
    (gr, done) => {
      const parts = call.prompt();
      if (parts === undefined) return done();
      countPrompt(ctx, res, model, call.stickyKey, parts, (count) => {
        if (count !== undefined) {
          let output = gr.estimatedTokens - (gr.inputTokens ?? 0);
          if (call.fit) {
            // The count may show what the bytes did not: max tokens past the context. (A prompt
            // alone too long goes on: the backend's own error answers it, nothing is charged.)
            const f = fitCounted(model, count, maxTokens);
            if (f.kind === 'lowered') {
              fitted = maxTokens = output = f.maxTokens;
            }
          }
          counted = count;
          gr.inputTokens = count;
          gr.estimatedTokens = count + output;
        }
        done();
      });
    },
  );
}
