// The messages protocol's error mapper: error replies on every messages route, in the
// protocol's error body, counted in the metrics.
import { sendJson, type Res } from '../../lib/http.js';
import type { RefusalReply } from '../admission/admit.js';
import type { GatewayContext } from '../context.js';
import { RATE_LIMIT_MESSAGE } from '../gates/codes.js';
import { UpstreamError } from '../backends/upstreams.js';
import { errorBody, MessagesError, toMessagesError } from './errors.js';

/** Answers an error in the protocol's shape and counts it. */
export function sendError(res: Res, ctx: GatewayContext, route: string, model: string, e: MessagesError): void {
  ctx.metrics.request(route, model, e.status);
  sendJson(res, e.status, errorBody(e.type, e.message), e.headers);
}

/** A failed backend exchange, as the client sees it (SPEC: 502 `Model gateway is unavailable`). */
export function upstreamFailure(err: unknown): MessagesError {
  if (err instanceof UpstreamError) return new MessagesError(502, 'Model gateway is unavailable');
  return toMessagesError(err);
}

export const poolExhausted = (): MessagesError => new MessagesError(503, 'Model gateway connection pool exhausted', { 'retry-after': '5' });

/** Answers a refusal of admission in the messages shape. */
export const refuseMessages: RefusalReply = (res, r) => {
  const e =
    r.kind === 'pool_exhausted'
      ? poolExhausted()
      : r.kind === 'gate_unavailable'
        ? new MessagesError(503, 'Model gateway is unavailable', { 'retry-after': '5' })
        : new MessagesError(429, RATE_LIMIT_MESSAGE, { ...r.headers, 'retry-after': String(Math.max(1, Math.ceil(r.retryAfterSec))) });
  sendJson(res, e.status, errorBody(e.type, e.message), e.headers);
};
