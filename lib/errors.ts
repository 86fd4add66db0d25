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

/**
 * A server could not bind its port: most often another process listens there (every server of
 * ours binds exclusively, lib/http.ts `listen`). `reason` is the operating system's word for it
 * when known (EADDRINUSE, EACCES, EADDRNOTAVAIL); `setting` names the setting that chose the port.
 */
export class ListenError extends RcError {
  readonly host: string;
  readonly port: number;
  readonly reason: string | undefined;
  readonly setting: string | undefined;
  constructor(host: string, port: number, reason?: string, setting?: string) {
    super('RC_ERR_LISTEN', listenMessage(host, port, reason, setting), 500);
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
