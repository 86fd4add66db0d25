// Small helpers shared by our uWebSockets.js servers: abort tracking, body reading with a size
// limit, JSON replies, listening and graceful close.
//
// uWS rules these helpers encode: a response must register onAborted before any asynchronous
// step; after an abort the response must not be touched; writes made outside the synchronous
// part of a handler must happen inside res.cork; body chunks are only valid during onData.
import type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket } from './uws.js';
import { uws } from './uws.js';
import { allocUnsafe, set } from './bytes.js';
import { createServer } from 'node:net';
import { BodyLengthError, BodyTooLargeError, ListenError, type RcError } from './errors.js';

/**
 * A response with its abort state. `onAbort` is one optional listener (for example: abort the
 * upstream). `closeAfter`: the connection is closed once the reply is written (its framing cannot
 * be trusted any more).
 */
export type Res = HttpResponse & { aborted: boolean; onAbort?: (() => void) | undefined; closeAfter?: boolean };

/** Registers the abort handler; call first, synchronously, in every handler that may reply later. */
export function track(res: HttpResponse): Res {
  const r = res as Res;
  r.aborted = false;
  r.onAbort = undefined;
  res.onAborted(() => {
    r.aborted = true;
    const fn = r.onAbort;
    r.onAbort = undefined;
    if (fn) fn();
  });
  return r;
}

const STATUS_TEXT: Record<number, string> = {
  200: '200 OK',
  201: '201 Created',
  202: '202 Accepted',
  204: '204 No Content',
  301: '301 Moved Permanently',
  302: '302 Found',
  304: '304 Not Modified',
  400: '400 Bad Request',
  401: '401 Unauthorized',
  403: '403 Forbidden',
  404: '404 Not Found',
  405: '405 Method Not Allowed',
  408: '408 Request Timeout',
  409: '409 Conflict',
  413: '413 Payload Too Large',
  415: '415 Unsupported Media Type',
  422: '422 Unprocessable Entity',
  429: '429 Too Many Requests',
  431: '431 Request Header Fields Too Large',
  500: '500 Internal Server Error',
  502: '502 Bad Gateway',
  503: '503 Service Unavailable',
  504: '504 Gateway Timeout',
  529: '529 Site Overloaded',
};

// uWS copies a string argument through a UTF-8 conversion (about 0.5 µs of V8 calls per
// argument) and a Buffer argument as it is: what every response writes, status lines and
// header names, is made into Buffers once.
const STATUS_LINES = new Map<number, Buffer>();

/** The status line uWS wants ("404 Not Found"; unknown codes get a bare number), as bytes made once per status. */
export function statusLine(status: number): Buffer {
  let line = STATUS_LINES.get(status);
  if (line === undefined) {
    line = Buffer.from(STATUS_TEXT[status] ?? String(status), 'latin1');
    if (STATUS_LINES.size < 1000) STATUS_LINES.set(status, line);
  }
  return line;
}

const HEADER_NAMES = new Map<string, Buffer>();

/**
 * A header name of our own (a constant of the code: `content-type`, the gate's `x-ratelimit-*`),
 * as bytes made once. Names from outside (a backend's headers) are Buffers already.
 */
export function headerName(name: string): Buffer {
  let bytes = HEADER_NAMES.get(name);
  if (bytes === undefined) {
    bytes = Buffer.from(name, 'latin1');
    if (HEADER_NAMES.size < 256) HEADER_NAMES.set(name, bytes);
  }
  return bytes;
}

const CONTENT_TYPE = headerName('content-type');
const JSON_TYPE = Buffer.from('application/json');

export type Headers = Record<string, string> | undefined;

/**
 * Writes a whole response (status, headers, body) in one corked write. Does nothing when the
 * client has gone. Safe to call from both synchronous and asynchronous code.
 */
export function send(res: Res, status: number, body: string | Uint8Array, contentType: string, headers?: Headers): void {
  if (res.aborted) return;
  res.aborted = true; // a response ends once; later calls are no-ops
  res.cork(() => {
    res.writeStatus(statusLine(status));
    res.writeHeader(CONTENT_TYPE, contentType === 'application/json' ? JSON_TYPE : contentType);
    if (headers) for (const k in headers) res.writeHeader(headerName(k), headers[k]!);
    res.end(body, res.closeAfter === true);
  });
}

/** Replies with `body` as JSON (`body` may already be a JSON string). */
export function sendJson(res: Res, status: number, body: unknown, headers?: Headers): void {
  send(res, status, typeof body === 'string' ? body : JSON.stringify(body), 'application/json', headers);
}

/** declaredLength() of a request carrying several Content-Length headers that differ. */
export const CONFLICTING_LENGTH = 'conflicting';

const CONTENT_LENGTH = headerName('content-length');

/**
 * The request's Content-Length header ('' when absent), or CONFLICTING_LENGTH when it carries
 * several that differ: uWS frames the body by the first one and would read the rest of the body
 * as another request (request smuggling behind a proxy that framed by another). Read it
 * synchronously in the handler; the headers are walked only when a Content-Length is present.
 * The walk is a call from uWS into JS with two new strings per header, about 1.3k instructions
 * each (20k on an SDK's request of 15 headers; bench/README.md): uWS has no cheaper way to see a
 * second Content-Length.
 */
export function declaredLength(req: HttpRequest): string {
  const first = req.getHeader(CONTENT_LENGTH);
  if (first === '') return first;
  let conflict = false;
  req.forEach((name, value) => {
    if (name === 'content-length' && value !== first) conflict = true;
  });
  return conflict ? CONFLICTING_LENGTH : first;
}

/** 1 to 16 ASCII digits (a Content-Length we take). */
function isDecimal(s: string): boolean {
  const n = s.length;
  if (n === 0 || n > 16) return false;
  for (let i = 0; i < n; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

/**
 * Largest buffer allocated for a body before its bytes arrive. A declared Content-Length is a
 * claim, not bytes: allocating it whole let 192 clients that declared 8 MiB and sent nothing
 * more hold 1.5 GiB (issue 44). Up to this size the body is still copied once into a buffer of
 * its declared size (most API bodies); beyond, the buffer doubles as bytes arrive.
 */
export const UPFRONT_BODY_BYTES = 256 * 1024;

/**
 * Sees each chunk of a body as it arrives (lib/upload-limits.ts): false stops the reading, the
 * watcher having answered the request itself.
 */
export type BodyWatch = (bytes: number, last: boolean) => boolean;

/**
 * Reads the whole request body into one Buffer, refusing more than `limit` bytes. `declaredLength`
 * is the Content-Length header (read it from req before calling: req is not valid afterwards).
 * `onError` gets a BodyTooLargeError (413) or a 400 for a body shorter or longer than declared,
 * for conflicting or malformed Content-Length headers (declaredLength(); the connection is then
 * closed after the reply). `watch`, when given, sees every chunk first and may stop the reading.
 */
export function readBody(
  res: Res,
  declaredLength: string,
  limit: number,
  onBody: (body: Buffer) => void,
  onError: (err: RcError) => void,
  watch?: BodyWatch,
): void {
  if (declaredLength !== '' && !isDecimal(declaredLength)) {
    // The framing cannot be trusted: reply 400 and close. The reply is deferred past this
    // handler on purpose: uWS parses the rest of a TCP read as the next request as soon as a
    // handler has ended its response, but aborts a connection that sends more while a response is
    // pending; so a request smuggled in the body is never served.
    res.closeAfter = true;
    const conflicting = declaredLength === CONFLICTING_LENGTH;
    const err = new BodyLengthError(conflicting ? 'Conflicting Content-Length headers' : 'Malformed Content-Length header');
    setImmediate(() => onError(err));
    return;
  }
  const declared = declaredLength === '' ? -1 : Number(declaredLength);
  if (declared > limit) {
    onError(new BodyTooLargeError(limit));
    return;
  }
  if (declared >= 0 && Number.isInteger(declared)) {
    let buf = allocUnsafe(Math.min(declared, UPFRONT_BODY_BYTES));
    let offset = 0;
    let failed = false;
    res.onData((chunk, isLast) => {
      if (failed) return;
      const n = chunk.byteLength;
      if (offset + n > declared) {
        failed = true;
        onError(new BodyLengthError('Request body is longer than its Content-Length'));
        return;
      }
      if (watch && !watch(n, isLast)) {
        failed = true;
        return;
      }
      if (offset + n > buf.length) {
        const grown = Buffer.allocUnsafe(Math.min(declared, Math.max(buf.length * 2, offset + n)));
        buf.copy(grown, 0, 0, offset);
        buf = grown;
      }
      set(buf, new Uint8Array(chunk), offset);
      offset += n;
      if (isLast) {
        if (offset !== declared) onError(new BodyLengthError('Request body is shorter than its Content-Length'));
        else onBody(buf);
      }
    });
    return;
  }
  // Chunked or unknown length: collect copies and concatenate at the end.
  const parts: Buffer[] = [];
  let size = 0;
  let failed = false;
  res.onData((chunk, isLast) => {
    if (failed) return;
    size += chunk.byteLength;
    if (size > limit) {
      failed = true;
      onError(new BodyTooLargeError(limit));
      return;
    }
    if (watch && !watch(chunk.byteLength, isLast)) {
      failed = true;
      return;
    }
    parts.push(Buffer.from(chunk.slice(0)));
    if (isLast) onBody(parts.length === 1 ? parts[0]! : Buffer.concat(parts, size));
  });
}

/**
 * Deepest nesting of arrays and objects a request body may have. JSON.parse takes any depth, but
 * recursive code over the parsed value (JSON.stringify, schema walkers, canonical JSON) overflows
 * the stack at a few thousand levels: a RangeError thrown in a uWS callback ends the process.
 * Real requests nest a few dozen levels.
 */
export const MAX_JSON_DEPTH = 256;

/** True when `value` nests arrays or objects deeper than `max` levels. Iterative: it cannot overflow itself. */
export function nestsDeeperThan(value: unknown, max: number = MAX_JSON_DEPTH): boolean {
  if (value === null || typeof value !== 'object') return false;
  const stack: unknown[] = [value];
  const depths: number[] = [1];
  while (stack.length > 0) {
    const v = stack.pop() as object;
    const depth = depths.pop()!;
    if (depth > max) return true;
    const children = Array.isArray(v) ? v : Object.values(v);
    for (const c of children) {
      if (c !== null && typeof c === 'object') {
        stack.push(c);
        depths.push(depth + 1);
      }
    }
  }
  return false;
}

/** Parses a JSON body that must be an object (nesting at most MAX_JSON_DEPTH); returns undefined when it is not. */
export function parseJsonObject(body: Buffer): Record<string, unknown> | undefined {
  try {
    const v: unknown = JSON.parse(body.toString('utf8'));
    return v !== null && typeof v === 'object' && !Array.isArray(v) && !nestsDeeperThan(v) ? (v as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

export interface Server {
  readonly host: string;
  readonly port: number;
  /** http://host:port */
  readonly url: string;
  /**
   * Stops accepting connections, waits up to `graceMs` for `idle()` (when given) to report no
   * work in flight, then closes every remaining connection.
   */
  close(graceMs?: number): Promise<void>;
}

export interface ListenOptions {
  /**
   * Share the port with other processes that ask for the same (SO_REUSEPORT: the kernel spreads
   * connections between them). Off by default: uWS would otherwise share silently, so a second
   * platform on the same port, or an old process left running by an upgrade, would answer part
   * of the traffic. Only `rc gateway` replicas behind one port ask for it (RC_GATEWAY_REUSE_PORT).
   */
  reusePort?: boolean;
}

/** uWS's listen option for a port of this process alone (no SO_REUSEPORT). */
const LIBUS_LISTEN_EXCLUSIVE_PORT = 1;

/**
 * Listens on host:port (port 0: an ephemeral port) and resolves with a Server handle. The port is
 * this process's alone unless `options.reusePort`: a port in use is a ListenError, with the
 * operating system's reason.
 */
export function listen(app: TemplatedApp, host: string, port: number, idle?: () => boolean, options: ListenOptions = {}): Promise<Server> {
  const { us_listen_socket_close, us_socket_local_port } = uws();
  return new Promise((resolve, reject) => {
    // uWS's types name (port, options, cb) only; the native binding also takes (host, port, options, cb).
    const listenWith = app.listen as unknown as (h: string, p: number, o: number, cb: (s: us_listen_socket | false) => void) => void;
    listenWith.call(app, host, port, options.reusePort ? 0 : LIBUS_LISTEN_EXCLUSIVE_PORT, (socket: us_listen_socket | false) => {
      if (!socket) {
        // uWS says only "no": ask the kernel why, with a socket of the same kind.
        void bindFailure(host, port).then((reason) => reject(new ListenError(host, port, reason)));
        return;
      }
      const actual = us_socket_local_port(socket as never);
      let closed: Promise<void> | undefined;
      const urlHost = host.includes(':') ? `[${host}]` : host === '0.0.0.0' ? '127.0.0.1' : host;
      resolve({
        host,
        port: actual,
        url: `http://${urlHost}:${actual}`,
        close(graceMs = 0) {
          closed ??= (async () => {
            us_listen_socket_close(socket);
            const deadline = Date.now() + graceMs;
            while (idle && !idle() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
            (app as TemplatedApp & { close(): void }).close();
          })();
          return closed;
        },
      });
    });
  });
}

/** The errno (EADDRINUSE, EACCES, ...) of binding host:port now, or undefined if it binds. */
function bindFailure(host: string, port: number): Promise<string | undefined> {
  return new Promise((resolve) => {
    const probe = createServer();
    probe.once('error', (err: NodeJS.ErrnoException) => resolve(err.code));
    probe.listen({ host, port, exclusive: true }, () => probe.close(() => resolve(undefined)));
  });
}
