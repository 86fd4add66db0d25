// The platform API server: uWS + the route table + the store. createControlPlane() opens (or
// takes) the store, seeds a fresh database, writes the admin token and a runtime file into the
// data dir (so `rc` finds the running platform), and listens.
import { rmSync, writeFileSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { z } from 'zod';
import type { HeldLimits } from '../lib/held-limits.js';
import { hashKey, matchesHash } from '../lib/keys.js';
import type { Bus } from '../lib/bus.js';
import type { Clock } from '../lib/clock.js';
import { DEFAULT_SIM_MODELS, type ModelEntry } from '../lib/config.js';
import { listen } from '../lib/http.js';
import { createLogger, type Logger } from '../lib/log.js';
import { uws, type TemplatedApp } from '../lib/uws.js';
import { runAdminOp, type AdminContext } from './admin.js';
import { ADMIN_TOKEN_ACTOR } from './operator/audit-log.js';
import { operatorRoutes } from './operator/routes.js';
import { UsageRollup } from './operator/usage-rollup.js';
import type { Db } from './db.js';
import { resolveSettings, type ApiDeps, type ControlPlaneSettings, type ModelUsageReader } from './deps.js';
import { accountRoutes } from './routes-account.js';
import { authRoutes } from './routes-auth.js';
import { emailRoutes, mailHooks } from './routes-email.js';
import { mailSender, type MailSender } from './auth/mail.js';
import { openAttemptLimits } from './auth/shared-limits.js';
import { templateRoutes } from './routes-templates.js';
import { creditRoutes } from './routes-credits.js';
import { modelRoutes } from './routes-models.js';
import { openApiRoute } from './openapi.js';
import { registerConsole } from './console/serve.js';
import { apiStreamLimits, mount, route, type Route } from './router.js';
import { sessionCookiePaths } from './auth.js';
import { adminToken } from './secrets.js';
import { Store } from './store.js';
import { ModelContexts } from './model-contexts.js';

/** Written into the data dir while a control plane listens; read by `rc` to reach it. */
export const RUNTIME_FILE = 'control-plane.json';
export interface RuntimeInfo {
  url: string;
  pid: number;
}

export interface ControlPlaneOptions {
  host?: string;
  /** 0 (default): an ephemeral port. */
  port?: number;
  /** Data dir (database, admin token, sealing key, runtime file). */
  dataDir?: string;
  /** An open database to use instead of the data dir's file. */
  db?: Db;
  /** A ready store (the lead's assembly may share one with other parts). */
  store?: Store;
  bus: Bus;
  clock?: Clock;
  logger?: Logger;
  /** Reader of the gates' usage for GET /api/profile/model-usage (e.g. `(id) => limitGate.readUsage(id)`). */
  modelUsage?: ModelUsageReader;
  settings?: Partial<ControlPlaneSettings>;
  /** The models configured outside the database (Config.models); for `rc model list`. */
  configuredModels?: readonly ModelEntry[];
  /** The token of the internal API (access 'internal': gateways learning from the control plane); none: that API refuses everyone. */
  internalToken?: string;
  /** The running instance service's hosts, for the admin API's host operations. */
  fleet?: AdminContext['fleet'];
  /** The running instance service, for the operator's instance actions (destroy with a reason). */
  instances?: AdminContext['instances'];
  /** Public URL of the model gateway, shown by GET /api/models and the console. */
  gatewayUrl?: string;
  /** Where mails go; default: SMTP when settings.smtpUrl is set, else the log (auth/mail.ts). */
  mail?: MailSender;
  /** Extra routes (for example instances, issue #8), mounted with the same router. */
  routes?: (deps: ApiDeps) => Route[];
}

export interface ControlPlane {
  url: string;
  port: number;
  store: Store;
  /** Route dependencies (store, bus, settings), for parts that add routes. */
  deps: ApiDeps;
  /** Event streams open per account and per address (tests: back to nothing when they close). */
  streams: HeldLimits;
  close(): Promise<void>;
}

/** What the admin operations (the CLI's and the operator pages') work with. */
function adminContext(options: ControlPlaneOptions, deps: ApiDeps): AdminContext {
  return {
    store: deps.store,
    publish: (ev) => options.bus.publish(ev),
    configuredModels: deps.configuredModels,
    fleet: options.fleet,
    instances: options.instances,
    settings: deps.settings, // coupon.redemption switches the setting POST /api/credits/redeem reads
  };
}

export async function createControlPlane(options: ControlPlaneOptions): Promise<ControlPlane> {
  const logger = (options.logger ?? createLogger()).child({ part: 'control-plane' });
  const ownsStore = !options.store;
  const store = options.store ?? (await Store.open({ dataDir: options.dataDir, db: options.db, clock: options.clock }));
  const settings = resolveSettings(options.settings);
  const configuredModels = options.configuredModels ?? DEFAULT_SIM_MODELS;
  const deps: ApiDeps = {
    store,
    bus: options.bus,
    logger,
    settings,
    configuredModels,
    modelUsage: options.modelUsage,
    gatewayUrl: options.gatewayUrl,
    modelContexts: new ModelContexts(),
  };

  // The admin token exists only with a data dir (the CLI reads it from there).
  const adminHash = options.dataDir ? hashKey(adminToken(options.dataDir)) : undefined;
  const internalHash = options.internalToken ? hashKey(options.internalToken) : undefined;
  const admin = adminContext(options, deps);

  // Sign-in, sign-up (and verification mail) and coupon attempt limits: in memory, or in Redis
  // with REDIS_URL, shared by every control plane (auth/shared-limits.ts).
  const attempts = await openAttemptLimits(settings, { clock: store.clock, logger });
  const verifications = store.emailVerifications;
  let listeningUrl = '';
  const mails = mailHooks(deps, verifications, options.mail ?? mailSender(settings.smtpUrl, logger), () => settings.apiPublicUrl || listeningUrl);

  const routes: Route[] = [
    route({ method: 'get', path: '/api/health', summary: 'Liveness', access: 'none', handle: () => ({ body: { status: 'ok' } }) }),
    ...authRoutes(deps, { verifications, ...mails }, attempts.limits, () => cookiePaths),
    ...emailRoutes(deps, verifications, mails.sendLink, attempts.limits),
    ...accountRoutes(deps, attempts.limits),
    ...templateRoutes(deps),
    adminRoute(admin),
    ...operatorRoutes(deps, admin),
    ...creditRoutes(deps),
    ...modelRoutes(deps),
    ...(options.routes?.(deps) ?? []),
  ];
  routes.push(openApiRoute(routes));
  const cookiePaths = sessionCookiePaths(routes.map((r) => r.path));

  const app = uws().App();
  registerConsole(app);
  const streams = mountRoutes(app, routes, { store, logger, settings, adminHash, internalHash });
  const server = await listen(app, options.host ?? '127.0.0.1', options.port ?? 0).catch((err: unknown) => {
    attempts.close(); // its Redis connection would keep the process alive
    throw err;
  });
  listeningUrl = server.url;
  const runtimePath = options.dataDir ? join(options.dataDir, RUNTIME_FILE) : undefined;
  const info: RuntimeInfo = { url: server.url, pid: process.pid };
  if (runtimePath) writeFileSync(runtimePath, JSON.stringify(info) + '\n', { mode: 0o600 });
  const purge = setInterval(() => store.sessions.purgeExpired().catch((err: unknown) => logger.warn('session purge failed', { err })), 3_600_000).unref();
  const rollup = options.modelUsage ? new UsageRollup({ store, read: options.modelUsage, logger }).start() : undefined; // the gates' usage per day
  logger.info('platform API listening', { url: server.url });

  let closing: Promise<void> | undefined;
  return {
    url: server.url,
    port: server.port,
    store,
    deps,
    streams,
    close() {
      closing ??= (async () => {
        clearInterval(purge);
        await rollup?.stop();
        await server.close(1000);
        attempts.close();
        if (runtimePath) removeRuntimeFile(runtimePath, info);
        if (ownsStore) await store.close();
      })();
      return closing;
    },
  };
}

/**
 * Mounts the route table with the router's credentials (the admin and internal tokens' hashes)
 * and its bounds; returns the event streams' counts (RC_API_STREAMS_*).
 */
function mountRoutes(
  app: TemplatedApp,
  routes: readonly Route[],
  o: { store: Store; logger: Logger; settings: ControlPlaneSettings; adminHash: string | undefined; internalHash: string | undefined },
): HeldLimits {
  const { settings, adminHash, internalHash } = o;
  const streams = apiStreamLimits(settings);
  mount(app, routes, {
    store: o.store,
    logger: o.logger,
    maxBodyBytes: settings.apiMaxBodyBytes,
    isAdmin: (token) => adminHash !== undefined && matchesHash(token, adminHash),
    trustProxy: settings.trustProxy,
    cookieSecure: settings.cookieSecure,
    isInternal: (token) => internalHash !== undefined && matchesHash(token, internalHash),
    streams,
  });
  return streams;
}

/** Operator actions for the rc CLI (the admin token); the body is validated per operation (admin.ts). */
function adminRoute(admin: AdminContext): Route {
  return route({
    method: 'post',
    path: '/api/admin/:op',
    summary: 'Operator actions of the rc CLI',
    access: 'admin',
    body: z.record(z.string(), z.unknown()),
    async handle({ params, body }) {
      return { body: await runAdminOp({ ...admin, actor: ADMIN_TOKEN_ACTOR }, params[0]!, body) };
    },
  });
}

/** Removes the runtime file only if it is still ours (another control plane may have taken over the data dir). */
function removeRuntimeFile(path: string, info: RuntimeInfo): void {
  try {
    const current = JSON.parse(readFileSync(path, 'utf8')) as RuntimeInfo;
    if (current.url === info.url && current.pid === info.pid) rmSync(path, { force: true });
  } catch {
    /* already gone */
  }
}
