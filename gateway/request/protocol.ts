// How a protocol answers on the shared request path (chat completions and /v1/responses in the
// chat shape, /v1/messages and count_tokens in the messages shape): its error body, written by
// its `sendError` (one per protocol, all with the signature `(res, e)`), and the errors the
// front door, admission and fitting answer, each made in the protocol's shape. The request's
// lifecycle (lifecycle.ts) answers through it and counts the status; nothing else does.
import type { RcError } from '../../lib/errors.js';
import type { Res } from '../../lib/http.js';
import type { RefusalReply } from '../admission/refusal.js';
import type { AuthFailure } from '../auth/keys.js';

/** What every protocol's error carries: the HTTP status the client gets (the metrics count it). */
export interface ProtocolError {
  readonly status: number;
}

/** Writes an error in a protocol's body, with its status and headers: the common signature of every `sendError`. */
export type SendError<E extends ProtocolError> = (res: Res, e: E) => void;

export interface Protocol<E extends ProtocolError> {
  readonly sendError: SendError<E>;
  /** A refusal of admission (503 pool exhausted or gate unavailable, 429 rate limited). */
  readonly refuse: RefusalReply;
  /** No usable credential: 401 (missing or bad key, bad session), 403 (account under review). */
  auth(f: AuthFailure): E;
  /** The body could not be read: 413 over the limit, 400 for a bad length. */
  body(err: RcError): E;
  readonly invalidJson: E;
  readonly notAnObject: E;
  /** No `model`, or not a non-empty string. */
  readonly modelMissing: E;
  /** A model name the catalog does not have. */
  unknownModel(name: string): E;
  /** A prompt that alone fills the model's context (400; context-fit.ts promptTooLongMessage). */
  tooLong(message: string): E;
}
