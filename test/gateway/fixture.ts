// A gateway in front of real sims, with one key, and an `openai` client pointed at it.
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { MemoryBus } from '../../lib/bus.js';
import { modelEntrySchema, type ModelEntry } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { startSim, type SimOptions, type SimServer } from '../../sim/server.js';
import type { RequestGate } from '../../gateway/gates/gate.js';
import { createGateway, type Gateway, type GatewayOptions } from '../../gateway/server.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';

export interface Fixture {
  gateway: Gateway;
  sims: SimServer[];
  bus: MemoryBus;
  key: string;
  accountId: number;
  client: OpenAI;
  /** A client for another key. */
  clientWith(key: string): OpenAI;
  close(): Promise<void>;
}

export interface FixtureOptions {
  /** One sim per entry (all serve model `m`). Default: one fast sim. */
  sims?: SimOptions[];
  /** Catalog; default: model `m` on every sim. */
  models?: (sims: SimServer[]) => ModelEntry[];
  gate?: RequestGate;
  limits?: GatewayOptions['limits'];
  upstream?: GatewayOptions['upstream'];
  /** Routes beyond the built-in ones (messagesRoutes()). */
  routes?: GatewayOptions['routes'];
}

export const ACCOUNT = 42;

export async function startFixture(o: FixtureOptions = {}): Promise<Fixture> {
  const logger = createLogger('silent');
  const sims: SimServer[] = [];
  for (const s of o.sims ?? [{ fast: true }]) sims.push(await startSim({ model: 'm', logger, ...s }));
  const models = o.models ? o.models(sims) : [modelEntrySchema.parse({ name: 'm', upstreams: sims.map((s) => s.url) })];
  const key = generateKey();
  const bus = new MemoryBus();
  const gateway = await createGateway({
    port: 0,
    models,
    keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: ACCOUNT }]),
    bus,
    gate: o.gate,
    logger,
    limits: o.limits,
    upstream: o.upstream,
    routes: o.routes,
  });
  const clientWith = (k: string) => new OpenAI({ apiKey: k, baseURL: `${gateway.url}/v1`, maxRetries: 0, timeout: 30_000 });
  return {
    gateway,
    sims,
    bus,
    key,
    accountId: ACCOUNT,
    client: clientWith(key),
    clientWith,
    async close() {
      await gateway.close();
      await Promise.all(sims.map((s) => s.close()));
      await bus.close();
    },
  };
}

/** POSTs raw bytes to the gateway with fetch; returns status, headers and parsed JSON (or text). */
export async function post(
  url: string,
  body: string | Uint8Array,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Headers; json: any; text: string }> {
  const r = await fetch(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  const text = await r.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: r.status, headers: r.headers, json, text };
}

export const HELLO = [{ role: 'user' as const, content: 'Say hello' }];

/** Spawns the compiled rc CLI; resolves with the child and the first JSON line it prints on stdout. */
export async function spawnRc(
  args: string[],
  env: NodeJS.ProcessEnv = {},
): Promise<{ child: ChildProcess; ready: Record<string, unknown>; stderr: () => string }> {
  const cli = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));
  const child = spawn(process.execPath, [cli, ...args], {
    env: { ...process.env, RC_LOG_LEVEL: 'error', RC_METRICS_PORT: '0', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const ready = await new Promise<Record<string, unknown>>((resolve, reject) => {
    let out = '';
    const onData = (d: Buffer) => {
      out += d.toString();
      const nl = out.indexOf('\n');
      if (nl < 0) return;
      child.stdout!.off('data', onData);
      try {
        resolve(JSON.parse(out.slice(0, nl)));
      } catch (e) {
        reject(e);
      }
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`rc ${args.join(' ')} exited with ${code} before it was ready: ${err}`)));
  });
  return { child, ready, stderr: () => err };
}

/** Sends SIGTERM and resolves with the exit code. */
export function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<number | null> {
  if (child.exitCode !== null) return Promise.resolve(child.exitCode);
  return new Promise((resolve) => {
    child.once('exit', (code) => resolve(code));
    child.kill(signal);
  });
}
