// Errors on the messages routes. Their body is the protocol's own:
// `{"type":"error","error":{"type":...,"message":...}}`, with the HTTP status of the failure.
import { RcError } from '../../lib/errors.js';
import { readBackendError } from '../backends/backend-error.js';
import { overflowMessage, readContextOverflow } from '../backends/context-overflow.js';
import type { ErrorCode } from '../errors.js';

/** The protocol's error types. */
export type MessagesErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'overloaded_error';

/** The protocol error type for an HTTP status. */
export function errorTypeForStatus(status: number): MessagesErrorType {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 503:
    case 529:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/** The error code of each protocol error type (gateway/errors.ts ERROR_CODES). */
const MESSAGES_CODES: Record<MessagesErrorType, ErrorCode> = {
  invalid_request_error: 'RC_ERR_MESSAGES_INVALID_REQUEST_ERROR',
  authentication_error: 'RC_ERR_MESSAGES_AUTHENTICATION_ERROR',
  permission_error: 'RC_ERR_MESSAGES_PERMISSION_ERROR',
  not_found_error: 'RC_ERR_MESSAGES_NOT_FOUND_ERROR',
  request_too_large: 'RC_ERR_MESSAGES_REQUEST_TOO_LARGE',
  rate_limit_error: 'RC_ERR_MESSAGES_RATE_LIMIT_ERROR',
  api_error: 'RC_ERR_MESSAGES_API_ERROR',
  overloaded_error: 'RC_ERR_MESSAGES_OVERLOADED_ERROR',
};

/** A failure on a messages route, carrying its status and protocol error type. */
export class MessagesError extends RcError {
  readonly type: MessagesErrorType;
  /** Extra response headers (Retry-After on 429/503, rate-limit headers). */
  readonly headers: Record<string, string> | undefined;
  constructor(status: number, message: string, headers?: Record<string, string>, type: MessagesErrorType = errorTypeForStatus(status)) {
    super(MESSAGES_CODES[type], message, status);
    this.type = type;
    this.headers = headers;
  }
}

/** A 400 invalid_request_error. */
export function invalidRequest(message: string): MessagesError {
  return new MessagesError(400, message);
}

/** The JSON error body of the protocol. */
export function errorBody(type: MessagesErrorType, message: string): string {
  return `{"type":"error","error":{"type":${JSON.stringify(type)},"message":${JSON.stringify(message)}}}`;
}

/** Any thrown value as a MessagesError (RcError keeps its status; anything else is a 500 api_error). */
export function toMessagesError(err: unknown): MessagesError {
  if (err instanceof MessagesError) return err;
  if (err instanceof RcError) {
    const headers = (err as { headers?: unknown }).headers;
    return new MessagesError(err.status, err.message, isStringRecord(headers) ? headers : undefined);
  }
  return new MessagesError(500, 'Internal error in the model gateway');
}

function isStringRecord(v: unknown): v is Record<string, string> {
  return v !== null && typeof v === 'object';
}

/**
 * A backend's error response relayed with its own status and message (SPEC: errors the model
 * raises pass through). A 429 or 503 keeps the backend's Retry-After, or gets 1 second. A prompt
 * past the context, in any backend's words, is a 400 in the protocol's words
 * (backends/context-overflow.ts): `prompt is too long: N tokens > M maximum`.
 */
export function backendError(status: number, body: string, retryAfter: string | undefined): MessagesError {
  const s = status >= 400 && status <= 599 ? status : 502;
  const e = readBackendError(s, body);
  const overflow = s >= 400 && s < 500 ? readContextOverflow(e) : undefined;
  if (overflow) return new MessagesError(400, overflowMessage(overflow));
  const headers = s === 429 || s === 503 ? { 'retry-after': retryAfter && /^\d+$/.test(retryAfter) ? retryAfter : '1' } : undefined;
  return new MessagesError(s, e.message, headers);
}
