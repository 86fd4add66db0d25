// The model gateway: a uWebSockets.js app with the chat routes, any route plugins (the
// messages protocol), /metrics and /health, over an in-memory key directory and catalog.
import { DEFAULT_PARSE_BUDGET } from './request/parse-budget.js';
import { DEFAULT_UPLOAD_LIMITS, UploadLimits } from '../lib/upload-limits.js';
import { DEFAULT_STREAM_LIMITS, modelStreamLimits } from './request/held-streams.js';
import type { Bus } from '../lib/bus.js';
import type { ModelEntry } from '../lib/config.js';
import { ListenError } from '../lib/errors.js';
import { listen, sendJson, track, type Server } from '../lib/http.js';
import { listenMetrics } from '../lib/prometheus.js';
import { createLogger, type Logger } from '../lib/log.js';
import { uws, type HttpRequest, type HttpResponse, type TemplatedApp } from '../lib/uws.js';
import { Catalog } from './backends/model-catalog.js';
import { chatRoutes } from './chat/routes.js';
import { responsesRoutes } from './responses/routes.js';
import { Admission, type GatewayContext, type GatewayLimits, type RoutePlugin } from './context.js';
import { ERRORS, notFound, sendCanned, sendError } from './errors.js';
import { openGate, type RequestGate } from './gates/gate.js';
import { gateMetrics } from './gates/index.js';
import { Credentials } from './auth/credentials.js';
import { KeyDirectory, type KeySource } from './auth/keys.js';
import { SessionDirectory } from './auth/sessions.js';
import type { CookieSecureMode } from '../lib/session-cookie.js';
import { GatewayMetrics, NO_MODEL } from './metrics.js';
import { UpstreamRegistry, type UpstreamOptions } from './backends/upstreams.js';

/** Route plugins every gateway registers. gateway/messages/ adds its plugin here. */
export const BUILTIN_ROUTES: RoutePlugin[] = [chatRoutes, responsesRoutes];

export interface GatewayOptions {
  host?: string;
  /** 0: an ephemeral port. */
  port: number;
  models: readonly ModelEntry[];
  keySource: KeySource;
  /** Keeps the key directory current (key.issued / key.revoked). */
  bus?: Bus;
  gate?: RequestGate;
  logger?: Logger;
  limits?: Partial<GatewayLimits>;
  upstream?: Partial<UpstreamOptions>;
  /** Routes in addition to BUILTIN_ROUTES. */
  routes?: RoutePlugin[];
  /**
   * Where Prometheus reads /metrics: a listener of its own, never the public port (whose clients
   * are anyone). Default: `host`, any free port (`metricsUrl` tells which).
   */
  metrics?: { host?: string; port: number };
  /** Share `port` with other gateway processes (SO_REUSEPORT; lib/http.ts `listen`). */
  reusePort?: boolean;
  /** RC_COOKIE_SECURE: which session cookie the shared model routes read (lib/session-cookie.ts); default auto. */
  cookieSecure?: CookieSecureMode;
  /** RC_TRUST_PROXY: behind a reverse proxy, the per-address limits count the last X-Forwarded-For entry (lib/client-address.ts). */
  trustProxy?: boolean;
}

export interface Gateway {
  readonly url: string;
  readonly port: number;
  /** The Prometheus listener's URL (`<metricsUrl>/metrics`). */
  readonly metricsUrl: string;
  readonly context: GatewayContext;
  readonly metrics: GatewayMetrics;
  /** The browser sessions accepted on the shared model routes (a standalone gateway resyncs them). */
  readonly sessions: SessionDirectory;
  /** Replaces the catalog; requests in flight finish on the upstreams they started with. */
  setModels(models: readonly ModelEntry[]): void;
  /** Stops listening, lets requests in flight finish for up to `graceMs`, then closes everything. */
  close(graceMs?: number): Promise<void>;
}

export const DEFAULT_LIMITS: GatewayLimits = {
  maxBodyBytes: 8 * 1024 * 1024,
  maxInflight: 2048,
  defaultMaxTokens: 1024,
  parseBudget: DEFAULT_PARSE_BUDGET,
  uploads: DEFAULT_UPLOAD_LIMITS,
  streams: DEFAULT_STREAM_LIMITS,
};

export async function createGateway(options: GatewayOptions): Promise<Gateway> {
  const logger = options.logger ?? createLogger(undefined, { part: 'gateway' });
  const limits: GatewayLimits = { ...DEFAULT_LIMITS, ...options.limits };
  limits.uploads = { ...DEFAULT_UPLOAD_LIMITS, ...options.limits?.uploads };
  limits.streams = { ...DEFAULT_STREAM_LIMITS, ...options.limits?.streams };
  const metrics = new GatewayMetrics();
  const admission = new Admission(limits.maxInflight);
  metrics.inflight = () => admission.inflight;
  const upstreams = new UpstreamRegistry(options.upstream);
  const catalog = new Catalog(upstreams, metrics);
  catalog.set(options.models);
  const keys = new KeyDirectory();
  await keys.start(options.keySource, options.bus);
  const sessions = new SessionDirectory();
  await sessions.start(options.keySource.loadSessions?.bind(options.keySource), options.bus);
  const credentials = new Credentials(keys, sessions, options.cookieSecure);

  const ctx: GatewayContext = {
    limits,
    trustProxy: options.trustProxy === true,
    logger,
    keys,
    catalog,
    upstreams,
    admission,
    uploads: new UploadLimits(limits.uploads),
    streams: modelStreamLimits(limits.streams),
    gate: options.gate ?? openGate,
    metrics,
    authenticate: (authorization, xApiKey) => credentials.key(authorization, xApiKey),
    authenticateShared: (req) => credentials.shared(req),
    authenticateHeaders: (h) => credentials.sharedOf(h),
  };

  const app = uws().App();
  registerRoutes(app, ctx, options.routes ?? []);

  let server: Server;
  let metricsServer: Server;
  try {
    server = await listen(app, options.host ?? '127.0.0.1', options.port, () => admission.inflight === 0, { reusePort: options.reusePort });
    // The gateway's and the gates' counters, on a listener of its own (lib/prometheus.ts).
    const render = () => metrics.render() + gateMetrics();
    metricsServer = await listenMetrics(render, options.metrics?.host ?? options.host ?? '127.0.0.1', options.metrics?.port ?? 0).catch(
      async (err: unknown) => {
        await server.close();
        throw err instanceof ListenError ? err.naming('RC_METRICS_PORT') : err;
      },
    );
  } catch (err) {
    keys.stop();
    await upstreams.close();
    throw err;
  }
  logger.debug('gateway listening', { url: server.url, models: catalog.names() });

  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    port: server.port,
    metricsUrl: metricsServer.url,
    context: ctx,
    metrics,
    sessions,
    setModels(models) {
      catalog.set(models);
      logger.info('catalog updated', { models: catalog.names() });
    },
    close(graceMs = 0) {
      closing ??= (async () => {
        keys.stop();
        await server.close(graceMs);
        await metricsServer.close();
        await upstreams.close();
      })();
      return closing;
    },
  };
}

/** The route plugins (built-in, then `extra`), /health, and the 405 and 404 answers in the chat shape. */
function registerRoutes(app: TemplatedApp, ctx: GatewayContext, extra: readonly RoutePlugin[]): void {
  for (const plugin of [...BUILTIN_ROUTES, ...extra]) plugin(app, ctx);
  app.get('/health', (res: HttpResponse) => {
    sendJson(track(res), 200, '{"status":"ok"}');
  });
  // Known model paths with another method: 405. Everything else: 404 in the chat shape.
  app.any('/v1/models', (res: HttpResponse) => methodNotAllowed(ctx, track(res)));
  app.any('/v1/chat/completions', (res: HttpResponse) => methodNotAllowed(ctx, track(res)));
  app.any('/*', (res: HttpResponse, req: HttpRequest) => {
    const r = track(res);
    ctx.metrics.request('unknown', NO_MODEL, 404);
    sendError(r, notFound(req.getUrl()));
  });
}

function methodNotAllowed(ctx: GatewayContext, res: ReturnType<typeof track>): void {
  ctx.metrics.request('unknown', NO_MODEL, 405);
  sendCanned(res, ERRORS.methodNotAllowed);
}
