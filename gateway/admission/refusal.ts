// Why admission refused a request, and the seam through which each protocol answers it in its
// own error shape (`refuseChat` in gateway/errors.ts, `refuseMessages` in messages/reply.ts).
// A leaf module: the error mappers import it without reaching admission's own imports (the
// context, the catalog, the upstreams), which import the error mappers' module in turn.
import type { Res } from '../../lib/http.js';

/** Why a request was not forwarded. */
export type Refusal =
  /** Every in-flight slot is taken: 503 with Retry-After: 5. */
  | { readonly kind: 'pool_exhausted' }
  /**
   * A gate or a per-tenant bound refused: 429 with its code, Retry-After and headers; `message`
   * says which bound when it is not a gate (else the protocol's rate-limit message).
   */
  | {
      readonly kind: 'rate_limited';
      readonly code: string;
      readonly retryAfterSec: number;
      readonly headers: Record<string, string>;
      readonly message?: string;
    }
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
