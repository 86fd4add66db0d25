// A small HTTP/1.1 client for the gateway's backends: a keep-alive connection pool per origin
// that sends one POST at a time per connection and hands the response to a handler as slices
// of what the socket read (no copy), with backpressure (onData returns false to pause the
// socket), connect / headers / body-idle timeouts checked by one sweep timer per pool, and
// abort. Content-Length, chunked and read-until-close bodies; 1xx responses are skipped.
//
// Why not undici (which this replaced; see gateway/README.md "Benchmark"): on the gateway's
// request path undici cost about 4 µs of CPU per request more than a plain socket write and
// read (a Request object with header validation, a setImmediate before every write on a reused
// socket, stream writev, wasm parser callbacks). This client does what the gateway needs and
// nothing more: one write per request, a byte-level parser, no per-request timers.
import { performance } from 'node:perf_hooks';
import * as net from 'node:net';
import * as tls from 'node:tls';

export interface HttpPoolOptions {
  /** Most connections open at once; more requests wait in a queue. */
  connections: number;
  connectTimeoutMs: number;
  /** From the request's write to the end of the response head. */
  headersTimeoutMs: number;
  /** Longest silence inside a response body (not counted while the handler has paused it). */
  bodyTimeoutMs: number;
  /** How long an idle connection is kept for reuse. */
  keepAliveTimeoutMs: number;
  /** Largest response head (status line and headers). */
  maxHeaderBytes?: number;
  /** Extra TLS settings for an https origin (for example `ca`). */
  tls?: tls.ConnectionOptions;
}

/** Why an exchange failed. `connect`: nothing reached the backend (safe to send elsewhere). */
export type PoolFailure = 'connect' | 'headers-timeout' | 'body-timeout' | 'closed' | 'protocol' | 'aborted' | 'pool-closed';

export class PoolError extends Error {
  constructor(readonly failure: PoolFailure, message: string, readonly code?: string, cause?: unknown) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'PoolError';
  }
}

/** Receives one response. Every call happens asynchronously to `request()`. */
export interface ResponseHandler {
  /** `rawHeaders`: name, value, name, value... as sent (slices of the read buffer, valid to keep). */
  onHead(status: number, rawHeaders: Buffer[]): void;
  /** A body chunk (valid to keep). Return false to pause the socket until `resume()`. */
  onData(chunk: Buffer): boolean;
  /** The body is complete. May follow an onData that returned false (nothing more is coming). */
  onEnd(): void;
  /** Called at most once, instead of onEnd. */
  onError(err: PoolError): void;
}

const DEFAULT_MAX_HEADER_BYTES = 64 * 1024;
/** Bodies up to this size are copied behind the head and sent in one write; larger ones in two. */
const COPY_BODY_LIMIT = 64 * 1024;
const CRLF2 = Buffer.from('\r\n\r\n');
const LF = 0x0a;
const CR = 0x0d;

const CONTENT_LENGTH = Buffer.from('content-length');
const TRANSFER_ENCODING = Buffer.from('transfer-encoding');
const CONNECTION = Buffer.from('connection');
const CHUNKED = Buffer.from('chunked');
const CLOSE = Buffer.from('close');
const KEEP_ALIVE = Buffer.from('keep-alive');

/** ASCII case-insensitive equality of `buf[start, end)` with a lower-case name. */
export function asciiLowerEquals(buf: Buffer, lower: Buffer, start = 0, end = buf.length): boolean {
  const n = lower.length;
  if (end - start !== n) return false;
  // `| 0x20` lower-cases letters; the other bytes of our names ('-') are unchanged by it.
  for (let i = 0; i < n; i++) if ((buf[start + i]! | 0x20) !== lower[i]) return false;
  return true;
}

/** True when the comma-separated `value` lists `token` (case-insensitive). */
function hasToken(value: Buffer, token: Buffer): boolean {
  let start = 0;
  const n = value.length;
  while (start < n) {
    let end = value.indexOf(0x2c, start); // ','
    if (end < 0) end = n;
    let a = start;
    let b = end;
    while (a < b && (value[a] === 0x20 || value[a] === 0x09)) a++;
    while (b > a && (value[b - 1] === 0x20 || value[b - 1] === 0x09)) b--;
    if (asciiLowerEquals(value, token, a, b)) return true;
    start = end + 1;
  }
  return false;
}

/** The decimal value of `buf[start, end)`, or -1 when it is not a plain non-negative integer. */
function decimal(buf: Buffer, start: number, end: number): number {
  if (end <= start || end - start > 15) return -1;
  let n = 0;
  for (let i = start; i < end; i++) {
    const d = buf[i]! - 0x30;
    if (d < 0 || d > 9) return -1;
    n = n * 10 + d;
  }
  return n;
}

// Parser states of a connection.
const IDLE = 0;
const HEAD = 1;
const LENGTH = 2;
const CHUNK_SIZE = 3;
const CHUNK_DATA = 4;
const CHUNK_END = 5;
const TRAILERS = 6;
const UNTIL_CLOSE = 7;

/** One request: the caller's handle (abort, resume). */
export class PoolRequest {
  conn: Connection | undefined;
  /** Sent on a connection that had already served a response (may be stale; see Connection.onClose). */
  reused = false;
  retried = false;
  /** A byte of the response arrived. */
  answered = false;
  finished = false;

  constructor(readonly pool: HttpPool, readonly head: string, readonly body: Buffer | string, readonly handler: ResponseHandler) {}

  /** Cancels the exchange; onError('aborted') follows (asynchronously). */
  abort(): void {
    this.pool.abort(this);
  }

  /** Resumes a body paused by onData returning false. */
  resume(): void {
    this.conn?.resume(this);
  }
}

export interface PoolStats {
  /** Requests on a connection. */
  running: number;
  /** Requests waiting for a connection. */
  queued: number;
  /** Open connections (busy, idle or connecting). */
  connections: number;
  free: number;
}

export class HttpPool {
  readonly host: string;
  readonly port: number;
  readonly secure: boolean;
  readonly maxHeaderBytes: number;
  /** `HTTP/1.1` request head after the path, up to the content-length value. */
  private readonly headTail: string;
  private readonly conns = new Set<Connection>();
  /** Idle connections, most recently used last (reused first: its socket is warm). */
  private readonly idle: Connection[] = [];
  private readonly queue: PoolRequest[] = [];
  private sweeper: NodeJS.Timeout | undefined;
  private readonly sweepMs: number;
  running = 0;
  private closing = false;
  private closed: Promise<void> | undefined;
  private onDrained: (() => void) | undefined;

  constructor(origin: URL | string, readonly opts: HttpPoolOptions) {
    const u = typeof origin === 'string' ? new URL(origin) : origin;
    this.secure = u.protocol === 'https:';
    this.host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
    this.port = Number(u.port) || (this.secure ? 443 : 80);
    this.maxHeaderBytes = opts.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
    this.headTail = ` HTTP/1.1\r\nhost: ${u.host}\r\ncontent-type: application/json\r\ncontent-length: `;
    const shortest = Math.min(opts.connectTimeoutMs, opts.headersTimeoutMs, opts.bodyTimeoutMs, opts.keepAliveTimeoutMs);
    this.sweepMs = Math.min(1000, Math.max(10, Math.floor(shortest / 4)));
  }

  get stats(): PoolStats {
    return { running: this.running, queued: this.queue.length, connections: this.conns.size, free: this.idle.length };
  }

  /** POSTs `body` (JSON) to `path` and reports the response to `handler`. */
  request(path: string, body: Buffer | string, handler: ResponseHandler): PoolRequest {
    const req = new PoolRequest(this, 'POST ' + path + this.headTail, body, handler);
    if (this.closing) {
      req.finished = true;
      queueMicrotask(() => handler.onError(new PoolError('pool-closed', 'The upstream pool is closed')));
      return req;
    }
    this.dispatch(req);
    return req;
  }

  /** Puts a request on an idle connection, a new one, or the queue. */
  dispatch(req: PoolRequest): void {
    const idle = this.idle.pop();
    if (idle) idle.send(req);
    else if (this.conns.size < this.opts.connections) this.open().send(req);
    else this.queue.push(req);
  }

  abort(req: PoolRequest): void {
    if (req.finished) return;
    req.finished = true;
    const conn = req.conn;
    if (conn && conn.req === req) {
      conn.req = undefined;
      this.running--;
      conn.destroy(); // a response in the middle cannot be reused
    } else {
      const i = this.queue.indexOf(req);
      if (i >= 0) this.queue.splice(i, 1);
    }
    queueMicrotask(() => req.handler.onError(new PoolError('aborted', 'Client went away')));
    this.checkDrained();
  }

  /** Stops taking requests; resolves when the ones running and queued have finished and every connection is closed. */
  close(): Promise<void> {
    this.closing = true;
    this.closed ??= new Promise<void>((resolve) => {
      this.onDrained = resolve;
      this.checkDrained();
    });
    return this.closed;
  }

  /** Closes every connection now; requests running or queued fail ('closed' / 'pool-closed'). */
  destroy(): Promise<void> {
    const done = this.close();
    for (const req of this.queue.splice(0)) {
      req.finished = true;
      queueMicrotask(() => req.handler.onError(new PoolError('pool-closed', 'The upstream pool was closed')));
    }
    for (const c of [...this.conns]) c.fail(new PoolError('closed', 'The upstream pool was closed'));
    this.checkDrained();
    return done;
  }

  // -- for Connection --------------------------------------------------------------------------

  /** A connection finished its response and can serve another. */
  release(conn: Connection): void {
    const next = this.queue.shift();
    if (next) {
      conn.send(next);
      return;
    }
    if (this.closing) {
      conn.destroy();
      return;
    }
    conn.activeAt = performance.now();
    this.idle.push(conn);
  }

  /** Takes a closing connection off the idle list, so no request is put on it. */
  unidle(conn: Connection): void {
    const i = this.idle.indexOf(conn);
    if (i >= 0) this.idle.splice(i, 1);
  }

  /** A connection closed (for whatever reason). */
  forget(conn: Connection): void {
    if (!this.conns.delete(conn)) return;
    this.unidle(conn);
    if (this.conns.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
    }
    // A queued request needs a connection: open one in its place.
    const next = this.queue.shift();
    if (next) this.open().send(next);
    this.checkDrained();
  }

  private open(): Connection {
    const conn = new Connection(this);
    this.conns.add(conn);
    this.sweeper ??= setInterval(() => this.sweep(), this.sweepMs).unref();
    return conn;
  }

  checkDrained(): void {
    if (!this.closing || !this.onDrained) return;
    if (this.running === 0 && this.queue.length === 0) {
      for (const c of this.idle.splice(0)) c.destroy();
      if (this.conns.size === 0) {
        const resolve = this.onDrained;
        this.onDrained = undefined;
        resolve();
      }
    }
  }

  /** Timeouts of every connection, checked a few times per shortest timeout. */
  private sweep(): void {
    const now = performance.now();
    const o = this.opts;
    for (const c of this.conns) {
      const quiet = now - c.activeAt;
      if (c.req === undefined) {
        if (quiet >= o.keepAliveTimeoutMs) c.destroy(); // idle (a connection gets its request when opened)
      } else if (!c.connected) {
        if (quiet >= o.connectTimeoutMs) c.fail(new PoolError('connect', `Connect timeout after ${o.connectTimeoutMs} ms`, 'UPSTREAM_CONNECT_TIMEOUT'));
      } else if (c.state === HEAD) {
        if (quiet >= o.headersTimeoutMs) c.fail(new PoolError('headers-timeout', `No response head within ${o.headersTimeoutMs} ms`));
      } else if (!c.paused && quiet >= o.bodyTimeoutMs) {
        c.fail(new PoolError('body-timeout', `No response data within ${o.bodyTimeoutMs} ms`));
      }
    }
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

  constructor(private readonly pool: HttpPool) {
    const socket = pool.secure
      ? tls.connect({ servername: net.isIP(pool.host) ? undefined : pool.host, ALPNProtocols: ['http/1.1'], ...pool.opts.tls, host: pool.host, port: pool.port })
      : net.connect({ host: pool.host, port: pool.port });
    this.socket = socket;
    socket.setNoDelay(true);
    socket.once(pool.secure ? 'secureConnect' : 'connect', () => {
      this.connected = true;
      this.activeAt = performance.now();
    });
    socket.on('data', (buf: Buffer) => this.onBytes(buf));
    socket.on('end', () => this.onEnd());
    socket.on('error', (err: Error) => { this.socketError ??= err; });
    socket.on('close', () => this.onClose());
  }

  send(req: PoolRequest): void {
    const pool = this.pool;
    this.req = req;
    req.conn = this;
    req.reused = this.served > 0;
    req.answered = false;
    this.state = HEAD;
    this.paused = false;
    this.activeAt = performance.now();
    pool.running++;
    const body = req.body;
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

  private onBytes(buf: Buffer): void {
    if (this.dead) return;
    if (!this.req) {
      // Bytes nobody asked for (or the server's goodbye): this connection cannot be trusted.
      this.destroy();
      return;
    }
    this.activeAt = performance.now();
    this.req.answered = true;
    this.guardedParse(buf, 0);
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
            buf = Buffer.concat([this.partial, buf.subarray(i)]);
            i = 0;
            this.partial = undefined;
          }
          const end = buf.indexOf(CRLF2, i);
          if (end < 0 || end - i > this.pool.maxHeaderBytes) {
            if (buf.length - i > this.pool.maxHeaderBytes) return this.protocolError('response head too large');
            this.partial = Buffer.from(buf.subarray(i));
            return;
          }
          const status = this.head(buf, i, end);
          if (status < 0) return;
          i = end + 4;
          if (status < 200) continue; // 100 Continue, 103 Early Hints: the real head follows
          if ((this.state as number) === IDLE) {
            // No body (204, 304, or Content-Length: 0).
            this.complete(req, i < buf.length);
            return;
          }
          break;
        }
        case LENGTH: {
          const take = Math.min(this.remaining, buf.length - i);
          const chunk = buf.subarray(i, i + take);
          i += take;
          this.remaining -= take;
          if (!this.deliver(req, chunk, buf, i)) return;
          if (this.remaining === 0) {
            this.complete(req, i < buf.length);
            return;
          }
          break;
        }
        case CHUNK_SIZE: {
          const line = this.line(buf, i);
          if (line < 0) return;
          const size = this.chunkSize();
          if (size < 0) return this.protocolError('bad chunk size');
          i = line;
          if (size === 0) this.state = TRAILERS;
          else {
            this.remaining = size;
            this.state = CHUNK_DATA;
          }
          break;
        }
        case CHUNK_DATA: {
          const take = Math.min(this.remaining, buf.length - i);
          const chunk = buf.subarray(i, i + take);
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
        case TRAILERS: {
          const line = this.line(buf, i);
          if (line < 0) return;
          i = line;
          if (this.lineEnd === this.lineStart) {
            this.complete(req, i < buf.length);
            return;
          }
          break; // a trailer field: ignored
        }
        case UNTIL_CLOSE: {
          const chunk = i === 0 ? buf : buf.subarray(i);
          i = buf.length;
          if (!this.deliver(req, chunk, buf, i)) return;
          break;
        }
        default:
          return this.protocolError('data after the response');
      }
    }
  }

  // The current line (CHUNK_SIZE, TRAILERS): lineBuf[lineStart, lineEnd), without CR LF.
  private lineBuf: Buffer = CRLF2;
  private lineStart = 0;
  private lineEnd = 0;

  /** Finds the line starting at `i`; returns the index after its LF, or -1 (the part is kept for later). */
  private line(buf: Buffer, i: number): number {
    const lf = buf.indexOf(LF, i);
    if (lf < 0) {
      const rest = buf.subarray(i);
      this.partial = this.partial ? Buffer.concat([this.partial, rest]) : Buffer.from(rest);
      if (this.partial.length > 4096) this.protocolError('line too long');
      return -1;
    }
    if (this.partial) {
      this.lineBuf = Buffer.concat([this.partial, buf.subarray(i, lf)]);
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

  /** The hex size at the start of the current line (extensions after ';' ignored), or -1. */
  private chunkSize(): number {
    const b = this.lineBuf;
    let size = 0;
    let digits = 0;
    let k = this.lineStart;
    for (; k < this.lineEnd; k++) {
      const c = b[k]!;
      let v: number;
      if (c >= 0x30 && c <= 0x39) v = c - 0x30;
      else if (c >= 0x61 && c <= 0x66) v = c - 0x57;
      else if (c >= 0x41 && c <= 0x46) v = c - 0x37;
      else break;
      if (++digits > 12) return -1;
      size = size * 16 + v;
    }
    if (digits === 0) return -1;
    for (; k < this.lineEnd; k++) {
      const c = b[k]!;
      if (c === 0x3b) break; // ';' chunk extension
      if (c !== 0x20 && c !== 0x09) return -1;
    }
    return size;
  }

  /**
   * Parses the head in buf[start, end) (end: the index of its CRLF CRLF), reports it to the
   * handler for a final status, and sets the body state. Returns the status, or -1 after a
   * protocol error or an abort from inside onHead.
   */
  private head(buf: Buffer, start: number, end: number): number {
    // Status line: HTTP/1.x SSS reason
    if (end - start < 12 || buf[start] !== 0x48 || buf[start + 4] !== 0x2f || buf[start + 5] !== 0x31 || buf[start + 6] !== 0x2e || buf[start + 8] !== 0x20) {
      this.protocolError('bad status line');
      return -1;
    }
    const status = decimal(buf, start + 9, start + 12);
    if (status < 100 || status > 999 || status === 101) {
      this.protocolError('bad status');
      return -1;
    }
    if (status < 200) return status;
    let keepAlive = buf[start + 7] === 0x31; // HTTP/1.1 keeps the connection by default, 1.0 does not
    let length = -1;
    let chunked = false;
    let encoded = false;
    const raw: Buffer[] = [];
    let p = buf.indexOf(LF, start) + 1;
    const stop = end + 2; // every header line ends with CRLF; the blank line is not included
    while (p < stop) {
      const lf = buf.indexOf(LF, p);
      const lineEnd = buf[lf - 1] === CR ? lf - 1 : lf;
      const colon = buf.indexOf(0x3a, p);
      if (colon < 0 || colon >= lineEnd || colon === p) {
        this.protocolError('bad header line');
        return -1;
      }
      let a = colon + 1;
      let b = lineEnd;
      while (a < b && (buf[a] === 0x20 || buf[a] === 0x09)) a++;
      while (b > a && (buf[b - 1] === 0x20 || buf[b - 1] === 0x09)) b--;
      const name = buf.subarray(p, colon);
      const value = buf.subarray(a, b);
      raw.push(name, value);
      const n = colon - p;
      if (n === 14 && asciiLowerEquals(name, CONTENT_LENGTH)) {
        const v = decimal(buf, a, b);
        if (v < 0 || (length >= 0 && v !== length)) {
          this.protocolError('bad content-length');
          return -1;
        }
        length = v;
      } else if (n === 17 && asciiLowerEquals(name, TRANSFER_ENCODING)) {
        encoded = true;
        chunked = hasToken(value, CHUNKED);
      } else if (n === 10 && asciiLowerEquals(name, CONNECTION)) {
        if (hasToken(value, CLOSE)) keepAlive = false;
        else if (hasToken(value, KEEP_ALIVE)) keepAlive = true;
      }
      p = lf + 1;
    }
    if (encoded) {
      // Transfer-Encoding wins over Content-Length; a coding other than chunked runs to the close.
      if (length >= 0) keepAlive = false;
      this.state = chunked ? CHUNK_SIZE : UNTIL_CLOSE;
      if (!chunked) keepAlive = false;
    } else if (status === 204 || status === 304 || length === 0) {
      this.state = IDLE;
    } else if (length > 0) {
      this.state = LENGTH;
      this.remaining = length;
    } else {
      this.state = UNTIL_CLOSE;
      keepAlive = false;
    }
    if (status === 204 || status === 304) this.state = IDLE;
    this.keepAlive = keepAlive;
    const req = this.req!;
    req.handler.onHead(status, raw);
    return this.req === req ? status : -1;
  }
}
