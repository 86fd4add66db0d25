// How the rc CLI reaches the platform's state. When a control plane runs on the data dir (its
// runtime file names the URL), operations go through its admin API, so its in-process bus
// tells every gateway. Otherwise the CLI opens the SQLite file itself (WAL and busy_timeout
// make a concurrent writer safe) and publishes events on Redis when REDIS_URL is set (with no
// platform running, no in-process gateway exists to tell).
import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { request } from 'undici';
import { Redis } from 'ioredis';
import { busChannel, type BusEvent } from '../lib/bus.js';
import type { ModelEntry } from '../lib/config.js';
import { RcError } from '../lib/errors.js';
import { runAdminOp, type AdminOpName } from './admin.js';
import { databasePath } from './db.js';
import { adminToken } from './secrets.js';
import { RUNTIME_FILE, type RuntimeInfo } from './server.js';
import { Store } from './store.js';

export interface AdminClientOptions {
  dataDir: string;
  /** RC_DATABASE_URL: the platform's state is on PostgreSQL (the data dir still holds seal.key and the admin token). */
  databaseUrl?: string;
  namedStatements?: boolean;
  /** Create the platform's database when the data dir has none (`rc ... --init`); else refuse (NoPlatformError). */
  init?: boolean;
  redisUrl?: string;
  /** The prefix of the platform's Redis keys and event channel (RC_GATE_KEY_PREFIX). */
  redisPrefix: string;
  configuredModels: readonly ModelEntry[];
}

/** The database's file name in a data dir, for messages. */
const DATABASE_FILE = basename(databasePath('.'));

export type AdminCall = (op: AdminOpName, input: Record<string, unknown>) => Promise<unknown>;

/**
 * The running platform refused an operation (its status and detail), or answered something that
 * is not JSON (502). Its failure's own code does not travel (the reply is `{ detail }`).
 */
export class AdminApiError extends RcError {
  constructor(message: string, status: number) {
    super('RC_ERR_ADMIN_API', message, status);
  }
}

function runtimeInfo(dataDir: string): RuntimeInfo | undefined {
  try {
    return JSON.parse(readFileSync(join(dataDir, RUNTIME_FILE), 'utf8')) as RuntimeInfo;
  } catch {
    return undefined;
  }
}

/** undefined when nothing listens at the URL (a stale runtime file): the caller falls back to the database. */
async function viaApi(info: RuntimeInfo, token: string, op: string, input: Record<string, unknown>): Promise<{ body: unknown } | undefined> {
  let res;
  try {
    res = await request(`${info.url}/api/admin/${op}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-rc-admin-token': token },
      body: JSON.stringify(input),
      headersTimeout: 30_000,
      bodyTimeout: 30_000,
    });
  } catch (err) {
    const code = (err as { code?: string }).code;
    if (code === 'ECONNREFUSED' || code === 'ECONNRESET' || code === 'UND_ERR_SOCKET') return undefined;
    throw err;
  }
  const text = await res.body.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new AdminApiError(`platform API at ${info.url} answered ${res.statusCode} with a non-JSON body`, 502);
  }
  if (res.statusCode >= 400) {
    const d = (body as { detail?: unknown }).detail;
    const message = typeof d === 'string' ? d : JSON.stringify(d);
    throw new AdminApiError(message, res.statusCode);
  }
  return { body };
}

/**
 * The data dir holds no platform (no runtime file, no database) and the CLI was not told to make
 * one: a new database there would print a key no running platform knows (the easy mistake is
 * RC_DATA_DIR set for `npm start` and not in the second shell).
 */
export class NoPlatformError extends RcError {
  constructor(dataDir: string) {
    super(
      'RC_ERR_NO_PLATFORM',
      `no platform at ${dataDir} (no ${DATABASE_FILE} there): give the running platform's data dir (--data-dir or RC_DATA_DIR), or --init to create a new platform there`,
      404,
    );
  }
}

/** Runs one operation against the running platform, or directly on the database. */
export async function callAdmin(options: AdminClientOptions, op: AdminOpName, input: Record<string, unknown>): Promise<unknown> {
  const info = runtimeInfo(options.dataDir);
  if (info) {
    const r = await viaApi(info, adminToken(options.dataDir), op, input);
    if (r) return r.body;
  }
  if (!options.databaseUrl && !options.init && !existsSync(databasePath(options.dataDir))) throw new NoPlatformError(options.dataDir);
  const store = await Store.open({ dataDir: options.dataDir, databaseUrl: options.databaseUrl, namedStatements: options.namedStatements });
  const publisher = options.redisUrl ? redisPublisher(options.redisUrl, busChannel(options.redisPrefix)) : undefined;
  try {
    return await runAdminOp({ store, publish: publisher?.publish ?? (async () => {}), configuredModels: options.configuredModels }, op, input);
  } finally {
    await store.close();
    await publisher?.close();
  }
}

/**
 * Publishes on the bus channel the way lib/bus.ts RedisBus does, without its subscriber
 * connection (a one-shot CLI only publishes).
 */
function redisPublisher(url: string, channel: string) {
  const redis = new Redis(url, { maxRetriesPerRequest: 1, connectTimeout: 5000 });
  redis.on('error', () => {});
  return {
    async publish(event: BusEvent): Promise<void> {
      try {
        await redis.publish(channel, JSON.stringify(event));
      } catch (err) {
        // The change is committed; gateways that missed the event pick it up at their next start.
        process.stderr.write(`rc: warning: could not publish ${event.type} on ${url}: ${(err as Error).message}\n`);
      }
    },
    async close(): Promise<void> {
      await redis.quit().catch(() => redis.disconnect());
    },
  };
}
