// A backend's error response, read in whatever shape the backend wrote it, so every protocol can
// answer it in its own shape with the backend's status and message (SPEC.md "Errors": errors the
// model raises pass through with the backend's own status and message). The shapes met:
//
// - vLLM's flat ErrorResponse: `{"object": "error", "message", "type", "param", "code"}` (an
//   OpenAI client reads `body.error` and finds nothing: Qwen Code shows "400 status code (no
//   body)", opencode takes it for a context overflow);
// - OpenAI's nested shape `{"error": {"message", "type", "param", "code"}}` (also newer vLLM),
//   or `{"error": "text"}`;
// - FastAPI's `{"detail": "text" | [...]}` (a backend's framework errors, 422 validation);
// - anything else: plain text, HTML from a proxy, an empty body.
//
// Only error statuses of a response nothing of which was relayed yet are read here: successful
// bodies never come near this module.

/** Largest error body read; the rest is dropped (a message is never that long). */
export const MAX_ERROR_BODY_BYTES = 64 * 1024;
/** Text that is not a JSON error is cut to this many characters. */
const MAX_TEXT_MESSAGE = 1000;

/** The fields of a backend's error, with `nested` when the body already had the OpenAI shape. */
export interface BackendError {
  message: string;
  /** The backend's own type, when it gave a non-empty string. */
  type: string | undefined;
  param: unknown;
  code: unknown;
  /** The body's `error` object when it was one (its other fields are kept). */
  nested: Record<string, unknown> | undefined;
  /** The parsed body when it was a JSON object (its other top-level fields are kept). */
  object: Record<string, unknown> | undefined;
}

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v !== '';

/** The text of a body that says nothing in JSON, trimmed and cut. */
function textMessage(text: string, status: number): string {
  const t = text.trim();
  if (t === '') return `The model backend answered HTTP ${status} without a message`;
  return t.length > MAX_TEXT_MESSAGE ? `${t.slice(0, MAX_TEXT_MESSAGE)}...` : t;
}

/** Reads a backend's error body (any shape above). */
export function readBackendError(status: number, body: string): BackendError {
  let v: unknown;
  try {
    v = JSON.parse(body);
  } catch {
    v = undefined;
  }
  if (!isRecord(v)) return { message: textMessage(body, status), type: undefined, param: null, code: null, nested: undefined, object: undefined };
  const e = v.error;
  if (isRecord(e)) {
    const message = nonEmpty(e.message) ? e.message : nonEmpty(v.message) ? v.message : textMessage(body, status);
    return { message, type: nonEmpty(e.type) ? e.type : undefined, param: e.param ?? null, code: e.code ?? null, nested: e, object: v };
  }
  const type = nonEmpty(v.type) && v.type !== 'error' ? v.type : undefined;
  let message: string;
  if (nonEmpty(e))
    message = e; // {"error": "text"}
  else if (nonEmpty(v.message))
    message = v.message; // vLLM's flat shape
  else if (nonEmpty(v.detail))
    message = v.detail; // FastAPI
  else if (v.detail !== undefined)
    message = textMessage(JSON.stringify(v.detail), status); // FastAPI's validation list
  else message = textMessage(body, status);
  return { message, type, param: v.param ?? null, code: v.code ?? null, nested: undefined, object: v };
}

/** The chat/responses error type of a status, for a backend that gave none. */
export function chatTypeForStatus(status: number): string {
  switch (status) {
    case 401:
      return 'authentication_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 429:
      return 'rate_limit_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

/**
 * A backend's error body in the chat-completions (and Responses) shape, `{error: {message, type,
 * param, code}}`: the backend's message, type, param and code kept, missing ones filled (type
 * from the status). A body already in that shape with every field there is returned as it came.
 */
export function chatBackendErrorBody(status: number, raw: Buffer): Buffer | string {
  const text = raw.toString('utf8');
  const e = readBackendError(status, text);
  const n = e.nested;
  if (n && nonEmpty(n.message) && nonEmpty(n.type) && 'param' in n && 'code' in n) return raw;
  const error = { ...n, message: e.message, type: e.type ?? chatTypeForStatus(status), param: e.param, code: e.code };
  // The nested shape keeps its other top-level fields; the flat shape's fields moved into `error`.
  return JSON.stringify(n ? { ...e.object, error } : { error });
}
