// The way into a backend for every shared model route (chat, messages, count_tokens, responses):
// an in-flight slot (admission), then the gate. A refusal is answered in the request's protocol
// (request/protocol.ts `refuse`) and ends the request (request/lifecycle.ts `finish`); what is
// refused and when is the same on every route.
import type { GateDecision, GateRequest } from '../gates/gate.js';
import { CLIENT_CLOSED } from '../metrics.js';
import type { Allowed, ModelRequest } from '../request/lifecycle.js';
import type { ProtocolError } from '../request/protocol.js';
import type { GatewayContext } from '../context.js';
import { ZERO_USAGE } from '../usage.js';
import { GATE_UNAVAILABLE, POOL_EXHAUSTED, refusalStatus, type Refusal } from './refusal.js';

/**
 * Replaces the request's input bound by an exact count: sets `inputTokens` (and
 * `estimatedTokens`) of `r.gateRequest` to the count, or leaves the bound when there is none,
 * then calls `done`. Called with the request's in-flight slot held; `done` is called once, also
 * when the client left.
 */
export type Recount<E extends ProtocolError> = (r: ModelRequest<E>, done: () => void) => void;

/**
 * Takes an in-flight slot, then asks the gate about `r.gateRequest`. Calls `forward` with the
 * request allowed (`r.decision` set; the request's `finish` then releases the slot and settles),
 * or answers the refusal and finishes the request. A client that left while the gate decided is
 * neither forwarded nor refused: the request finishes as client-closed, its reservation returned
 * at once. When the gate answers `recount` (the request's input bound bit,
 * `GateRequest.recountBelow`), `recount` replaces the bound by a count and the gate is asked once
 * more, on the count.
 */
export function admit<E extends ProtocolError>(r: ModelRequest<E>, forward: (r: ModelRequest<E>) => void, recount?: Recount<E>): void {
  // Plain functions with their arguments, no closures: this runs for every request, and with
  // the in-memory gates the decision is there at once.
  if (!r.takeSlot()) {
    refuse(r, POOL_EXHAUSTED);
    return;
  }
  ask(r, forward, recount);
}

/** Asks the gate (the in-flight slot is held). */
function ask<E extends ProtocolError>(r: ModelRequest<E>, forward: (r: ModelRequest<E>) => void, recount: Recount<E> | undefined): void {
  const gate = r.ctx.gate;
  if (gate.admitThen !== undefined) {
    // Through the gate's callback: what comes after the decision rides on the request.
    r.onAdmitted = forward;
    r.recount = recount;
    try {
      gate.admitThen(r.gateRequest!, r, decidedThen);
    } catch (err) {
      gateFailed(r, err);
    }
    return;
  }
  let decision: GateDecision | Promise<GateDecision>;
  try {
    decision = gate.admit(r.gateRequest!);
  } catch (err) {
    gateFailed(r, err);
    return;
  }
  if (decision instanceof Promise) {
    decision.then(
      (d) => decided(r, forward, d, recount),
      (err: unknown) => gateFailed(r, err),
    );
  } else decided(r, forward, decision, recount);
}

/** The gate's callback (RequestGate.admitThen): the decision, with the request's `onAdmitted` and `recount`. */
function decidedThen<E extends ProtocolError>(r: ModelRequest<E>, d: GateDecision): void {
  decided(r, r.onAdmitted, d, r.recount);
}

function refuse<E extends ProtocolError>(r: ModelRequest<E>, refusal: Refusal): void {
  r.protocol.refuse(r.res, refusal);
  r.finish(refusalStatus(refusal), undefined);
}

function decided<E extends ProtocolError>(r: ModelRequest<E>, forward: (r: ModelRequest<E>) => void, d: GateDecision, recount: Recount<E> | undefined): void {
  if (!d.allowed && d.recount) {
    // Nothing was reserved. Count (once: without recountBelow the gate decides on what it gets).
    r.gateRequest!.recountBelow = 0;
    if (r.res.aborted) r.finish(CLIENT_CLOSED, undefined);
    else if (recount === undefined) ask(r, forward, undefined);
    else
      recount(r, () => {
        // A count the client left during ends the request as client-closed (context-fit.ts).
        if (r.res.aborted) r.finish(CLIENT_CLOSED, undefined);
        else ask(r, forward, undefined);
      });
    return;
  }
  if (!d.allowed) {
    refuse(r, { kind: 'rate_limited', code: d.code, retryAfterSec: d.retryAfterSec, headers: d.headers });
    return;
  }
  r.decision = d;
  if (r.res.aborted) {
    // The client left while the gate decided: nothing was forwarded, nothing was used.
    r.finish(CLIENT_CLOSED, ZERO_USAGE);
    return;
  }
  forward(r);
}

function gateFailed<E extends ProtocolError>(r: ModelRequest<E>, err: unknown): void {
  r.ctx.logger.error('gate admit failed', { err, route: r.route, model: r.gateRequest!.model });
  refuse(r, GATE_UNAVAILABLE);
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
