// The chat protocol's error mapper: gateway errors in the chat-completions shape SPEC.md gives
// for the gateway, `{ error: { message, type, param, code } }`, used by every chat route.
// Constant errors are serialized once.
import { RcError } from '../lib/errors.js';
import { sendJson, type Res } from '../lib/http.js';
import type { RefusalReply } from './admission/refusal.js';
import { RATE_LIMIT_MESSAGE } from './gates/codes.js';

/**
 * What a client sees when no backend answered, when a backend timed out and when the gate threw
 * (SPEC.md "Errors": 502 `Model gateway is unavailable`), on every protocol; the public codes
 * (`upstream_unavailable`, `upstream_timeout`, `gate_unavailable`) tell the cases apart.
 */
export const UPSTREAM_UNAVAILABLE_MESSAGE = 'Model gateway is unavailable';

/**
 * Every `code` the gateway itself puts in a chat-shaped error body, by name. Stable: clients
 * branch on them. The table "Error codes (chat routes)" of gateway/README.md lists the same
 * values (with the gates' codes, gateway/gates/codes.ts); test/gateway/error-codes.test.ts keeps
 * them in step.
 */
export const CHAT_CODES = {
  missingKey: 'missing_api_key',
  invalidKey: 'invalid_api_key',
  invalidSession: 'invalid_session',
  invalidJson: 'invalid_json',
  invalidModel: 'invalid_model',
  modelNotFound: 'model_not_found',
  invalidBody: 'invalid_body',
  notFound: 'not_found',
  methodNotAllowed: 'method_not_allowed',
  bodyTooLarge: 'body_too_large',
  upstreamUnavailable: 'upstream_unavailable',
  upstreamTimeout: 'upstream_timeout',
  /** In the SSE error event of a stream whose backend broke off. */
  upstreamError: 'upstream_error',
  poolExhausted: 'pool_exhausted',
  /** Too many request bodies (or body bytes) still arriving for the client's address or account (lib/upload-limits.ts). */
  uploadLimit: 'upload_limit_exceeded',
  /** Too many streams open for the client's account or address (request/held-streams.ts). */
  streamLimit: 'stream_limit_exceeded',
  gateUnavailable: 'gate_unavailable',
  /** An account under review whose shared model access is off (RC_MODEL_UNVERIFIED_DAILY_TOKENS=0). */
  accountNotVerified: 'account_not_verified',
  /** Chat completions with max_tokens fitting on: the prompt alone fills the context (chat-fit.ts). */
  contextLengthExceeded: 'context_length_exceeded',
  /** /v1/responses: a reasoning.effort tier the model cannot take (effort.ts). */
  invalidEffort: 'invalid_effort',
  /** /v1/responses: a tool of an unknown type, or malformed (responses/tools.ts). */
  invalidTool: 'invalid_tool',
  /** /v1/responses: previous_response_id or conversation (the gateway keeps no responses; responses/request.ts). */
  statefulNotSupported: 'unsupported_parameter',
} as const;

/**
 * Every internal error code (`RcError.code`) raised in gateway/ outside the gates, with its class.
 * The table "Internal error codes" of gateway/README.md lists the same; the gates' own are in
 * gateway/gates/codes.ts (GATE_ERROR_CODES).
 */
export const ERROR_CODES = {
  RC_ERR_UPSTREAM_UNAVAILABLE: 'UpstreamError',
  RC_ERR_UPSTREAM_TIMEOUT: 'UpstreamError',
  RC_ERR_UPSTREAM_IDLE: 'UpstreamError',
  RC_ERR_UPSTREAM_RESET: 'UpstreamError',
  RC_ERR_UPSTREAM_ABORTED: 'UpstreamError',
  RC_ERR_GATEWAY_REPLY: 'GatewayError',
  RC_ERR_KEYS_FILE: 'KeysFileError',
  RC_ERR_GATEWAY_SNAPSHOT: 'SnapshotError',
  RC_ERR_MESSAGES_INVALID_REQUEST_ERROR: 'MessagesError',
  RC_ERR_MESSAGES_AUTHENTICATION_ERROR: 'MessagesError',
  RC_ERR_MESSAGES_PERMISSION_ERROR: 'MessagesError',
  RC_ERR_MESSAGES_NOT_FOUND_ERROR: 'MessagesError',
  RC_ERR_MESSAGES_REQUEST_TOO_LARGE: 'MessagesError',
  RC_ERR_MESSAGES_RATE_LIMIT_ERROR: 'MessagesError',
  RC_ERR_MESSAGES_API_ERROR: 'MessagesError',
  RC_ERR_MESSAGES_OVERLOADED_ERROR: 'MessagesError',
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;

export type ChatErrorType = 'invalid_request_error' | 'authentication_error' | 'rate_limit_error' | 'not_found_error' | 'api_error';

/**
 * An error the gateway answers itself (not one passed through from a backend). `code` is the
 * internal one (logs), the same for every such answer; `publicCode` is what the body says and
 * clients branch on (CHAT_CODES, the gates' codes), kept apart as in every part's table.
 */
export class GatewayError extends RcError {
  constructor(
    readonly publicCode: string,
    message: string,
    status: number,
    readonly type: ChatErrorType,
    readonly param: string | null = null,
    /** Extra response headers (Retry-After on every 429 and 503). */
    readonly headers?: Record<string, string>,
  ) {
    super('RC_ERR_GATEWAY_REPLY' satisfies ErrorCode, message, status);
  }

  /** The JSON body, `{error: {message, type, param, code}}` with the public code. */
  body(): string {
    return chatErrorBody(this.message, this.type, this.param, this.publicCode);
  }
}

export function chatErrorBody(message: string, type: string, param: string | null, code: string | null): string {
  return JSON.stringify({ error: { message, type, param, code } });
}

/** A pre-serialized error: status, body and headers ready to write. */
export interface CannedError {
  readonly status: number;
  readonly code: string;
  readonly body: string;
  readonly headers: Record<string, string> | undefined;
}

function canned(
  status: number,
  message: string,
  type: ChatErrorType,
  code: string,
  param: string | null = null,
  headers?: Record<string, string>,
): CannedError {
  return Object.freeze({ status, code, body: chatErrorBody(message, type, param, code), headers });
}

/**
 * The gateway's fixed errors, one row each: status, message, type and public code (the table
 * "Error codes (chat routes)" of gateway/README.md). `code` values are stable.
 */
export const ERRORS = {
  missingKey: canned(401, 'Unauthorized: No API key provided.', 'authentication_error', CHAT_CODES.missingKey),
  invalidKey: canned(401, 'Invalid bearer token', 'authentication_error', CHAT_CODES.invalidKey),
  invalidSession: canned(401, 'Invalid or expired session, or missing x-csrf-token', 'authentication_error', CHAT_CODES.invalidSession),
  accountNotVerified: canned(
    403,
    'Your account is under review; shared model access needs a verified account',
    'invalid_request_error',
    CHAT_CODES.accountNotVerified,
  ),
  invalidJson: canned(400, 'Request body is not valid JSON', 'invalid_request_error', CHAT_CODES.invalidJson),
  notAnObject: canned(400, 'Request body must be a JSON object', 'invalid_request_error', CHAT_CODES.invalidJson),
  tooDeep: canned(400, 'Request body nests too deeply', 'invalid_request_error', CHAT_CODES.invalidJson),
  modelMissing: canned(400, 'model is required and must be a string', 'invalid_request_error', CHAT_CODES.invalidModel, 'model'),
  unavailable: canned(502, UPSTREAM_UNAVAILABLE_MESSAGE, 'api_error', CHAT_CODES.upstreamUnavailable),
  upstreamTimeout: canned(502, UPSTREAM_UNAVAILABLE_MESSAGE, 'api_error', CHAT_CODES.upstreamTimeout),
  poolExhausted: canned(503, 'Model gateway connection pool exhausted', 'api_error', CHAT_CODES.poolExhausted, null, { 'retry-after': '5' }),
  gateUnavailable: canned(503, UPSTREAM_UNAVAILABLE_MESSAGE, 'api_error', CHAT_CODES.gateUnavailable, null, { 'retry-after': '5' }),
  methodNotAllowed: canned(405, 'Method not allowed on this path', 'invalid_request_error', CHAT_CODES.methodNotAllowed),
} as const;

/** 400 for a model name absent from the catalog (the name is echoed, cut to 256 characters). */
export function unknownModel(name: string): GatewayError {
  const shown = name.length > 256 ? `${name.slice(0, 256)}...` : name;
  return new GatewayError(CHAT_CODES.modelNotFound, `Requested model ${shown} not supported`, 400, 'invalid_request_error', 'model');
}

/** 404 for a path the gateway does not serve (embeddings included). */
export function notFound(path: string): GatewayError {
  const shown = path.length > 256 ? `${path.slice(0, 256)}...` : path;
  return new GatewayError(CHAT_CODES.notFound, `Unknown path ${shown}: not served by the model gateway`, 404, 'not_found_error');
}

/** 429 when a gate (or a per-tenant bound, saying which in `message`) refuses; `code` names it. */
export function rateLimited(code: string, retryAfterSec: number, headers: Record<string, string>, message = RATE_LIMIT_MESSAGE): GatewayError {
  return new GatewayError(code, message, 429, 'rate_limit_error', null, {
    ...headers,
    'retry-after': String(Math.max(1, Math.ceil(retryAfterSec))),
  });
}

/** Maps an error from lib/http.ts readBody (413, bad length) to the chat shape. */
export function fromBodyError(err: RcError): GatewayError {
  if (err.status === 413) return new GatewayError(CHAT_CODES.bodyTooLarge, err.message, 413, 'invalid_request_error');
  return new GatewayError(CHAT_CODES.invalidBody, err.message, err.status >= 400 && err.status < 500 ? err.status : 400, 'invalid_request_error');
}

export function sendCanned(res: Res, e: CannedError): void {
  sendJson(res, e.status, e.body, e.headers);
}

/** Answers a chat-shaped error, fixed (serialized once) or made for the request: the chat protocol's `sendError` (request/protocol.ts). */
export function sendError(res: Res, e: GatewayError | CannedError): void {
  sendJson(res, e.status, e instanceof GatewayError ? e.body() : e.body, e.headers);
}

/** Answers a refusal of admission (gateway/admission/admit.ts) in the chat shape. */
export const refuseChat: RefusalReply = (res, r) => {
  if (r.kind === 'rate_limited') sendError(res, rateLimited(r.code, r.retryAfterSec, r.headers, r.message));
  else sendCanned(res, r.kind === 'pool_exhausted' ? ERRORS.poolExhausted : ERRORS.gateUnavailable);
};
