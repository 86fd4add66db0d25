// Typed errors with stable codes, in the spirit of undici's core/errors and fastify's FST_ERR codes.
// `code` never changes once released; `status` is the HTTP status a server maps it to.

export class RcError extends Error {
  readonly code: string;
  readonly status: number;
  constructor(code: string, message: string, status = 500, options?: { cause?: unknown }) {
    super(message, options);
    this.name = new.target.name;
    this.code = code;
    this.status = status;
  }
}

/** A setting has a bad value; start-up stops with a message naming it. */
export class ConfigError extends RcError {
  constructor(message: string) {
    super('RC_ERR_CONFIG', message, 500);
  }
}

/** The native uWebSockets.js binary did not load; we refuse the slow pure-JS fallback. */
export class UwsNativeUnavailableError extends RcError {
  constructor(message: string, cause?: unknown) {
    super('RC_ERR_UWS_NATIVE_UNAVAILABLE', message, 500, { cause });
  }
}

/** A request body exceeded its size limit. */
export class BodyTooLargeError extends RcError {
  constructor(limit: number) {
    super('RC_ERR_BODY_TOO_LARGE', `Request body exceeds ${limit} bytes`, 413);
  }
}

/** A request body is not valid JSON, or not the JSON object a route expects. */
export class InvalidJsonError extends RcError {
  constructor(message = 'Request body is not valid JSON') {
    super('RC_ERR_INVALID_JSON', message, 400);
  }
}

/** A server could not bind its port. */
export class ListenError extends RcError {
  constructor(host: string, port: number) {
    super('RC_ERR_LISTEN', `Could not listen on ${host}:${port}`, 500);
  }
}
