// Forwards one HTTP request to an instance and relays its response to a uWS client, verbatim:
// status, headers (minus hop-by-hop framing, which uWS writes itself) and body bytes as they
// arrive. Used by the dedicated endpoints, the instance proxy and (ResponseRelay alone) the
// tunnel broker.
//
// - Writes go through the gateway's response writer (lib/relay/response-writer.ts): the chunks of
//   one read in one corked write; when uWS cannot take more the source is paused and resumed
//   from onWritable; a client that goes away aborts the upstream exchange.
// - A body that arrives whole with its Content-Length is written in one corked end() (so the
//   client sees the length); otherwise the response is chunked.
import type { Res } from '../http.js';
import type { HttpRequest } from '../uws.js';
import { forwardableRequestHeader, isPlatformSetCookie, SERVICE_WORKER_ALLOWED_HEADER } from '../instance-credentials.js';

import { HttpPool, type HeaderLines, type PoolError, type ResponseHandler } from './http-pool.js';
import { CLIENT_CLOSED, contentLengthOf, headerNameIs, ResponseWriter, type HeaderFilter, type HeaderName, type WriterHooks } from './response-writer.js';

const SET_COOKIE = Buffer.from('set-cookie');
const SERVICE_WORKER_ALLOWED = Buffer.from(SERVICE_WORKER_ALLOWED_HEADER);

/**
 * Response headers an instance never gets through a front door (lib/instance-credentials.ts): a
 * Set-Cookie that sets, replaces or clears a platform cookie, and Service-Worker-Allowed (a
 * tenant's service worker never takes a scope above its script's path).
 */
export function isForbiddenInstanceHeader(name: HeaderName, value: HeaderName): boolean {
  return (headerNameIs(name, SET_COOKIE) && isPlatformSetCookie(value.toString())) || headerNameIs(name, SERVICE_WORKER_ALLOWED);
}

/** Request headers never forwarded: framing (the backend client writes its own) and hop-by-hop ones. */
const HOP_BY_HOP_REQUEST = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'content-length',
  'proxy-authorization',
  'http2-settings',
]);

const noop = (): void => {};

/**
 * Writes one response to a uWS client from any source (undici, tunnel frames), verbatim, through
 * the gateway's one response writer (lib/relay/response-writer.ts: cork batching, backpressure,
 * abort, finish once, hop-by-hop filtering). The source calls head(), then data() per chunk
 * (false: pause until `resume` is called), then end() or fail().
 */
export class ResponseRelay implements WriterHooks {
  /** Set by the source: called when a paused body may flow again. */
  resume: () => void = noop;
  /** Set by the source: called when the client goes away. */
  abortSource: () => void = noop;
  status = 0;
  private readonly out: ResponseWriter;
  private contentLength = -1;
  private held: Buffer | undefined;
  private done = false;

  constructor(
    res: Res,
    /** Request method (HEAD responses have no body). */
    private readonly method: string,
    /** Called once when the response has ended, failed or was abandoned by the client. */
    private readonly onEnded: (status: number) => void = noop,
    /** The route's own response header rule (true drops the header), after the hop-by-hop list. */
    dropHeader?: HeaderFilter,
  ) {
    const drop: HeaderFilter = dropHeader ? (name, value) => isForbiddenInstanceHeader(name, value) || dropHeader(name, value) : isForbiddenInstanceHeader;
    this.out = new ResponseWriter(res, this, { dropHeader: drop });
  }

  get finished(): boolean {
    return this.done;
  }

  /** Bytes of body this response holds and the client has not taken yet, at most (lib/relay/response-writer.ts heldBytes). */
  get heldBytes(): number {
    return this.out.heldBytes + (this.held === undefined ? 0 : this.held.length);
  }

  /** True while the client cannot take more (the source was told to pause). */
  get isFull(): boolean {
    return this.out.isFull;
  }

  // WriterHooks

  onAbort(): void {
    this.abortSource();
    this.out.finish(CLIENT_CLOSED, undefined);
  }

  onDrain(): void {
    this.resume();
  }

  onFinish(status: number): void {
    this.done = true;
    this.onEnded(status);
  }

  // The source's calls

  /** The response head: status and a flat name, value, name, value... list. */
  head(status: number, headers: readonly (string | Buffer)[]): void {
    this.status = status;
    this.contentLength = contentLengthOf(headers);
    this.out.head(status, headers);
  }

  /** One body chunk (kept by reference until written). Returns false when the source should pause. */
  data(chunk: Buffer): boolean {
    const out = this.out;
    if (this.done || out.isClosed) return true;
    if (!out.started && this.held === undefined && chunk.length === this.contentLength) {
      this.held = chunk;
      return true;
    }
    if (this.held) {
      out.write(this.held);
      this.held = undefined;
    }
    return out.write(chunk) || out.pauseSource();
  }

  end(): void {
    if (this.done) return;
    const out = this.out;
    if (this.held === undefined && !out.started && (this.method === 'HEAD' || this.status === 204 || this.status === 304)) {
      out.endWithoutBody(this.contentLength >= 0 && this.method === 'HEAD' ? this.contentLength : undefined);
    } else {
      out.end(this.held);
    }
    out.finish(this.status, undefined);
  }

  /**
   * The source failed. Before anything reached the client: answers `status` with `{detail}` (and
   * `headers`). After: cuts the connection, so a truncated body is never taken as whole.
   */
  fail(status: number, detail: string, headers?: Record<string, string>): void {
    if (this.done) return;
    const out = this.out;
    if (!out.started) {
      out.reply(status, JSON.stringify({ detail }), headers);
      out.finish(status, undefined);
      return;
    }
    out.cut();
    out.finish(this.status, undefined);
  }
}

/**
 * The request headers to forward, as a flat list, read from a uWS request (call synchronously in
 * the handler). `drop` names more headers to leave out (lower case). Platform credentials (the
 * platform's cookies, the CSRF header, a platform key) never reach an instance, whoever calls
 * (lib/instance-credentials.ts).
 */
export function forwardedHeaders(req: HttpRequest, drop: ReadonlySet<string>): string[] {
  const out: string[] = [];
  req.forEach((name, value) => {
    if (HOP_BY_HOP_REQUEST.has(name) || drop.has(name)) return;
    const kept = forwardableRequestHeader(name, value);
    if (kept !== undefined) out.push(name, kept);
  });
  return out;
}

export interface PoolOptions {
  /** Keep-alive connections per instance address. */
  connections: number;
  /** Silence before the response head that fails the request once the instance shows no sign of life either (lib/relay/http-pool.ts). */
  headersTimeoutMs: number;
  /** The same between two body chunks. */
  idleTimeoutMs: number;
  /** From the request's write to the end of its response, whatever the instance shows. */
  requestTimeoutMs: number;
  connectTimeoutMs: number;
  /** The GET that asks a silent instance whether it lives (any answer below 500 is life); undefined: none. */
  probePath: string | undefined;
}

export const DEFAULT_POOL_OPTIONS: PoolOptions = {
  connections: 64,
  headersTimeoutMs: 300_000,
  idleTimeoutMs: 300_000,
  requestTimeoutMs: 1_800_000,
  connectTimeoutMs: 5_000,
  // The serving backends behind the dedicated endpoints (vLLM, SGLang, llama.cpp) answer it; any
  // other server's 404 is an answer too.
  probePath: '/health',
};

/** One pool of the gateway's backend client (lib/relay/http-pool.ts) per instance address (`host:port`), created on first use. */
export class InstancePools {
  private readonly pools = new Map<string, HttpPool>();
  readonly opts: PoolOptions;

  constructor(opts: Partial<PoolOptions> = {}) {
    this.opts = { ...DEFAULT_POOL_OPTIONS, ...opts };
  }

  get(address: string): HttpPool {
    let p = this.pools.get(address);
    if (!p) {
      p = new HttpPool(`http://${address}`, {
        connections: this.opts.connections,
        headersTimeoutMs: this.opts.headersTimeoutMs,
        bodyTimeoutMs: this.opts.idleTimeoutMs,
        requestTimeoutMs: this.opts.requestTimeoutMs,
        connectTimeoutMs: this.opts.connectTimeoutMs,
        probePath: this.opts.probePath,
        keepAliveTimeoutMs: 30_000,
      });
      this.pools.set(address, p);
    }
    return p;
  }

  /** Closes the pool of an address that is gone (requests in flight finish). */
  drop(address: string): void {
    const p = this.pools.get(address);
    if (!p) return;
    this.pools.delete(address);
    p.close().catch(noop);
  }

  /** Addresses with a pool (each kept until drop() or close()). */
  get size(): number {
    return this.pools.size;
  }

  async close(): Promise<void> {
    const all = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(all.map((p) => p.destroy().catch(noop)));
  }
}

export interface ForwardRequest {
  method: string;
  /** Path and query as sent to the instance. */
  path: string;
  /** Flat name, value list (forwardedHeaders()). */
  headers: string[];
  body: Buffer | undefined;
}

/** Sends `request` to the instance at `address` and relays the response to `relay`. */
export function forward(pools: InstancePools, address: string, request: ForwardRequest, relay: ResponseRelay): void {
  const source = new PoolSource(relay);
  const call = pools.get(address).send(request.method, request.path, request.headers, request.body, source);
  relay.resume = () => call.resume();
  relay.abortSource = () => {
    source.cancelled = true;
    call.abort();
  };
}

/** The backend client's response handler feeding a ResponseRelay. */
class PoolSource implements ResponseHandler {
  cancelled = false;

  constructor(private readonly relay: ResponseRelay) {}

  onHead(status: number, headers: HeaderLines): void {
    this.relay.head(status, headers.all());
  }

  onData(chunk: Buffer): boolean {
    return this.relay.data(chunk);
  }

  onEnd(): void {
    this.relay.end();
  }

  onError(err: PoolError): void {
    if (this.cancelled) return; // the relay finished already (client closed)
    const timeout = err.failure === 'headers-timeout' || err.failure === 'body-timeout' || err.failure === 'request-timeout';
    this.relay.fail(timeout ? 504 : 502, timeout ? 'The instance did not answer in time' : 'The instance is unreachable');
  }
}
