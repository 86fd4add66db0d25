// The messages protocol's error shape (request/protocol.ts): every error the messages routes
// answer, in the protocol's body `{"type":"error","error":{"type","message"}}`, from the front
// door to a refusal of admission. The request's lifecycle counts them.
import { sendJson, type Res } from '../../lib/http.js';
import type { RefusalReply } from '../admission/refusal.js';
import type { AuthFailure } from '../auth/keys.js';
import { UPSTREAM_UNAVAILABLE_MESSAGE } from '../errors.js';
import { RATE_LIMIT_MESSAGE } from '../gates/codes.js';
import { UpstreamError } from '../backends/upstreams.js';
import type { Protocol } from '../request/protocol.js';
import { errorBody, MessagesError, toMessagesError } from './errors.js';

/** Answers an error in the protocol's shape: the messages protocol's `sendError`. */
export function sendError(res: Res, e: MessagesError): void {
  sendJson(res, e.status, errorBody(e.type, e.message), e.headers);
}

/** No backend answered (unreachable, reset, timed out): SPEC's 502 `Model gateway is unavailable`, the chat routes' message. */
export function upstreamUnavailable(): MessagesError {
  return new MessagesError(502, UPSTREAM_UNAVAILABLE_MESSAGE);
}

/** A failed backend exchange, as the client sees it. */
export function upstreamFailure(err: unknown): MessagesError {
  if (err instanceof UpstreamError) return upstreamUnavailable();
  return toMessagesError(err);
}

export const poolExhausted = (): MessagesError => new MessagesError(503, 'Model gateway connection pool exhausted', { 'retry-after': '5' });

/** Answers a refusal of admission in the messages shape. */
export const refuseMessages: RefusalReply = (res, r) => {
  const e =
    r.kind === 'pool_exhausted'
      ? poolExhausted()
      : r.kind === 'gate_unavailable'
        ? new MessagesError(503, UPSTREAM_UNAVAILABLE_MESSAGE, { 'retry-after': '5' })
        : new MessagesError(429, r.message ?? RATE_LIMIT_MESSAGE, { ...r.headers, 'retry-after': String(Math.max(1, Math.ceil(r.retryAfterSec))) });
  sendError(res, e);
};

const NO_KEY = new MessagesError(401, 'Unauthorized: No API key provided.');
const BAD_KEY = new MessagesError(401, 'Invalid bearer token');
const BAD_SESSION = new MessagesError(401, 'Invalid or expired session, or missing x-csrf-token');
const UNVERIFIED = new MessagesError(403, 'Your account is under review; shared model access needs a verified account');

function authError(f: AuthFailure): MessagesError {
  return f.reason === 'missing' ? NO_KEY : f.reason === 'session' ? BAD_SESSION : f.reason === 'unverified' ? UNVERIFIED : BAD_KEY;
}

/** /v1/messages and count_tokens. */
export const MESSAGES_PROTOCOL: Protocol<MessagesError> = {
  sendError,
  refuse: refuseMessages,
  auth: authError,
  body: (err) => new MessagesError(err.status, err.message),
  invalidJson: new MessagesError(400, 'Request body is not valid JSON'),
  notAnObject: new MessagesError(400, 'Request body must be a JSON object'),
  modelMissing: new MessagesError(400, 'model: required, a model name from the catalog'),
  unknownModel: (name) => new MessagesError(400, `Requested model ${name.length > 256 ? `${name.slice(0, 256)}...` : name} not supported`),
  tooLong: (message) => new MessagesError(400, message),
};
