// The chat shape of the shared request path (request/protocol.ts): what chat completions and
// /v1/responses answer in `{error: {message, type, param, code}}` (gateway/errors.ts), from the
// front door to a prompt too long for the context.
import type { AuthFailure } from '../auth/keys.js';
import { CHAT_CODES, ERRORS, fromBodyError, GatewayError, refuseChat, sendError, unknownModel, type CannedError } from '../errors.js';
import type { Protocol } from '../request/protocol.js';

/** A chat-shaped error: a fixed one, serialized once, or one made for the request. */
export type ChatError = GatewayError | CannedError;

function authError(f: AuthFailure): CannedError {
  switch (f.reason) {
    case 'missing':
      return ERRORS.missingKey;
    case 'session':
      return ERRORS.invalidSession;
    case 'unverified':
      return ERRORS.accountNotVerified;
    default:
      return ERRORS.invalidKey;
  }
}

/** The chat shape of a prompt that alone fills the context; `param` names the request's prompt field. */
export function promptTooLong(param: string): (message: string) => GatewayError {
  return (message) => new GatewayError(CHAT_CODES.contextLengthExceeded, message, 400, 'invalid_request_error', param);
}

/** Chat completions (and /v1/models for its credential). */
export const CHAT_PROTOCOL: Protocol<ChatError> = {
  sendError,
  refuse: refuseChat,
  auth: authError,
  body: fromBodyError,
  invalidJson: ERRORS.invalidJson,
  notAnObject: ERRORS.notAnObject,
  modelMissing: ERRORS.modelMissing,
  unknownModel,
  tooLong: promptTooLong('messages'),
};
