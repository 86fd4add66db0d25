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

/**
 * Every internal error code (`RcError.code`) raised in lib/, with its class and HTTP status, in
 * one place (as fastify keeps its FST_ERR codes in lib/errors.js). lib/ has no public codes: a
 * part that answers a client maps these to its own (gateway/errors.ts `fromBodyError`). The table
 * "Error codes" of lib/README.md lists the same; test/lib/error-codes.test.ts keeps them in step.
 */
export const LIB_ERROR_CODES = {
  RC_ERR_CONFIG: { class: 'ConfigError', status: 500 },
  RC_ERR_UWS_NATIVE_UNAVAILABLE: { class: 'UwsNativeUnavailableError', status: 500 },
  RC_ERR_BODY_TOO_LARGE: { class: 'BodyTooLargeError', status: 413 },
  RC_ERR_BODY_LENGTH: { class: 'BodyLengthError', status: 400 },
  RC_ERR_INVALID_JSON: { class: 'InvalidJsonError', status: 400 },
  RC_ERR_LISTEN: { class: 'ListenError', status: 500 },
  RC_ERR_USAGE: { class: 'UsageError', status: 400 },
  RC_ERR_TUNNEL_SECRET: { class: 'TunnelSecretError', status: 500 },
  // The backend client's failures (lib/relay/http-connection.ts PoolError, one per PoolFailure).
  // The status is what a verbatim relay answers for it (lib/relay/forward.ts): 504 for a timeout.
  RC_ERR_POOL_CONNECT: { class: 'PoolError', status: 502 },
  RC_ERR_POOL_HEADERS_TIMEOUT: { class: 'PoolError', status: 504 },
  RC_ERR_POOL_BODY_TIMEOUT: { class: 'PoolError', status: 504 },
  RC_ERR_POOL_REQUEST_TIMEOUT: { class: 'PoolError', status: 504 },
  RC_ERR_POOL_CONNECTION_CLOSED: { class: 'PoolError', status: 502 },
  RC_ERR_POOL_PROTOCOL: { class: 'PoolError', status: 502 },
  RC_ERR_POOL_ABORTED: { class: 'PoolError', status: 502 },
  RC_ERR_POOL_CLOSED: { class: 'PoolError', status: 502 },
} as const satisfies Record<string, { class: string; status: number }>;

export type LibErrorCode = keyof typeof LIB_ERROR_CODES;

/** An error of lib's table: its status is the table's. */
export abstract class LibError extends RcError {
  constructor(code: LibErrorCode, message: string, options?: { cause?: unknown }) {
    super(code, message, LIB_ERROR_CODES[code].status, options);
  }
}

/** A setting has a bad value; start-up stops with a message naming it. */
export class ConfigError extends LibError {
  constructor(message: string) {
    super('RC_ERR_CONFIG', message);
  }
}

/** The native uWebSockets.js binary did not load; we refuse the slow pure-JS fallback. */
export class UwsNativeUnavailableError extends LibError {
  constructor(message: string, cause?: unknown) {
    super('RC_ERR_UWS_NATIVE_UNAVAILABLE', message, { cause });
  }
}

/** A request body exceeded its size limit. */
export class BodyTooLargeError extends LibError {
  constructor(limit: number) {
    super('RC_ERR_BODY_TOO_LARGE', `Request body exceeds ${limit} bytes`);
  }
}

/**
 * A request body's framing cannot be trusted: conflicting or malformed Content-Length headers,
 * or a body shorter or longer than declared (lib/http.ts readBody).
 */
export class BodyLengthError extends LibError {
  constructor(message: string) {
    super('RC_ERR_BODY_LENGTH', message);
  }
}

/** A request body is not valid JSON, or not the JSON object a route expects. */
export class InvalidJsonError extends LibError {
  constructor(message = 'Request body is not valid JSON') {
    super('RC_ERR_INVALID_JSON', message);
  }
}

/**
 * A server could not bind its port: most often another process listens there (every server of
 * ours binds exclusively, lib/http.ts `listen`). `reason` is the operating system's word for it
 * when known (EADDRINUSE, EACCES, EADDRNOTAVAIL); `setting` names the setting that chose the port.
 */
export class ListenError extends LibError {
  readonly host: string;
  readonly port: number;
  readonly reason: string | undefined;
  readonly setting: string | undefined;
  constructor(host: string, port: number, reason?: string, setting?: string) {
    super('RC_ERR_LISTEN', listenMessage(host, port, reason, setting));
    this.host = host;
    this.port = port;
    this.reason = reason;
    this.setting = setting;
  }

  /** The same failure, its message naming the setting that chose the port (for start-up). */
  naming(setting: string): ListenError {
    return new ListenError(this.host, this.port, this.reason, setting);
  }
}

function listenMessage(host: string, port: number, reason: string | undefined, setting: string | undefined): string {
  const why =
    reason === 'EADDRINUSE'
      ? 'the port is in use by another process'
      : reason === 'EACCES'
        ? 'permission denied'
        : reason === 'EADDRNOTAVAIL'
          ? "the address is not one of this machine's"
          : reason
            ? reason
            : 'the port may be in use by another process';
  return `Could not listen on ${host}:${port}: ${why}${setting ? ` (set ${setting} to another port)` : ''}`;
}

/** Rethrows a ListenError with its message naming `setting`; other errors pass unchanged. */
export function namingSetting(setting: string): (err: unknown) => never {
  return (err) => {
    throw err instanceof ListenError && !err.setting ? err.naming(setting) : err;
  };
}
