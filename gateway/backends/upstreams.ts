// Upstreams: one keep-alive connection pool (http-pool.ts) per backend URL, the choice of
// upstream per request (the model's routing policy: router.ts for 'prefix' and 'round-robin';
// 'least-loaded' here: sticky by user, else fewest in flight), passive health (a backend that
// refuses connections or fails repeatedly is taken out for a while), and one exchange per
// request that reports the response to an UpstreamHandler with backpressure and abort.
import type { ErrorCode } from '../errors.js';
import { performance } from 'node:perf_hooks';
import { RcError } from '../../lib/errors.js';
import type { ModelState } from './model-catalog.js';
import { REASON_FALLBACK, REASON_KEY, REASON_LOAD } from '../metrics.js';
import { fnv1a, mix } from './prefix-key.js';
import { type RouteHint, routeUser } from './route-hint.js';
import type { RouterOptions } from './router.js';
import { LoadScraper } from './load-scraper.js';
import { HttpPool, type HeaderLines, type PoolError, type PoolRequest, type ResponseHandler } from '../../lib/relay/http-pool.js';

export { fnv1a } from './prefix-key.js';

/** A request's route: a RouteHint (route-hint.ts), or a sticky user key as a string. */
export type Route = RouteHint | string | undefined;

export interface UpstreamOptions extends RouterOptions {
  /** Keep-alive connections per upstream. */
  connections: number;
  /**
   * Silence before a response head that fails the request once the backend has shown no sign of
   * life for as long either (nothing read from it, its /health not answering): a dead backend. A
   * busy one is waited for (lib/relay/http-pool.ts, "Waiting on a busy backend").
   */
  headersTimeoutMs: number;
  /** The same between two body chunks. */
  idleTimeoutMs: number;
  /** From the request's write to the end of its response, whatever the backend shows: the total limit. */
  requestTimeoutMs: number;
  connectTimeoutMs: number;
  /** How long an unhealthy upstream stays out. */
  ejectMs: number;
  /** Consecutive failures (5xx, timeouts, resets) that take an upstream out; a refused connection does at once. */
  failuresToEject: number;
}

export const DEFAULT_UPSTREAM_OPTIONS: UpstreamOptions = {
  connections: 256,
  headersTimeoutMs: 60_000,
  idleTimeoutMs: 120_000,
  requestTimeoutMs: 1_800_000,
  connectTimeoutMs: 5_000,
  ejectMs: 10_000,
  failuresToEject: 3,
  routeEntries: 65_536,
  routeEpsilon: 0.25,
  routeMinCeiling: 4,
  routeKeepEpsilon: 1,
  routeMaxWaiting: 4,
  metricsIntervalMs: 0,
};

/** Paths whose requests compute no KV cache (counting a prompt): routed, but not learned as a prefix. */
const COUNT_PATHS = new Set(['/tokenize', '/apply-template']);

export type UpstreamErrorKind = 'unavailable' | 'timeout' | 'idle' | 'reset' | 'aborted';

/** The error code of each kind (gateway/errors.ts ERROR_CODES). */
const UPSTREAM_CODES: Record<UpstreamErrorKind, ErrorCode> = {
  unavailable: 'RC_ERR_UPSTREAM_UNAVAILABLE',
  timeout: 'RC_ERR_UPSTREAM_TIMEOUT',
  idle: 'RC_ERR_UPSTREAM_IDLE',
  reset: 'RC_ERR_UPSTREAM_RESET',
  aborted: 'RC_ERR_UPSTREAM_ABORTED',
};

/** A backend exchange failed. `headSeen`: the response head had arrived (so part of it may be relayed). */
export class UpstreamError extends RcError {
  constructor(
    readonly kind: UpstreamErrorKind,
    message: string,
    readonly headSeen: boolean,
    cause?: unknown,
  ) {
    super(UPSTREAM_CODES[kind], message, 502, { cause });
  }
}

/** What a request path implements to receive a backend response. */
export interface UpstreamHandler {
  /** The response head: its status and header lines (HeaderLines makes Buffers of them on demand). */
  onHead(status: number, headers: HeaderLines): void;
  /** A body chunk as it arrived (valid to keep). Return false to pause until `call.resume()`. */
  onData(chunk: Buffer): boolean;
  /** The body is complete (this may follow an onData that returned false: nothing more is coming). */
  onEnd(): void;
  /** Called at most once, instead of onEnd. */
  onError(err: UpstreamError): void;
}

/** The caller's handle on an exchange. */
export interface UpstreamCall {
  /** Cancels the exchange (client went away); frees the pool connection. onError('aborted') follows. */
  abort(): void;
  /** Resumes a body paused by onData returning false. */
  resume(): void;
}

export const CHAT_PATH = '/v1/chat/completions';

export class Upstream {
  readonly pool: HttpPool;
  /** Request path prefix from the URL ('' for a bare origin; '/v1' handled as the API root). */
  readonly basePath: string;
  readonly chatPath: string;
  /** Per-upstream seed for rendezvous hashing. */
  readonly seed: number;
  inflight = 0;
  /** Epoch ms until which the upstream is out; 0 when healthy. */
  ejectedUntil = 0;
  /** Times taken out (a prefix router forgets what it learned of the upstream when this moves). */
  ejections = 0;
  /** vLLM's `vllm:num_requests_waiting` as last read from its /metrics, and when (epoch ms; 0: never). */
  waiting = 0;
  waitingAt = 0;
  private failures = 0;

  constructor(
    readonly url: string,
    private readonly opts: UpstreamOptions,
  ) {
    const u = new URL(url);
    let path = u.pathname.replace(/\/+$/, '');
    if (path.endsWith('/v1')) path = path.slice(0, -3);
    this.basePath = path;
    this.chatPath = path + CHAT_PATH;
    this.seed = fnv1a(url);
    this.pool = new HttpPool(u, {
      connections: opts.connections,
      headersTimeoutMs: opts.headersTimeoutMs,
      bodyTimeoutMs: opts.idleTimeoutMs,
      requestTimeoutMs: opts.requestTimeoutMs,
      connectTimeoutMs: opts.connectTimeoutMs,
      // vLLM, SGLang and llama.cpp all serve GET /health at the server's root.
      probePath: `${path}/health`,
      // Below the servers' own idle timeouts (uvicorn's, hence vLLM's and SGLang's, 5 s; uWS's
      // 10 s; undici keeps 4 s for the same reason): a connection the backend is about to close
      // is not reused, which leaves the stale-connection retry for the rare race.
      keepAliveTimeoutMs: 4_000,
    });
  }

  healthy(now: number): boolean {
    if (this.ejectedUntil === 0) return true;
    if (now < this.ejectedUntil) return false;
    // Back in after its time out; one more failure takes it out again.
    this.ejectedUntil = 0;
    this.failures = this.opts.failuresToEject - 1;
    return true;
  }

  succeeded(): void {
    this.failures = 0;
  }

  failed(): void {
    if (++this.failures >= this.opts.failuresToEject) this.eject();
  }

  eject(): void {
    this.ejectedUntil = Date.now() + this.opts.ejectMs;
    this.failures = 0;
    this.ejections = (this.ejections + 1) >>> 0;
  }
}

/** All upstreams by URL, shared by every model that names them. */
export class UpstreamRegistry {
  private readonly byUrl = new Map<string, Upstream>();
  private rotor = 0;
  readonly opts: UpstreamOptions;
  private readonly scraper: LoadScraper | undefined;
  /** The upstreams whose vLLM queue is read: those of the models routed by prefix (the only readers). */
  private loadRead: readonly Upstream[] = [];

  constructor(opts: Partial<UpstreamOptions> = {}) {
    this.opts = { ...DEFAULT_UPSTREAM_OPTIONS, ...opts };
    if (this.opts.metricsIntervalMs > 0) this.scraper = new LoadScraper(() => this.loadRead, this.opts.metricsIntervalMs);
  }

  /** Reads the vLLM queue of these upstreams (and of no other) from now on, when an interval is set. */
  readLoadOf(upstreams: Iterable<Upstream>): void {
    this.loadRead = [...new Set(upstreams)];
  }

  get(url: string): Upstream {
    const key = url.endsWith('/') ? url.slice(0, -1) : url;
    let u = this.byUrl.get(key);
    if (!u) this.byUrl.set(key, (u = new Upstream(key, this.opts)));
    return u;
  }

  all(): Upstream[] {
    return [...this.byUrl.values()];
  }

  /** Closes (gracefully: requests in flight finish) every upstream whose URL is not in `keep`. */
  retain(keep: Set<string>): void {
    for (const [url, u] of this.byUrl) {
      if (keep.has(url)) continue;
      this.byUrl.delete(url);
      u.pool.close().catch(() => {});
    }
  }

  async close(): Promise<void> {
    this.scraper?.stop();
    const pools = [...this.byUrl.values()].map((u) => u.pool);
    this.byUrl.clear();
    await Promise.all(pools.map((p) => p.destroy().catch(() => {})));
  }

  /**
   * Chooses an upstream of `model` by its routing policy (`model.router`; none: 'least-loaded').
   * `route` is a RouteHint (route-hint.ts) or a sticky user key. When none is healthy, the one
   * that comes back soonest. `skip` lists upstreams already tried by this request. A model with
   * one upstream costs nothing more.
   */
  pick(model: ModelState, route: Route, skip?: readonly Upstream[]): Upstream | undefined {
    const ups = model.upstreams;
    const n = ups.length;
    if (n === 0) return undefined;
    if (n === 1) return skip?.includes(ups[0]!) ? undefined : ups[0];
    const now = Date.now();
    const router = model.router;
    const i = router !== undefined ? router.choose(ups, route, skip, now) : this.leastLoaded(model, routeUser(route), skip, now);
    if (i >= 0) return ups[i];
    let best = -1;
    for (let k = 0; k < n; k++) if (!skip?.includes(ups[k]!) && (best < 0 || ups[k]!.ejectedUntil < ups[best]!.ejectedUntil)) best = k;
    if (best < 0) return undefined;
    count(model, best, REASON_FALLBACK);
    return ups[best];
  }

  /**
   * 'least-loaded': with a sticky key, the healthy upstream that key hashes to (rendezvous
   * hashing, so a key keeps its upstream while that one stays healthy); without, the healthy
   * one with the fewest requests in flight. The index, or -1 when none is healthy.
   */
  private leastLoaded(model: ModelState, sticky: string | undefined, skip: readonly Upstream[] | undefined, now: number): number {
    const ups = model.upstreams;
    const n = ups.length;
    let best = -1;
    if (sticky !== undefined && sticky !== '') {
      const h = fnv1a(sticky);
      let bestScore = -1;
      for (let i = 0; i < n; i++) {
        const u = ups[i]!;
        if (!u.healthy(now) || skip?.includes(u)) continue;
        const score = mix(h ^ u.seed);
        if (score > bestScore) {
          bestScore = score;
          best = i;
        }
      }
      if (best >= 0) count(model, best, REASON_KEY);
      return best;
    }
    const start = this.rotor++ % n;
    for (let k = 0; k < n; k++) {
      const i = (start + k) % n;
      const u = ups[i]!;
      if (!u.healthy(now) || skip?.includes(u)) continue;
      if (best < 0 || u.inflight < ups[best]!.inflight) best = i;
    }
    if (best >= 0) count(model, best, REASON_LOAD);
    return best;
  }

  /**
   * Sends `body` (a chat-completions request, or `path` under the upstream's root) to an
   * upstream of `model` and reports the response to `handler`. A backend that refuses the
   * connection is taken out and the request goes to the next upstream, if any.
   */
  send(model: ModelState, route: Route, body: Buffer | string, handler: UpstreamHandler, path: string = CHAT_PATH): UpstreamCall {
    const ex = new Exchange(this, model, route, body, handler, path);
    ex.start(this.pick(model, route));
    return ex;
  }
}

/** Counts a route choice (metrics.ts RouteSeries). */
function count(model: ModelState, i: number, reason: number): void {
  const c = model.choices;
  if (c !== undefined) c[i]![reason]!++;
}

/** One request to the backends (one upstream, or more when a connection is refused). */
class Exchange implements ResponseHandler, UpstreamCall {
  private upstream: Upstream | undefined;
  private tried: Upstream[] | undefined;
  private request: PoolRequest | undefined;
  private cancelled = false;
  private headSeen = false;
  private firstByte = false;
  private done = false;
  private t0 = 0;

  constructor(
    private readonly registry: UpstreamRegistry,
    private readonly model: ModelState,
    private readonly route: Route,
    private readonly body: Buffer | string,
    private readonly handler: UpstreamHandler,
    private readonly path: string,
  ) {}

  start(u: Upstream | undefined): void {
    if (!u) {
      // Reported asynchronously, like every other outcome, so callers see one behaviour.
      queueMicrotask(() => this.fail(new UpstreamError('unavailable', `No upstream available for model ${this.model.name}`, false)));
      return;
    }
    this.upstream = u;
    const router = this.model.router;
    if (router !== undefined && !COUNT_PATHS.has(this.path)) router.learn(this.route, this.model.upstreams, u);
    u.inflight++;
    const request = u.pool.request(this.path === CHAT_PATH ? u.chatPath : u.basePath + this.path, this.body, this);
    this.request = request;
    // The times count from the write, stamped by the pool; a request that waits for a connection
    // counts its wait too.
    this.t0 = request.conn !== undefined ? request.sentAt : performance.now();
  }

  abort(): void {
    if (this.cancelled || this.done) return;
    this.cancelled = true;
    this.request?.abort(); // onError('aborted') follows
  }

  resume(): void {
    this.request?.resume();
  }

  // http-pool ResponseHandler ------------------------------------------------------------

  onHead(status: number, headers: HeaderLines): void {
    this.headSeen = true;
    if (status >= 500) this.upstream!.failed();
    else this.upstream!.succeeded();
    this.handler.onHead(status, headers);
  }

  onData(chunk: Buffer): boolean {
    if (!this.firstByte) {
      this.firstByte = true;
      this.model.series.ttfbSeconds.observe((this.request!.readAt - this.t0) / 1000);
    }
    return this.handler.onData(chunk);
  }

  onEnd(): void {
    if (this.done) return;
    this.done = true;
    this.upstream!.inflight--;
    // The read that ended the response (its time stamped by the pool).
    this.model.series.upstreamSeconds.observe((this.request!.readAt - this.t0) / 1000);
    this.handler.onEnd();
  }

  onError(err: PoolError): void {
    if (this.done) return;
    const u = this.upstream!;
    u.inflight--;
    if (this.cancelled || err.failure === 'aborted') {
      this.fail(new UpstreamError('aborted', 'Client went away', this.headSeen, err));
      return;
    }
    if (err.failure === 'connect') {
      // Nothing reached the backend: take it out and try the next upstream, if any.
      u.eject();
      (this.tried ??= []).push(u);
      const next = this.registry.pick(this.model, this.route, this.tried);
      if (next) {
        this.request = undefined;
        this.start(next);
        return;
      }
      this.fail(new UpstreamError('unavailable', `Upstream ${u.url} unreachable: ${err.message}`, false, err));
      return;
    }
    let kind: UpstreamErrorKind = 'reset';
    if (err.failure === 'headers-timeout' || err.failure === 'request-timeout') kind = 'timeout';
    else if (err.failure === 'body-timeout') kind = 'idle';
    // A silence timeout is a dead backend (the pool waits while it shows life): it counts toward
    // taking it out, as a broken exchange without a head does. The total limit is a slow answer,
    // not a failing backend: it never counts.
    if (err.failure !== 'request-timeout' && (!this.headSeen || kind === 'idle')) u.failed();
    this.fail(new UpstreamError(kind, `Upstream ${u.url}: ${err.message}`, this.headSeen, err));
  }

  private fail(err: UpstreamError): void {
    if (this.done) return;
    this.done = true;
    this.handler.onError(err);
  }
}

/** Collected response of `request()`. */
export interface UpstreamResponse {
  status: number;
  /** Header names lower-cased; repeated headers keep the last value. */
  headers: Record<string, string>;
  body: Buffer;
}

/**
 * Promise form of `send()` for callers that need the whole body (for example a non-stream
 * messages request that is translated before it is answered). `signal` aborts the exchange.
 */
export function requestUpstream(
  registry: UpstreamRegistry,
  model: ModelState,
  route: Route,
  body: Buffer | string,
  opts: { path?: string; signal?: AbortSignal; maxBytes?: number } = {},
): Promise<UpstreamResponse> {
  return new Promise((resolve, reject) => {
    let status = 0;
    const headers: Record<string, string> = {};
    const parts: Buffer[] = [];
    let size = 0;
    let call: UpstreamCall | undefined;
    const onAbort = () => call?.abort();
    call = registry.send(
      model,
      route,
      body,
      {
        onHead(s, lines) {
          status = s;
          const raw = lines.all();
          for (let i = 0; i + 1 < raw.length; i += 2) headers[raw[i]!.toString('latin1').toLowerCase()] = raw[i + 1]!.toString('latin1');
        },
        onData(chunk) {
          size += chunk.length;
          if (opts.maxBytes !== undefined && size > opts.maxBytes) {
            call?.abort();
            return true;
          }
          parts.push(chunk);
          return true;
        },
        onEnd() {
          opts.signal?.removeEventListener('abort', onAbort);
          resolve({ status, headers, body: parts.length === 1 ? parts[0]! : Buffer.concat(parts) });
        },
        onError(err) {
          opts.signal?.removeEventListener('abort', onAbort);
          reject(err);
        },
      },
      opts.path,
    );
    if (opts.signal?.aborted) call.abort();
    else opts.signal?.addEventListener('abort', onAbort, { once: true });
  });
}
