// A small HTTP/1.1 client for the gateway's backends: a keep-alive connection pool per origin
// that sends one POST at a time per connection and hands the response to a handler as slices
// of what the socket read (no copy), with backpressure (onData returns false to pause the
// socket), connect / headers / body-idle timeouts checked by one sweep timer per pool, and
// abort. Content-Length, chunked and read-until-close bodies; 1xx responses are skipped.
//
// Waiting on a busy backend (issue 40): a backend may take minutes to send a head (a non-stream
// answer; llama.cpp sends a stream's head with its first token, after any queueing) or to send
// the first token after the head (vLLM queued). Silence alone does not tell a busy backend from a
// dead one, so the silence limits (headersTimeoutMs, bodyTimeoutMs) fail a request only when the
// whole backend has shown no sign of life for as long: no bytes read from it on any connection of
// the pool, and no answer to a liveness probe (lib/relay/liveness-probe.ts, GET `probePath`) sent
// once a waiting request is past its limit. A backend found dead this way fails its requests
// between one and two limits after they went silent. requestTimeoutMs bounds every request
// (write to end of response) whatever the backend shows. All of it is checked by the one sweep
// timer; the request path only stamps times.
//
// Reusing a connection that has rested (reuseAfterMs): measured against Python's http.server
// (Nagle on: the head in one write, each chunk in another), the first token came 44 ms later on a
// kept-alive connection reused at once than on a fresh one or one reused after 60 ms or more
// (2.5 to 3 ms), and the kernel's DelayedACKs counter (/proc/net/netstat) rose by one per request
// on the reused connection only. Linux puts a connection that sends within its ACK timeout (ato,
// 40 ms and up) of its last receive into "pingpong" (interactive) mode, in which an incoming
// segment's ACK waits for the delayed-ACK timer (40 ms) to ride on a reply; the backend's Nagle
// holds its first chunk until the head is acknowledged; a fresh connection starts in quick-ACK
// mode, and one that rested past its ato sends its request outside pingpong mode and ACKs on read.
// Node cannot set TCP_QUICKACK, so the pool prefers a connection that has rested, and opens a new
// one (up to `connections`) rather than reuse one at once (bench/first-token.ts measures it).
//
// Resting only where it helps (restBeforeReuse 'on-stall', the default): at a high request rate
// every connection is reused within 100 ms, so the rule opened connections up to the limit (256)
// on every backend, where a backend that sets TCP_NODELAY (uvicorn's asyncio does, hence vLLM and
// SGLang; the sim) never needs it: natively the chat stream ran at 7-12k requests a second against
// 14-15k with a handful of connections, and under callgrind connections opened and closed as the
// rate moved (several thousand instructions a request). So a pool reuses its most recent idle
// connection at once until its backend shows the stall itself: a response head that came alone in
// its read on a connection reused at once, and the next bytes STALL_MIN_MS to STALL_MAX_MS later
// (http-connection.ts; the delayed-ACK timer, 40 ms and up). From then on the pool rests its
// connections for good.
// A GPU backend whose first token comes that long after its head is taken for one (its prefill):
// it gets the rule it had before, which only costs at high request rates, which GPU backends do
// not serve. A backend that sends its head with its first token and leaves Nagle on (cpp-httplib's
// default; current llama.cpp builds set TCP_NODELAY) is not seen: its second chunk can wait 40 ms
// on a connection reused at once.
//
// Why not undici (which this replaced; see gateway/README.md "Benchmark"): on the gateway's
// request path undici cost about 4 µs of CPU per request more than a plain socket write and
// read (a Request object with header validation, a setImmediate before every write on a reused
// socket, stream writev, wasm parser callbacks). This client does what the gateway needs and
// nothing more: one write per request, a byte-level parser, no per-request timers.
//
// The client is three files: this one (the pool: connections per origin, queue, timeouts sweep,
// close), lib/relay/http-connection.ts (one connection: write, read, pause, failures) and
// lib/relay/http-parser.ts (the response parser), as undici keeps pool-base, client and client-h1 apart.
import { performance } from 'node:perf_hooks';
import type * as tls from 'node:tls';
import { Connection, PoolError, PoolRequest, type ResponseHandler } from './http-connection.js';
import { HEAD } from './http-parser.js';
import { LivenessProbe } from './liveness-probe.js';

export { Connection, PoolError, PoolRequest, type PoolFailure, type ResponseHandler } from './http-connection.js';
export type { HeaderLines } from './http-parser.js';

export interface HttpPoolOptions {
  /** Most connections open at once; more requests wait in a queue. */
  connections: number;
  connectTimeoutMs: number;
  /**
   * Silence from the request's write until the response head that fails the request when the
   * backend has also shown no sign of life for as long (nothing read from it, no answer to the
   * probe): a busy backend is waited for, up to requestTimeoutMs.
   */
  headersTimeoutMs: number;
  /** The same inside a response body (not counted while the handler has paused it). */
  bodyTimeoutMs: number;
  /** From the request's write to the end of its response, whatever the backend shows. Default 30 min. */
  requestTimeoutMs?: number;
  /**
   * Path of a GET that asks a silent backend whether it lives (an answer below 500 is life; the
   * answer is due within headersTimeoutMs). Undefined: none is asked, and a request past its
   * silence limit fails unless the backend answered others meanwhile.
   */
  probePath?: string;
  /** How long an idle connection is kept for reuse. */
  keepAliveTimeoutMs: number;
  /**
   * How long a connection rests after its response before it is reused, when the pool has room
   * for a new one (see "Reusing a connection that has rested" above). Default 100 ms.
   */
  reuseAfterMs?: number;
  /**
   * 'on-stall' (default): connections rest before reuse once the backend has shown a delayed-ACK
   * stall ("Resting only where it helps" above); 'always': from the start.
   */
  restBeforeReuse?: 'on-stall' | 'always';
  /** Largest response head (status line and headers). */
  maxHeaderBytes?: number;
  /** Extra TLS settings for an https origin (for example `ca`). */
  tls?: tls.ConnectionOptions;
}

const DEFAULT_MAX_HEADER_BYTES = 64 * 1024;
export const DEFAULT_REQUEST_TIMEOUT_MS = 30 * 60_000;
/**
 * Above Linux's ACK timeout after a stream of small segments (40 ms, up to about twice the gap
 * between them below it): measured, 45 ms of rest still met the delayed ACK now and then, 60 ms never.
 */
export const DEFAULT_REUSE_AFTER_MS = 100;
/** Request heads kept per pool (paths are the chat path, /tokenize and the like). */
const MAX_HEADS = 16;
const EMPTY = Buffer.alloc(0);

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
  /** The Host header value of this origin. */
  private readonly hostHeader: string;
  private readonly conns = new Set<Connection>();
  /** The request head of each path POSTed to (request()), as text and as bytes; a few paths per pool. */
  private readonly heads = new Map<string, { text: string; bytes: Buffer }>();
  /**
   * Idle connections, a list through their idlePrev / idleNext links: the first has rested longest
   * (reused first while resting), the last was released last (reused first otherwise). Taking
   * either end, adding one and taking one out from the middle (unidle) are O(1), where an array's
   * shift moved every entry (about 400 instructions a request under callgrind with a few dozen
   * idle connections).
   */
  private idleFirst: Connection | undefined;
  private idleLast: Connection | undefined;
  private idleCount = 0;
  private readonly queue: PoolRequest[] = [];
  private sweeper: NodeJS.Timeout | undefined;
  private readonly sweepMs: number;
  private readonly requestTimeoutMs: number;
  readonly reuseAfterMs: number;
  /** Connections rest before reuse (restBeforeReuse 'always', or the backend showed a stall). */
  rests: boolean;
  /** performance.now() of the last sign of life from the backend: bytes read on any connection, or a probe's answer. */
  heardAt = Number.NEGATIVE_INFINITY;
  /** The liveness probe asked last (running, or its verdict until the sweep has used it). */
  private probe: LivenessProbe | undefined;
  running = 0;
  private closing = false;
  private closed: Promise<void> | undefined;
  private onDrained: (() => void) | undefined;

  constructor(
    origin: URL | string,
    readonly opts: HttpPoolOptions,
  ) {
    const u = typeof origin === 'string' ? new URL(origin) : origin;
    this.secure = u.protocol === 'https:';
    this.host = u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
    this.port = Number(u.port) || (this.secure ? 443 : 80);
    this.maxHeaderBytes = opts.maxHeaderBytes ?? DEFAULT_MAX_HEADER_BYTES;
    this.hostHeader = u.host;
    this.headTail = ` HTTP/1.1\r\nhost: ${u.host}\r\ncontent-type: application/json\r\ncontent-length: `;
    this.requestTimeoutMs = opts.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.reuseAfterMs = opts.reuseAfterMs ?? DEFAULT_REUSE_AFTER_MS;
    this.rests = opts.restBeforeReuse === 'always';
    const shortest = Math.min(opts.connectTimeoutMs, opts.headersTimeoutMs, opts.bodyTimeoutMs, opts.keepAliveTimeoutMs, this.requestTimeoutMs);
    this.sweepMs = Math.min(1000, Math.max(10, Math.floor(shortest / 4)));
  }

  get stats(): PoolStats {
    return { running: this.running, queued: this.queue.length, connections: this.conns.size, free: this.idleCount };
  }

  /** POSTs `body` (JSON) to `path` and reports the response to `handler`. */
  request(path: string, body: Buffer | string, handler: ResponseHandler): PoolRequest {
    let head = this.heads.get(path);
    if (head === undefined) {
      const text = 'POST ' + path + this.headTail;
      head = { text, bytes: Buffer.from(text, 'latin1') };
      if (this.heads.size < MAX_HEADS) this.heads.set(path, head);
    }
    return this.submit(new PoolRequest(this, head.text, body, handler, false, head.bytes));
  }

  /**
   * Any request: `method` and `path` as given, `headers` a flat name, value list (no framing
   * headers: Content-Length is written here; a Host among them replaces the origin's), `body`
   * possibly empty. For the verbatim relays (dedicated endpoints, the instance proxy).
   */
  send(method: string, path: string, headers: readonly string[], body: Buffer | undefined, handler: ResponseHandler): PoolRequest {
    let head = method + ' ' + path + ' HTTP/1.1\r\n';
    let host = false;
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const name = headers[i]!;
      if (name.length === 4 && name.toLowerCase() === 'host') host = true;
      head += name + ': ' + headers[i + 1]! + '\r\n';
    }
    if (!host) head += 'host: ' + this.hostHeader + '\r\n';
    // A Buffer body (empty when none): the head then goes out as latin1, byte for byte as uWS read it.
    return this.submit(new PoolRequest(this, head + 'content-length: ', body ?? EMPTY, handler, method === 'HEAD'));
  }

  /** Dispatches a new request, or fails it (asynchronously) when the pool is closing. */
  private submit(req: PoolRequest): PoolRequest {
    if (this.closing) {
      req.finished = true;
      queueMicrotask(() => req.handler.onError(new PoolError('pool-closed', 'The upstream pool is closed')));
      return req;
    }
    this.dispatch(req);
    return req;
  }

  /**
   * Puts a request on an idle connection, else a new one, else the queue. Resting (`rests`): an
   * idle connection that has rested, else a new one, else the one that rested longest; else the
   * most recently used idle one, whose socket is warm and which lets the others idle out.
   */
  dispatch(req: PoolRequest): void {
    // One clock reading for the choice and the send's stamps (performance.now: some 300 instructions).
    const now = performance.now();
    const room = this.conns.size < this.opts.connections;
    const conn = this.rests ? this.idleFirst : this.idleLast;
    if (conn !== undefined && (!this.rests || !room || now - conn.activeAt >= this.reuseAfterMs)) {
      this.unidle(conn);
      conn.send(req, now);
    } else if (room) this.open().send(req, now);
    else this.queue.push(req);
  }

  /** A connection met a delayed-ACK stall (Connection.onBytes): its connections rest from now on. */
  noteStall(): void {
    this.rests = true;
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
      conn.send(next, performance.now());
      return;
    }
    if (this.closing) {
      conn.destroy();
      return;
    }
    // Its rest counts from conn.activeAt: the read that ended the response stamped it (or resume()).
    conn.idle = true;
    conn.idlePrev = this.idleLast;
    conn.idleNext = undefined;
    if (this.idleLast === undefined) this.idleFirst = conn;
    else this.idleLast.idleNext = conn;
    this.idleLast = conn;
    this.idleCount++;
  }

  /** Takes a connection off the idle list (to serve a request, or closing: no request is put on it). */
  unidle(conn: Connection): void {
    if (!conn.idle) return;
    conn.idle = false;
    const prev = conn.idlePrev;
    const next = conn.idleNext;
    if (prev === undefined) this.idleFirst = next;
    else prev.idleNext = next;
    if (next === undefined) this.idleLast = prev;
    else next.idlePrev = prev;
    conn.idlePrev = conn.idleNext = undefined;
    this.idleCount--;
  }

  /** A connection closed (for whatever reason). */
  forget(conn: Connection): void {
    if (!this.conns.delete(conn)) return;
    this.unidle(conn);
    if (this.conns.size === 0 && this.sweeper) {
      clearInterval(this.sweeper);
      this.sweeper = undefined;
      this.probe?.cancel('nothing waits on it');
      this.probe = undefined;
    }
    // A queued request needs a connection: open one in its place.
    const next = this.queue.shift();
    if (next) this.open().send(next, performance.now());
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
      while (this.idleFirst !== undefined) this.idleFirst.destroy(); // destroy() takes it off the list
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
    const probe = this.probe;
    if (probe !== undefined && probe.state === 'running' && now - probe.startedAt >= o.headersTimeoutMs) {
      probe.cancel(`GET ${probe.path}: no answer within ${o.headersTimeoutMs} ms`);
    }
    let ask = false;
    for (const c of this.conns) {
      const quiet = now - c.activeAt;
      if (c.req === undefined) {
        if (quiet >= o.keepAliveTimeoutMs) c.destroy(); // idle (a connection gets its request when opened)
      } else if (!c.connected) {
        if (quiet >= o.connectTimeoutMs) c.fail(new PoolError('connect', `Connect timeout after ${o.connectTimeoutMs} ms`, 'UPSTREAM_CONNECT_TIMEOUT'));
      } else if (now - c.sentAt >= this.requestTimeoutMs) {
        c.fail(new PoolError('request-timeout', `The response did not end within ${this.requestTimeoutMs} ms`));
      } else if (c.state === HEAD || !c.paused) {
        const head = c.state === HEAD;
        const limit = head ? o.headersTimeoutMs : o.bodyTimeoutMs;
        // Past its limit, and nothing from the backend for as long either: dead, unless it answers a probe.
        if (quiet < limit || now - this.heardAt < limit) continue;
        if (probe !== undefined && probe.state === 'dead' && probe.startedAt >= c.activeAt + limit) {
          c.fail(this.silence(head, limit, probe.detail));
        } else if (o.probePath === undefined) {
          c.fail(this.silence(head, limit, 'nothing else came from the backend'));
        } else {
          ask = true;
        }
      }
    }
    if (probe !== undefined && probe.state !== 'running') this.probe = undefined; // its verdict is used
    if (ask && this.probe === undefined && o.probePath !== undefined) this.ask(now, o.probePath);
  }

  private silence(head: boolean, limit: number, why: string): PoolError {
    return head
      ? new PoolError('headers-timeout', `No response head within ${limit} ms, and no sign of life from the backend (${why})`)
      : new PoolError('body-timeout', `No response data within ${limit} ms, and no sign of life from the backend (${why})`);
  }

  /** Sends the liveness probe: an answer is a sign of life; its failure fails the requests waiting past their limit at the next sweep. */
  private ask(now: number, path: string): void {
    this.probe = new LivenessProbe(
      { host: this.host, port: this.port, secure: this.secure, hostHeader: this.hostHeader, tls: this.opts.tls },
      path,
      now,
      (p) => {
        if (p.state === 'alive') this.heardAt = performance.now();
      },
    );
  }
}
