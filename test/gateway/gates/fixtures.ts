// Shared set-up of the gates tests: a gate over the memory store or over real Redis (a unique
// key prefix per gate, deleted afterwards).
import type { TestContext } from 'node:test';
import { Redis } from 'ioredis';
import { FakeClock } from '../../../lib/clock.js';
import { randomId } from '../../../lib/ids.js';
import { AccountLimits, createGate, type GateConfig, type LimitGate } from '../../../gateway/gates/index.js';
import type { GateDecision, GateRequest } from '../../../gateway/gates/gate.js';
import { dropKeys, REDIS_URL, redisAvailable, waitFor } from '../../helpers.js';

export type StoreKind = 'memory' | 'redis';

export interface Limits {
  rpm: number;
  tpm: number;
  daily: number;
}

export function gateConfig(l: Limits, extra: Partial<GateConfig> = {}): GateConfig {
  return {
    modelRpm: l.rpm,
    modelTpm: l.tpm,
    modelDailyTokens: l.daily,
    redisUrl: '',
    // Generous: the machine is shared; a slow answer must not send a test to the memory fallback.
    gateRedisTimeoutMs: 2000,
    gateKeyPrefix: `rctest:${randomId('', 6)}:`,
    ...extra,
  };
}

/** A Redis client configured like the gate's own (no offline queue), connected. */
export async function connectRedis(url = REDIS_URL): Promise<Redis> {
  const r = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 0, lazyConnect: true });
  r.on('error', () => {});
  await r.connect();
  return r;
}

export interface TestGate {
  gate: LimitGate;
  /** The gate's per-account limits (set overrides here). */
  limits: AccountLimits;
  clock: FakeClock;
  prefix: string;
  redis: Redis | undefined;
}

/**
 * A gate over `kind` with a FakeClock (which also drives the Redis buckets): 'redis' through an
 * ioredis client handed in, 'resp' through the connection the gate opens itself (resp-client.ts,
 * as in production). Returns undefined when Redis is wanted but not available (the test is then
 * skipped). Closed after the test.
 */
export async function makeGate(t: TestContext, kind: StoreKind | 'resp', l: Limits, clock = new FakeClock()): Promise<TestGate | undefined> {
  const config = gateConfig(l);
  const limits = new AccountLimits({ rpm: l.rpm, tpm: l.tpm, dailyTokens: l.daily });
  if (kind === 'memory') {
    const gate = createGate(config, { clock, limits });
    t.after(() => gate.close());
    return { gate, limits, clock, prefix: config.gateKeyPrefix, redis: undefined };
  }
  if (!(await redisAvailable(t))) return undefined;
  const redis = await connectRedis();
  const gate = kind === 'resp' ? createGate({ ...config, redisUrl: REDIS_URL }, { clock, limits }) : createGate(config, { clock, redis, limits });
  if (kind === 'resp') await waitFor(() => gate.onRedis);
  t.after(async () => {
    await gate.close();
    await dropKeys(redis, config.gateKeyPrefix);
    redis.disconnect();
  });
  return { gate, limits, clock, prefix: config.gateKeyPrefix, redis };
}

export const req = (accountId: number, estimatedTokens: number, model = 'sim-chat'): GateRequest => ({ accountId, model, estimatedTokens });

export type Admitted = GateDecision & { allowed: true };
export type Denied = GateDecision & { allowed: false };

export function admitted(d: GateDecision): Admitted {
  if (!d.allowed) throw new Error(`expected admission, got ${d.code} (Retry-After ${d.retryAfterSec})`);
  return d;
}
export function denied(d: GateDecision): Denied {
  if (d.allowed) throw new Error('expected a refusal, got an admission');
  return d;
}

/** A redis-server of the test's own, on a spare port, without persistence. */
export class PrivateRedis {
  private child: import('node:child_process').ChildProcess | undefined;
  private constructor(readonly port: number) {}

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  /** Starts one; undefined (test skipped, or failed under RC_REQUIRE_REDIS=1) when redis-server cannot run here. */
  static async start(t: TestContext): Promise<PrivateRedis | undefined> {
    const r = new PrivateRedis(await sparePort());
    try {
      await r.restart();
    } catch (err) {
      if (process.env.RC_REQUIRE_REDIS === '1') throw err;
      t.skip(`cannot run redis-server: ${(err as Error).message}`);
      return undefined;
    }
    t.after(() => r.kill());
    return r;
  }

  /** (Re)starts the server on the same port and waits until it answers PING. */
  async restart(): Promise<void> {
    const { spawn } = await import('node:child_process');
    const child = spawn('redis-server', ['--port', String(this.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
    this.child = child;
    const failed = new Promise<never>((_, reject) => {
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`redis-server exited with ${code}`)));
    });
    failed.catch(() => {}); // only raced while starting
    const deadline = Date.now() + 10_000;
    for (;;) {
      const c = new Redis(this.url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 500 });
      c.on('error', () => {});
      try {
        await Promise.race([c.connect().then(() => c.ping()), failed]);
        return;
      } catch (err) {
        if (Date.now() > deadline || child.exitCode !== null || (err as { code?: string }).code === 'ENOENT') throw err;
      } finally {
        c.disconnect();
      }
      await new Promise((r) => setTimeout(r, 50));
    }
  }

  /** SIGKILL, and waits for the process to be gone. */
  async kill(): Promise<void> {
    const c = this.child;
    this.child = undefined;
    if (!c || c.exitCode !== null || c.signalCode !== null) return;
    const gone = new Promise((r) => c.once('exit', r));
    c.kill('SIGKILL');
    await gone;
  }

  /** Freezes (SIGSTOP) or thaws (SIGCONT) the server: connections stay open, replies stop. */
  pause(on: boolean): void {
    this.child?.kill(on ? 'SIGSTOP' : 'SIGCONT');
  }
}

/** A TCP port that was free a moment ago. */
export async function sparePort(): Promise<number> {
  const { createServer } = await import('node:net');
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as import('node:net').AddressInfo).port;
      s.close(() => resolve(port));
    });
  });
}
