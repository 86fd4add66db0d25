// The way into a backend for every shared model route (chat, messages, count_tokens): an
// in-flight slot (admission), then the gate. Each route answers a refusal in its protocol's shape
// through the `refuse` callback it passes (its error mapper); what is refused and when is the
// same on every route.
import type { Res } from '../../lib/http.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { GatewayContext } from '../context.js';
import type { GateDecision, GateRequest, GateUsage } from '../gates/gate.js';
import { CLIENT_CLOSED } from '../metrics.js';
import { ZERO_USAGE } from '../usage.js';

export type Allowed = GateDecision & { allowed: true };

/** Why a request was not forwarded. */
export type Refusal =
  /** Every in-flight slot is taken: 503 with Retry-After: 5. */
  | { readonly kind: 'pool_exhausted' }
  /** A gate refused: 429 with the gate's code, Retry-After and headers. */
  | { readonly kind: 'rate_limited'; readonly code: string; readonly retryAfterSec: number; readonly headers: Record<string, string> }
  /** The gate threw: 503 with Retry-After: 5. */
  | { readonly kind: 'gate_unavailable' };

export const POOL_EXHAUSTED: Refusal = Object.freeze({ kind: 'pool_exhausted' });
export const GATE_UNAVAILABLE: Refusal = Object.freeze({ kind: 'gate_unavailable' });

/** A protocol's answer to a refusal (its error shape); one static function per protocol. */
export type RefusalReply = (res: Res, r: Refusal) => void;

/** The HTTP status of a refusal. */
export function refusalStatus(r: Refusal): number {
  return r.kind === 'rate_limited' ? 429 : 503;
}

/**
 * Replaces a gate request's input bound by an exact count: sets `inputTokens` (and
 * `estimatedTokens`) to the count, or leaves the bound when there is none, then calls `done`.
 * Called with the request's in-flight slot held; `done` is called once, also when the client left.
 */
export type Recount = (gateRequest: GateRequest, done: () => void) => void;

/**
 * Takes an in-flight slot, then asks the gate. Calls `forward` with the allowed decision, or
 * answers the refusal with `reply` (after releasing the slot; the metrics count it). Whoever `forward` hands the request to releases the slot
 * (`ctx.admission.leave()`) and settles the gate exactly once when it ends. A client that left
 * while the gate decided is neither forwarded nor refused: its reservation is returned at once.
 * When the gate answers `recount` (the request's input bound bit, `GateRequest.recountBelow`),
 * `recount` replaces the bound by a count and the gate is asked once more, on the count.
 */
export function admit(
  ctx: GatewayContext,
  res: Res,
  route: string,
  gateRequest: GateRequest,
  reply: RefusalReply,
  forward: (decision: Allowed) => void,
  recount?: Recount,
): void {
  // Plain functions with their arguments, no closures: this runs for every request, and with
  // the in-memory gates the decision is there at once.
  if (!ctx.admission.tryEnter()) {
    refuse(ctx, res, route, gateRequest, reply, POOL_EXHAUSTED);
    return;
  }
  ask(ctx, res, route, gateRequest, reply, forward, recount);
}

/** Asks the gate (the in-flight slot is held). */
function ask(
  ctx: GatewayContext,
  res: Res,
  route: string,
  gateRequest: GateRequest,
  reply: RefusalReply,
  forward: (decision: Allowed) => void,
  recount: Recount | undefined,
): void {
  let decision: GateDecision | Promise<GateDecision>;
  try {
    decision = ctx.gate.admit(gateRequest);
  } catch (err) {
    gateFailed(ctx, res, route, gateRequest, reply, err);
    return;
  }
  if (decision instanceof Promise) {
    decision.then(
      (d) => decided(ctx, res, route, gateRequest, reply, forward, d, recount),
      (err: unknown) => gateFailed(ctx, res, route, gateRequest, reply, err),
    );
  } else decided(ctx, res, route, gateRequest, reply, forward, decision, recount);
}

function refuse(ctx: GatewayContext, res: Res, route: string, gateRequest: GateRequest, reply: RefusalReply, r: Refusal): void {
  ctx.metrics.request(route, gateRequest.model, refusalStatus(r));
  reply(res, r);
}

function decided(
  ctx: GatewayContext,
  res: Res,
  route: string,
  gateRequest: GateRequest,
  reply: RefusalReply,
  forward: (decision: Allowed) => void,
  d: GateDecision,
  recount: Recount | undefined,
): void {
  if (!d.allowed && d.recount) {
    // Nothing was reserved. Count (once: without recountBelow the gate decides on what it gets).
    gateRequest.recountBelow = 0;
    if (recount === undefined || res.aborted) {
      if (res.aborted) return clientLeft(ctx, route, gateRequest);
      ask(ctx, res, route, gateRequest, reply, forward, undefined);
      return;
    }
    recount(gateRequest, () => {
      if (res.aborted) clientLeft(ctx, route, gateRequest);
      else ask(ctx, res, route, gateRequest, reply, forward, undefined);
    });
    return;
  }
  if (!d.allowed) {
    ctx.admission.leave();
    refuse(ctx, res, route, gateRequest, reply, { kind: 'rate_limited', code: d.code, retryAfterSec: d.retryAfterSec, headers: d.headers });
    return;
  }
  if (res.aborted) {
    // The client left while the gate decided: nothing was forwarded, nothing was used.
    ctx.admission.leave();
    ctx.metrics.request(route, gateRequest.model, CLIENT_CLOSED);
    ctx.gate.settle(gateRequest, d, ZERO_USAGE);
    return;
  }
  forward(d);
}

/** The client left while its input was counted: nothing was reserved, the slot is released. */
function clientLeft(ctx: GatewayContext, route: string, gateRequest: GateRequest): void {
  ctx.admission.leave();
  ctx.metrics.request(route, gateRequest.model, CLIENT_CLOSED);
}

function gateFailed(ctx: GatewayContext, res: Res, route: string, gateRequest: GateRequest, reply: RefusalReply, err: unknown): void {
  ctx.admission.leave();
  ctx.logger.error('gate admit failed', { err, route, model: gateRequest.model });
  refuse(ctx, res, route, gateRequest, reply, GATE_UNAVAILABLE);
}

/**
 * The gate request of a shared model request: its input estimate plus the output it may generate
 * (its max_tokens, or the default reservation, which the gate may shrink: `defaultOutput`).
 */
export function gateRequestFor(ctx: GatewayContext, accountId: number, model: string, inputTokens: number, maxTokens: number | undefined): GateRequest {
  return {
    accountId,
    model,
    estimatedTokens: inputTokens + (maxTokens ?? ctx.limits.defaultMaxTokens),
    inputTokens,
    defaultOutput: maxTokens === undefined,
  };
}

/**
 * The max_tokens to forward so that the request cannot generate more than its account has
 * left, or undefined to leave the request's own. `requested` is the request's max_tokens
 * (undefined when it gave none); `maxContext` the model's context window (without max_tokens a
 * backend generates at most that much, so a larger allowance needs no bound);
 * `inputTokens` the gateway's input estimate.
 */
export function boundedMaxTokens(decision: Allowed, requested: number | undefined, maxContext: number, inputTokens: number): number | undefined {
  const left = decision.maxOutputTokens;
  if (left === undefined) return undefined;
  if (requested !== undefined) return requested > left ? left : undefined;
  if (left >= maxContext) return undefined;
  // Also keep within the context after the input, so a backend does not refuse the value.
  return Math.max(1, Math.min(left, maxContext - inputTokens));
}

/**
 * The way out of a request that `admit` forwarded through the chat relay (chat completions,
 * /v1/responses), to be called exactly once: the in-flight slot, the model's usage series, the
 * metrics and the gate's settlement.
 */
export function settlement(
  ctx: GatewayContext,
  route: string,
  model: ModelState,
  gateRequest: GateRequest,
  decision: Allowed,
): (status: number, usage: GateUsage | undefined) => void {
  return (status, usage) => {
    ctx.admission.leave();
    if (usage && usage !== ZERO_USAGE) model.series.tokens(usage.inputTokens, usage.outputTokens);
    ctx.metrics.request(route, model.name, status);
    try {
      ctx.gate.settle(gateRequest, decision, usage);
    } catch (err) {
      ctx.logger.error('gate settle failed', { err, route });
    }
  };
}
