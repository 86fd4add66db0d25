// One request on the shared model routes (chat completions, /v1/messages, count_tokens,
// /v1/responses; /v1/models for its credential), from the door to its end. The route's handler
// makes it before anything else; it carries what the request learns on its way: the account, the
// catalog model, what fitting and admission know of the call, the in-flight slot and the gate's
// reservation. However the request ends (an answer of the gateway's own, a relayed response, a
// client that left), it ends through `finish(status, usage)`, once: the gate settled (only when
// it reserved something; a settle that throws is logged, never thrown into a relay), the slot
// and a stream's place released, the model's token series and the request metrics counted. Each protocol plugs in its
// error shape (protocol.ts); `fail(e)` answers in it and finishes with its status.
//
// One object with fields, made once per request, instead of what the routes allocated for the
// same purposes (a call description, the admitted call, a settlement closure): the request path
// is hot.
import type { Route } from '../backends/upstreams.js';
import type { Res } from '../../lib/http.js';
import type { Recount } from '../admission/admit.js';
import type { PromptParts } from '../admission/prompt.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { GatewayContext } from '../context.js';
import type { GateDecision, GateRequest, GateUsage } from '../gates/gate.js';
import type { HeldRefusal } from '../../lib/held-limits.js';
import { lastForwardedFor, peerAddress } from '../../lib/client-address.js';
import { NO_MODEL } from '../metrics.js';
import { ZERO_USAGE } from '../usage.js';
import type { Protocol, ProtocolError } from './protocol.js';

/** A gate decision that let the request through (it may hold a reservation to settle). */
export type Allowed = GateDecision & { allowed: true };

const NO_PROMPT = (): PromptParts | undefined => undefined;
const NOTHING_TO_FORWARD = (): void => {};

export class ModelRequest<E extends ProtocolError = ProtocolError> {
  /** The account, once the front door has taken the credential. */
  accountId = 0;
  /** The x-rc-fit-max-tokens header, read in the handler (the uWS request is valid only there). */
  fitHeader = '';
  /** The X-Forwarded-For header as read in the handler (counted only with RC_TRUST_PROXY: clientAddress). */
  forwardedFor = '';
  /** The client's body size (the gate's input bound and the input estimate are made from it). */
  bodyBytes = 0;
  /**
   * The catalog model, held for the whole request (a catalog change never affects a request in
   * flight). The metrics count the request under its name once it is set, under NO_MODEL before.
   */
  model: ModelState | undefined = undefined;

  // The model call, as fitting and admission know it (admission/model-call.ts).
  /** What the upstream choice reads (backends/route-hint.ts): a count goes to the backend the request will go to. */
  routeHint: Route = undefined;
  /** The request's max output tokens (undefined: it gave none), lowered when fitted into the context. */
  maxTokens: number | undefined = undefined;
  /** max tokens as lowered to fit the context, when they were. */
  fittedMaxTokens: number | undefined = undefined;
  /** Whether max tokens are fitted into the context (model-call.ts fitRequested). */
  fit = false;
  /** The prompt as /tokenize takes it, built only when a count is needed; undefined: it cannot be counted. */
  prompt: () => PromptParts | undefined = NO_PROMPT;
  /** The prompt's exact /tokenize count, when one was made. */
  promptTokens: number | undefined = undefined;
  /** What the route does with the call once admitted (forward it to a backend). */
  forward: (r: ModelRequest<E>) => void = NOTHING_TO_FORWARD;
  /** Once admitted: the max tokens to forward when they differ from the request's (fitted, or lowered to what the account has left). */
  forwardMaxTokens: number | undefined = undefined;
  /** Once admitted: the input tokens charged to a stream cut before the backend's usage (the count when made, else bytes / 4). */
  inputTokens = 0;

  /** What admission (admit.ts) calls once the gate let the request through, and its recount: kept here while the gate decides. */
  onAdmitted: (r: ModelRequest<E>) => void = NOTHING_TO_FORWARD;
  recount: Recount<E> | undefined = undefined;

  /** What the gate is asked (its input the count when one was made, else the bound); settled with the decision. */
  gateRequest: GateRequest | undefined = undefined;
  /** The gate's decision once it let the request through: what `finish` settles. */
  decision: Allowed | undefined = undefined;
  /** The client asked for a stream (set by the route before fitAndAdmit): it holds a stream place (held-streams.ts) until `finish`. */
  stream = false;
  /** Whether it holds a stream place, and the client address it is counted under (undefined: not per address). */
  private streamHeld = false;
  private streamAddress: string | undefined = undefined;
  private slot = false;
  private finished = false;

  constructor(
    readonly ctx: GatewayContext,
    readonly res: Res,
    /** The metrics' route name. */
    readonly route: string,
    readonly protocol: Protocol<E>,
  ) {}

  /** Takes an in-flight slot for the request (released by `finish`); false when every slot is taken. */
  takeSlot(): boolean {
    if (!this.ctx.admission.tryEnter()) return false;
    this.slot = true;
    return true;
  }

  /**
   * Takes a stream place for the account and the client's address (call while the uWS response is
   * valid: in the body's callback); the refusal when a bound is reached. `finish` gives it back.
   */
  /** The address the per-address limits count this request under (lib/client-address.ts). */
  clientAddress(): string {
    if (this.ctx.trustProxy) {
      const last = lastForwardedFor(this.forwardedFor);
      if (last !== '') return last;
    }
    return peerAddress(this.res);
  }

  holdStream(): HeldRefusal | undefined {
    if (this.res.aborted) return undefined; // the request finishes as client-closed on its way
    const streams = this.ctx.streams;
    // The address costs a string from uWS: read only while the process holds many streams (lib/held-limits.ts).
    const address = streams.needsAddress ? this.clientAddress() : undefined;
    const refusal = streams.take(this.accountId, address);
    if (refusal === undefined) {
      this.streamHeld = true;
      this.streamAddress = address;
    }
    return refusal;
  }

  /** Tokens the gate reserved: charged whole when the client abandons a non-stream request. */
  get reservedTokens(): number {
    return this.decision?.reservedTokens ?? this.gateRequest?.estimatedTokens ?? 0;
  }

  /** Answers `e` in the protocol's shape and finishes with its status; nothing once finished. */
  fail(e: E, usage?: GateUsage): void {
    if (this.finished) return;
    this.protocol.sendError(this.res, e);
    this.finish(e.status, usage);
  }

  /**
   * Ends the request's bookkeeping, once (later calls do nothing): the slot, the model's token
   * series (`usage`, when not ZERO_USAGE), the metrics (`status`: what the client got, or
   * CLIENT_CLOSED), and the gate's settlement with `usage` when it reserved something
   * (undefined: charge the reservation, gates/gate.ts).
   */
  finish(status: number, usage: GateUsage | undefined): void {
    if (this.finished) return;
    this.finished = true;
    const ctx = this.ctx;
    if (this.slot) {
      this.slot = false;
      ctx.admission.leave();
    }
    if (this.streamHeld) {
      this.streamHeld = false;
      ctx.streams.give(this.accountId, this.streamAddress);
    }
    const model = this.model;
    if (model !== undefined && usage !== undefined && usage !== ZERO_USAGE) model.series.tokens(usage.inputTokens, usage.outputTokens);
    ctx.metrics.request(this.route, model === undefined ? NO_MODEL : model.name, status);
    const decision = this.decision;
    if (decision === undefined) return;
    try {
      ctx.gate.settle(this.gateRequest!, decision, usage);
    } catch (err) {
      ctx.logger.error('gate settle failed', { err, route: this.route });
    }
  }
}
