// The seam between the gateway's request path and its gates (rate buckets, daily cap).
// The request path calls admit() once before forwarding and settle() exactly once when the
// response has ended (completed, cut short, failed, or aborted by the client).
// Implementations: gateway/gates/ (memory and Redis). `openGate` admits everything.

/** What the request path knows before forwarding. */
export interface GateRequest {
  accountId: number;
  /** Model name from the catalog (for per-model usage accounting). */
  model: string;
  /** Estimated input tokens (from the body) plus the output reservation (max_tokens or a default). */
  estimatedTokens: number;
  /**
   * The input part of `estimatedTokens`. When given, the gate also bounds the output: it reports
   * in `maxOutputTokens` how many tokens the account has left (daily cap and token bucket, after
   * this input), and refuses when nothing is left. Absent: only the estimate is checked.
   */
  inputTokens?: number | undefined;
  /**
   * The output part is a default (the request gave no max_tokens): the gate may reserve less,
   * down to what is left, instead of refusing.
   */
  defaultOutput?: boolean | undefined;
  /**
   * Set when `inputTokens` is an upper bound (body bytes, not a count) that the route can replace
   * by an exact count: if the bound would refuse the request on tokens or leave it fewer than
   * this many output tokens, the gate admits and consumes nothing and answers `recount` (count
   * the input, then ask again with the count). 0 or absent: decide on the input as given.
   */
  recountBelow?: number | undefined;
}

export type GateDecision =
  | {
      allowed: true;
      /** `x-ratelimit-*` headers to add to the response. */
      headers: Record<string, string>;
      /** Opaque state that settle() needs (what was reserved, where). */
      reservation: unknown;
      /**
       * When the request gave `inputTokens`: the most output tokens it may generate (what the
       * account has left in the daily cap and the token bucket after its input). The route
       * lowers max_tokens to it before forwarding.
       */
      maxOutputTokens?: number | undefined;
      /** Tokens reserved (the estimate, possibly lowered to what was left); charged when an aborted request's usage is unknown. */
      reservedTokens?: number | undefined;
    }
  | {
      allowed: false;
      /** Whole seconds until the request would pass; at least 1. */
      retryAfterSec: number;
      /** Which gate refused, as the error `code` (see gateway/gates/README.md). */
      code: string;
      headers: Record<string, string>;
      /**
       * Not a refusal: the input bound bit (see `GateRequest.recountBelow`) and nothing was
       * reserved. Count the input and ask again; `code` and `retryAfterSec` are then meaningless.
       */
      recount?: true | undefined;
    };

/** Real usage, when known; undefined when the response ended before any usage was seen. */
export interface GateUsage {
  /** All prompt tokens, cached ones included (they count fully against the caps: gates/README.md). */
  inputTokens: number;
  outputTokens: number;
  /** Of inputTokens, those served from the backend's prefix cache (shown in model-usage). */
  cachedTokens?: number | undefined;
}

export interface RequestGate {
  admit(req: GateRequest): GateDecision | Promise<GateDecision>;
  /**
   * admit() through a callback, when the gate has it: `then(ctx, decision)` is called once, at once
   * when the decision is known at once, else when it comes (the request path passes its request as
   * `ctx` and a function made once: no promise, closure or microtask per request). Throws when
   * admit() would throw.
   */
  admitThen?<C>(req: GateRequest, ctx: C, then: (ctx: C, decision: GateDecision) => void): void;
  settle(req: GateRequest, decision: GateDecision & { allowed: true }, usage: GateUsage | undefined): void;
}

const NO_HEADERS: Record<string, string> = {};

/** A gate that admits everything (no limits configured). */
export const openGate: RequestGate = {
  admit: () => ({ allowed: true, headers: NO_HEADERS, reservation: undefined }),
  settle: () => {},
};
