// One keep-alive connection of the backend client (lib/relay/http-pool.ts): it writes a request
// in one socket write and reads its response through the parser (lib/relay/http-parser.ts),
// handing body slices to the handler with backpressure; and the caller's request handle.
import { performance } from 'node:perf_hooks';
import * as net from 'node:net';
import * as tls from 'node:tls';
import {
  chunkSize,
  CHUNK_DATA,
  CHUNK_END,
  CHUNK_SIZE,
  CR,
  CRLF2,
  HEAD,
  IDLE,
  LENGTH,
  LF,
  emptyParsedHead,
  parseHead,
  TRAILERS,
  UNTIL_CLOSE,
  type HeaderLines,
  type ParsedHead,
} from './http-parser.js';
import { allocUnsafe, indexOf, set, subarray } from '../bytes.js';
import type { HttpPool } from './http-pool.js';
import { LibError, type LibErrorCode } from '../errors.js';

/**
 * A response head alone in its read, then this long until the next bytes, on a connection reused
 * at once: a delayed-ACK stall (measured 40-48 ms; http-pool.ts "Resting only where it helps").
 */
export const STALL_MIN_MS = 35;
export const STALL_MAX_MS = 250;

/** Bodies up to this size are copied behind the head and sent in one write; larger ones in two. */
const COPY_BODY_LIMIT = 64 * 1024;

/**
 * Plain TCP connections read into this one buffer (net's `onread`), shared by all of them: reads
 * run one at a time, and each is copied out (onRead) before the next. Node's default read path
 * allocates 64 KiB per read, shrinks it to the bytes read and wraps it in a new ArrayBuffer and
 * a stream event; a copy of the bytes read, from Buffer's pool, costs a fraction of that.
 */
const READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);
/**
 * READ_BUFFER's memory, for the copy of each read (onRead) through a plain Uint8Array view and
 * `set`: Buffer#copy costs about 600 instructions more a call under callgrind (its argument checks,
 * and the `buffer` and `byteOffset` getters it reads through V8's generic load IC), once per
 * backend read, which a paced stream does once per token.
 */
const READ_MEMORY = READ_BUFFER.buffer;
const READ_OFFSET = READ_BUFFER.byteOffset;

/**
 * Why an exchange failed. `connect`: nothing reached the backend (safe to send elsewhere).
 * `headers-timeout` / `body-timeout`: silent past the limit with the whole backend showing no sign
 * of life (a dead backend); `request-timeout`: the total limit, whatever the backend showed.
 */
export type PoolFailure = 'connect' | 'headers-timeout' | 'body-timeout' | 'request-timeout' | 'closed' | 'protocol' | 'aborted' | 'pool-closed';

/** The internal code of each failure (lib/errors.ts LIB_ERROR_CODES). */
const POOL_CODES: Record<PoolFailure, LibErrorCode> = {
  connect: 'RC_ERR_POOL_CONNECT',
  'headers-timeout': 'RC_ERR_POOL_HEADERS_TIMEOUT',
  'body-timeout': 'RC_ERR_POOL_BODY_TIMEOUT',
  'request-timeout': 'RC_ERR_POOL_REQUEST_TIMEOUT',
  closed: 'RC_ERR_POOL_CONNECTION_CLOSED',
  protocol: 'RC_ERR_POOL_PROTOCOL',
  aborted: 'RC_ERR_POOL_ABORTED',
  'pool-closed': 'RC_ERR_POOL_CLOSED',
};

/**
 * A failed exchange. Callers branch on `failure` (gateway/backends/upstreams.ts maps it to an
 * UpstreamError kind, lib/relay/forward.ts to 502 or 504); `code` is its internal code (POOL_CODES).
 */
export class PoolError extends LibError {
  constructor(
    readonly failure: PoolFailure,
    message: string,
    /** The socket error's code (`ECONNREFUSED`...), or `UPSTREAM_CONNECT_TIMEOUT` for the pool's own connect timeout. */
    readonly socketCode?: string,
    cause?: unknown,
  ) {
    super(POOL_CODES[failure], message, cause === undefined ? undefined : { cause });
  }
}

/** Receives one response. Every call happens asynchronously to `request()`. */
export interface ResponseHandler {
  /** `headers`: the head's lines (valid to keep; Buffers of them are made on demand). */
  onHead(status: number, headers: HeaderLines): void;
  /** A body chunk (valid to keep). Return false to pause the socket until `resume()`. */
  onData(chunk: Buffer): boolean;
  /** The body is complete. May follow an onData that returned false (nothing more is coming). */
  onEnd(): void;
  /** Called at most once, instead of onEnd. */
  onError(err: PoolError): void;
}

/**
 * `head` (a request head up to its content-length value), the body's length, a blank line and the
 * body, in one new Buffer: two copies and a few digits, where the head as a string (made per
 * request, then flattened and written as latin1 by Buffer#write) cost some 2k instructions.
 */
function withLength(head: Buffer, body: Buffer): Buffer {
  const n = body.length;
  const digits = n < 10 ? 1 : n < 100 ? 2 : n < 1000 ? 3 : n < 10_000 ? 4 : n < 100_000 ? 5 : String(n).length;
  const at = head.length + digits;
  const out = allocUnsafe(at + 4 + n);
  set(out, head, 0);
  let p = at;
  let m = n;
  do {
    const q = (m / 10) | 0;
    out[--p] = 0x30 + (m - q * 10);
    m = q;
  } while (m > 0);
  out[at] = CR;
  out[at + 1] = LF;
  out[at + 2] = CR;
  out[at + 3] = LF;
  set(out, body, at + 4);
  return out;
}

/** One request: the caller's handle (abort, resume). */
export class PoolRequest {
  conn: Connection | undefined;
  /** Sent on a connection that had already served a response (may be stale; see Connection.onClose). */
  reused = false;
  retried = false;
  /** A byte of the response arrived. */
  answered = false;
  finished = false;
  /**
   * performance.now() of the request's write and of the last read of its response: the caller's
   * timings read them instead of the clock (a reading costs some 300 instructions under callgrind).
   */
  sentAt = 0;
  readAt = 0;

  constructor(
    readonly pool: HttpPool,
    /** The request head up to the content-length value (completed at send). */
    readonly head: string,
    readonly body: Buffer | string,
    readonly handler: ResponseHandler,
    /** A HEAD request: its response has no body, whatever its headers say. */
    readonly noBody = false,
    /** `head` as bytes, when the pool keeps them (HttpPool.request: one per path). */
    readonly headBytes: Buffer | undefined = undefined,
  ) {}

  /** Cancels the exchange; onError('aborted') follows (asynchronously). */
  abort(): void {
    this.pool.abort(this);
  }

  /** Resumes a body paused by onData returning false. */
  resume(): void {
    this.conn?.resume(this);
  }
}

/** One keep-alive connection and its response parser. */
export class Connection {
  readonly socket: net.Socket;
  req: PoolRequest | undefined;
  state = IDLE;
  connected = false;
  /** Responses completed on this connection. */
  private served = 0;
  /** Last write, read or release (performance.now()): the timeouts count from it. */
  activeAt = performance.now();
  /** When the request on it was written (performance.now()): the total limit counts from it. */
  sentAt = 0;
  /**
   * The request on it was sent within the pool's reuseAfterMs of the last read (pingpong mode is
   * possible: http-pool.ts "Resting only where it helps"), while the pool does not rest yet.
   */
  private atOnce = false;
  /** performance.now() of a read that ended with a response head (and no body bytes) on such a request; 0: none. */
  private headAloneAt = 0;
  /** On the pool's idle list (http-pool.ts), between idlePrev and idleNext. */
  idle = false;
  idlePrev: Connection | undefined = undefined;
  idleNext: Connection | undefined = undefined;
  paused = false;
  /** socket.pause() was called for a pause (the socket stays paused until flowSocket). */
  private socketPaused = false;
  private keepAlive = true;
  /** Bytes left in a Content-Length body, or in the current chunk. */
  private remaining = 0;
  /** An unfinished head or line, waiting for the rest. */
  private partial: Buffer | undefined;
  /** Bytes read but not parsed while paused. */
  private held: Buffer | undefined;
  private heldAt = 0;
  private socketError: Error | undefined;
  /** The server ended the connection (seen while paused: handled when resumed). */
  private eof = false;
  private dead = false;
  private readonly parsed: ParsedHead = emptyParsedHead();

  constructor(private readonly pool: HttpPool) {
    const socket = pool.secure
      ? tls.connect({
          servername: net.isIP(pool.host) ? undefined : pool.host,
          ALPNProtocols: ['http/1.1'],
          ...pool.opts.tls,
          host: pool.host,
          port: pool.port,
        })
      : net.connect({ host: pool.host, port: pool.port, onread: { buffer: READ_BUFFER, callback: (n: number) => this.onRead(n) } });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.once(pool.secure ? 'secureConnect' : 'connect', () => {
      this.connected = true;
      this.activeAt = performance.now();
    });
    // TLS sockets keep the 'data' path: `onread` is used on plain TCP sockets only.
    if (pool.secure) socket.on('data', (buf: Buffer) => this.onBytes(buf));
    socket.on('end', () => this.onEnd());
    socket.on('error', (err: Error) => {
      this.socketError ??= err;
    });
    socket.on('close', () => this.onClose());
  }

  /** Writes `req`; `now` is performance.now(), read by the pool for its choice. */
  send(req: PoolRequest, now: number): void {
    const pool = this.pool;
    this.req = req;
    req.conn = this;
    req.reused = this.served > 0;
    req.answered = false;
    this.state = HEAD;
    this.paused = false;
    // activeAt is still the last read of the previous response.
    this.atOnce = !pool.rests && this.served > 0 && now - this.activeAt < pool.reuseAfterMs;
    this.headAloneAt = 0;
    this.activeAt = this.sentAt = req.sentAt = now;
    pool.running++;
    const body = req.body;
    const headBytes = req.headBytes;
    if (headBytes !== undefined && typeof body !== 'string' && body.length <= COPY_BODY_LIMIT) {
      this.socket.write(withLength(headBytes, body));
      return;
    }
    if (typeof body === 'string') {
      this.socket.write(req.head + Buffer.byteLength(body) + '\r\n\r\n' + body);
      return;
    }
    const head = req.head + body.length + '\r\n\r\n';
    if (body.length > COPY_BODY_LIMIT) {
      this.socket.cork();
      this.socket.write(head, 'latin1');
      this.socket.write(body);
      this.socket.uncork();
      return;
    }
    const headLength = head.length; // latin1: one byte per character
    const out = Buffer.allocUnsafe(headLength + body.length);
    out.write(head, 0, 'latin1');
    body.copy(out, headLength);
    this.socket.write(out);
  }

  resume(req: PoolRequest): void {
    if (this.req !== req || !this.paused) return;
    this.paused = false;
    this.activeAt = performance.now();
    const held = this.held;
    this.held = undefined;
    if (held) this.guardedParse(held, this.heldAt);
    if (this.paused) return;
    this.flowSocket();
    if (this.req === req && this.eof) this.lost(req);
  }

  /** Lets the socket read again after a pause. */
  private flowSocket(): void {
    if (!this.socketPaused) return;
    this.socketPaused = false;
    if (!this.dead) this.socket.resume();
  }

  /** Ends the exchange in flight with `err` and closes the connection. */
  fail(err: PoolError): void {
    const req = this.req;
    this.destroy();
    if (!req) return;
    this.req = undefined;
    this.pool.running--;
    req.finished = true;
    req.handler.onError(err);
    this.pool.checkDrained();
  }

  destroy(): void {
    if (this.dead) return;
    this.dead = true;
    this.state = IDLE;
    this.held = undefined;
    if (this.req === undefined) this.pool.unidle(this);
    this.socket.destroy();
  }

  /** `n` bytes were read into READ_BUFFER: handlers may keep what they are given, so they get a copy. */
  private onRead(n: number): true {
    const buf = allocUnsafe(n);
    set(buf, new Uint8Array(READ_MEMORY, READ_OFFSET, n), 0);
    this.onBytes(buf);
    return true; // keep reading (pauses go through socket.pause())
  }

  private onBytes(buf: Buffer): void {
    if (this.dead) return;
    if (!this.req) {
      // Bytes nobody asked for (or the server's goodbye): this connection cannot be trusted.
      this.destroy();
      return;
    }
    // Any bytes from the backend are a sign of life for every request waiting on it (http-pool.ts).
    const req = this.req;
    const now = performance.now();
    req.readAt = this.activeAt = this.pool.heardAt = now;
    req.answered = true;
    if (this.headAloneAt !== 0) this.stallCheck(now);
    this.guardedParse(buf, 0);
  }

  /** The read after a head that came alone: the backend held its next bytes for our delayed ACK? */
  private stallCheck(now: number): void {
    const gap = now - this.headAloneAt;
    this.headAloneAt = 0;
    if (gap >= STALL_MIN_MS && gap <= STALL_MAX_MS) this.pool.noteStall();
  }

  /**
   * parse() with the handler's exceptions caught: a handler that throws fails its own exchange
   * (as undici did) instead of escaping from the socket's 'data' event and ending the process.
   * An exception after the exchange has ended is not ours to turn into an error: it propagates.
   */
  private guardedParse(buf: Buffer, at: number): void {
    const req = this.req;
    try {
      this.parse(buf, at);
    } catch (err) {
      if (!req || this.req !== req) throw err;
      this.fail(new PoolError('closed', `Response handler failed: ${(err as Error).message}`, undefined, err));
    }
  }

  private onEnd(): void {
    this.eof = true;
    const req = this.req;
    if (!req) this.destroy();
    else if (!this.paused) this.lost(req);
    // Paused: resume() parses what is held, then ends the exchange.
  }

  private onClose(): void {
    this.dead = true;
    this.pool.forget(this);
    const req = this.req;
    if (!req || (this.paused && this.eof && !this.socketError)) return;
    this.lost(req);
  }

  /** The connection ended (server close, reset, error) while `req` was on it. */
  private lost(req: PoolRequest): void {
    const untilClose = this.state === UNTIL_CLOSE;
    this.destroy();
    const err = this.socketError;
    if (untilClose && this.eof && !err) {
      this.keepAlive = false;
      this.complete(req, false); // the body runs to the close: it is whole
      return;
    }
    this.req = undefined;
    this.pool.running--;
    const code = (err as NodeJS.ErrnoException | undefined)?.code;
    if (!this.connected) {
      req.finished = true;
      req.handler.onError(new PoolError('connect', err?.message ?? 'Connection closed before it was established', code, err));
    } else if (req.reused && !req.answered && !req.retried) {
      // A kept-alive connection the server closed just as the request went out: it was not
      // read. Send it once more, on another connection.
      req.retried = true;
      req.conn = undefined;
      this.pool.dispatch(req);
      return;
    } else {
      req.finished = true;
      req.handler.onError(new PoolError('closed', err ? `Connection error: ${err.message}` : 'The backend closed the connection', code, err));
    }
    this.pool.checkDrained();
  }

  /** The response ended: hand the connection back (or close it), then tell the handler. */
  private complete(req: PoolRequest, leftover: boolean): void {
    this.req = undefined;
    this.state = IDLE;
    this.partial = undefined;
    this.served++;
    this.pool.running--;
    req.finished = true;
    // Paused on the last chunk: nothing more is coming for this response.
    this.paused = false;
    this.held = undefined;
    this.flowSocket();
    if (this.keepAlive && !leftover && !this.dead && !this.eof) this.pool.release(this);
    else this.destroy();
    req.handler.onEnd();
    this.pool.checkDrained();
  }

  private protocolError(message: string): void {
    this.fail(new PoolError('protocol', `Malformed response from the backend: ${message}`));
  }

  /** Hands a body slice to the handler; false when parsing must stop (paused, aborted). */
  private deliver(req: PoolRequest, chunk: Buffer, buf: Buffer, next: number): boolean {
    const more = req.handler.onData(chunk);
    if (this.req !== req) return false; // aborted from inside onData
    if (more === false) {
      this.paused = true;
      this.socketPaused = true;
      this.socket.pause();
      if (next < buf.length) {
        this.held = buf;
        this.heldAt = next;
      }
    }
    return true;
  }

  /** Reads `buf` from `at` as far as the state machine goes (the whole of it unless paused). */
  private parse(input: Buffer, at: number): void {
    const req = this.req!;
    let buf = input;
    let i = at;
    while (i < buf.length) {
      if (this.paused) {
        this.held = buf;
        this.heldAt = i;
        return;
      }
      switch (this.state) {
        case HEAD: {
          if (this.partial) {
            buf = Buffer.concat([this.partial, subarray(buf, i)]);
            i = 0;
            this.partial = undefined;
          }
          const end = this.headEnd(buf, i);
          if (end < 0) return;
          const status = this.head(buf, i, end);
          if (status < 0) return;
          i = end + 4;
          if (status < 200) continue; // 100 Continue, 103 Early Hints: the real head follows
          // A head alone in its read, on a connection reused at once: is the body held back?
          if (this.atOnce && i === buf.length && (this.state as number) !== IDLE) this.headAloneAt = req.readAt;
          if ((this.state as number) === IDLE) {
            // No body (204, 304, or Content-Length: 0).
            this.complete(req, i < buf.length);
            return;
          }
          break;
        }
        case LENGTH: {
          const take = Math.min(this.remaining, buf.length - i);
          const chunk = subarray(buf, i, i + take);
          i += take;
          this.remaining -= take;
          if (!this.deliver(req, chunk, buf, i)) return;
          if (this.remaining === 0) {
            this.complete(req, i < buf.length);
            return;
          }
          break;
        }
        case CHUNK_SIZE:
          i = this.sizeLine(buf, i);
          if (i < 0) return;
          break;
        case CHUNK_DATA: {
          const take = Math.min(this.remaining, buf.length - i);
          const chunk = subarray(buf, i, i + take);
          i += take;
          this.remaining -= take;
          if (this.remaining === 0) this.state = CHUNK_END;
          if (!this.deliver(req, chunk, buf, i)) return;
          break;
        }
        case CHUNK_END: {
          const b = buf[i++];
          if (b === LF) this.state = CHUNK_SIZE;
          else if (b !== CR) return this.protocolError('chunk not followed by CRLF');
          break;
        }
        case TRAILERS:
          i = this.trailerLine(req, buf, i);
          if (i < 0) return;
          break;
        case UNTIL_CLOSE: {
          const chunk = i === 0 ? buf : subarray(buf, i);
          i = buf.length;
          if (!this.deliver(req, chunk, buf, i)) return;
          break;
        }
        default:
          return this.protocolError('data after the response');
      }
    }
  }

  /**
   * The index of the CRLF CRLF that ends the head starting at `i`, or -1: the head is incomplete
   * (its part is kept for the next read) or too large (a protocol error).
   */
  private headEnd(buf: Buffer, i: number): number {
    const end = indexOf(buf, CRLF2, i);
    if (end >= 0 && end - i <= this.pool.maxHeaderBytes) return end;
    if (buf.length - i > this.pool.maxHeaderBytes) this.protocolError('response head too large');
    else this.partial = Buffer.from(subarray(buf, i));
    return -1;
  }

  /** The chunk size line at `i` sets the next state; returns the index after it, or -1 (incomplete, or a protocol error). */
  private sizeLine(buf: Buffer, i: number): number {
    const line = this.line(buf, i);
    if (line < 0) return -1;
    const size = this.chunkSize();
    if (size < 0) {
      this.protocolError('bad chunk size');
      return -1;
    }
    if (size === 0) this.state = TRAILERS;
    else {
      this.remaining = size;
      this.state = CHUNK_DATA;
    }
    return line;
  }

  /** A trailer line at `i` (ignored); the empty one completes the response. Returns the index after it, or -1 (incomplete, or complete). */
  private trailerLine(req: PoolRequest, buf: Buffer, i: number): number {
    const line = this.line(buf, i);
    if (line < 0) return -1;
    if (this.lineEnd === this.lineStart) {
      this.complete(req, line < buf.length);
      return -1;
    }
    return line; // a trailer field: ignored
  }

  // The current line (CHUNK_SIZE, TRAILERS): lineBuf[lineStart, lineEnd), without CR LF.
  private lineBuf: Buffer = CRLF2;
  private lineStart = 0;
  private lineEnd = 0;

  /** Finds the line starting at `i`; returns the index after its LF, or -1 (the part is kept for later). */
  private line(buf: Buffer, i: number): number {
    const lf = indexOf(buf, LF, i);
    if (lf < 0) {
      const rest = subarray(buf, i);
      this.partial = this.partial ? Buffer.concat([this.partial, rest]) : Buffer.from(rest);
      if (this.partial.length > 4096) this.protocolError('line too long');
      return -1;
    }
    if (this.partial) {
      this.lineBuf = Buffer.concat([this.partial, subarray(buf, i, lf)]);
      this.partial = undefined;
      this.lineStart = 0;
      this.lineEnd = this.lineBuf.length;
    } else {
      this.lineBuf = buf;
      this.lineStart = i;
      this.lineEnd = lf;
    }
    if (this.lineEnd > this.lineStart && this.lineBuf[this.lineEnd - 1] === CR) this.lineEnd--;
    return lf + 1;
  }

  /** The hex size at the start of the current line, or -1. */
  private chunkSize(): number {
    return chunkSize(this.lineBuf, this.lineStart, this.lineEnd);
  }

  /**
   * Parses the head in buf[start, end) (end: the index of its CRLF CRLF), reports it to the
   * handler for a final status, and sets the body state. Returns the status, or -1 after a
   * protocol error or an abort from inside onHead.
   */
  private head(buf: Buffer, start: number, end: number): number {
    const h = this.parsed;
    const error = parseHead(buf, start, end, h);
    if (error !== undefined) {
      this.protocolError(error);
      return -1;
    }
    const status = h.status;
    if (status < 200) return status;
    this.state = this.req!.noBody ? IDLE : h.state;
    if (this.state === LENGTH) this.remaining = h.length;
    this.keepAlive = h.keepAlive;
    const req = this.req!;
    req.handler.onHead(status, h.headers);
    return this.req === req ? status : -1;
  }
}
