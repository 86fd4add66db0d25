// Helpers shared by the test suites.
import { execFile, execFileSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { Redis } from 'ioredis';
import type { Server as HttpServer } from 'node:http';
import type { TestContext } from 'node:test';
import { ephemeralPlatformEnv } from '../bench/platform-env.js';

/** The compiled `rc` command. */
export const RC_JS = fileURLToPath(new URL('../bin/rc.js', import.meta.url));

/** One `rc` run to its end: exit code, output, and stdout parsed as JSON when it is JSON. */
export interface RcRun {
  code: number;
  stdout: string;
  stderr: string;
  json: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Runs `rc <args>` on `dataDir` with a minimal environment (no Redis, silent logs) plus `env`; never rejects. */
export function runRcCli(dataDir: string, args: string[], env: Record<string, string> = {}): Promise<RcRun> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [RC_JS, ...args],
      { env: { PATH: process.env.PATH ?? '', RC_LOG_LEVEL: 'silent', RC_DATA_DIR: dataDir, REDIS_URL: '', ...testDatabaseEnv(), ...env }, timeout: 30_000 },
      (err, stdout, stderr) => {
        let json: unknown;
        try {
          json = JSON.parse(stdout);
        } catch {
          /* not JSON */
        }
        resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stdout, stderr, json });
      },
    );
  });
}

/** What an rc child needs to keep its data dir's state where this test process keeps it (scripts/test.mjs, RC_TEST_DATABASE). */
export function testDatabaseEnv(): Record<string, string> {
  const out: Record<string, string> = {};
  for (const k of ['NODE_OPTIONS', 'RC_TEST_DATABASE', 'RC_TEST_DATABASE_RUN', 'RC_TEST_POSTGRES_URL']) if (process.env[k]) out[k] = process.env[k]!;
  return out;
}

export const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';

/**
 * Returns true when Redis answers at REDIS_URL. When it does not: with RC_REQUIRE_REDIS=1 (CI) the
 * test fails; otherwise it is skipped with a message saying why.
 */
export async function redisAvailable(t: TestContext): Promise<boolean> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 1000, retryStrategy: () => null });
  r.on('error', () => {});
  try {
    await r.connect();
    await r.ping();
    return true;
  } catch (err) {
    if (process.env.RC_REQUIRE_REDIS === '1')
      throw new Error(`Redis is required (RC_REQUIRE_REDIS=1) but ${REDIS_URL} did not answer: ${(err as Error).message}`);
    t.skip(`Redis not reachable at ${REDIS_URL}`);
    return false;
  } finally {
    r.disconnect();
  }
}

/** Deletes every key under `prefix`. */
export async function dropKeys(r: Redis, prefix: string): Promise<void> {
  const keys = await r.keys(`${prefix}*`);
  if (keys.length) await r.del(...keys);
}

/**
 * After the test, deletes every key under `prefix` at REDIS_URL: what the gateways the test
 * started wrote there (gate counters, the daily ones with a TTL of days) goes with it. It may run
 * before their processes are stopped (after hooks run in the order registered): gateways write
 * gate keys only while serving, and the test's requests have all been answered by then.
 */
export function dropKeysAfter(t: TestContext, prefix: string): void {
  t.after(async () => {
    const r = new Redis(REDIS_URL, { maxRetriesPerRequest: 1 });
    r.on('error', () => {});
    try {
      await dropKeys(r, prefix);
    } finally {
      r.disconnect();
    }
  });
}

/**
 * The first line a spawned part writes on stdout (its ready line). Rejects when the part exits
 * first, or has written none within `withinMs` (it is SIGKILLed then): the error names the part
 * and carries `context()` (its stderr so far, say), so a part that never gets ready fails the
 * test with its logs instead of hanging it until the runner's timeout.
 */
export function firstLine(
  child: ChildProcess,
  name: string,
  { withinMs = 60_000, context = () => '' }: { withinMs?: number; context?: () => string } = {},
): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`${name} wrote no ready line within ${withinMs} ms: ${context()}`));
    }, withinMs);
    createInterface({ input: child.stdout! }).once('line', (line) => {
      clearTimeout(timer);
      resolve(line);
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited (${code ?? signal}) before its ready line: ${context()}`));
    });
  });
}

/** Polls `fn` until it returns a truthy value or `timeoutMs` passes. */
export async function waitFor<T>(fn: () => T | Promise<T>, timeoutMs = 10_000, intervalMs = 20): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`waitFor: condition not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** The Docker engine's socket: DOCKER_HOST when it is unix://, else /var/run/docker.sock. */
export const DOCKER_SOCKET = process.env.DOCKER_HOST?.startsWith('unix://') ? process.env.DOCKER_HOST.slice('unix://'.length) : '/var/run/docker.sock';

/**
 * Returns true when a Docker engine answers /_ping on DOCKER_SOCKET. When none does: with
 * RC_REQUIRE_DOCKER=1 (CI) the test fails; otherwise it is skipped with a message saying why.
 */
export async function dockerAvailable(t: TestContext): Promise<boolean> {
  const { request } = await import('node:http');
  const why = await new Promise<string>((resolve) => {
    const req = request({ socketPath: DOCKER_SOCKET, path: '/_ping', timeout: 3000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200 ? '' : `/_ping answered ${res.statusCode}`);
    });
    req.on('error', (err) => resolve(err.message));
    req.on('timeout', () => {
      req.destroy();
      resolve('no answer within 3 s');
    });
    req.end();
  });
  if (!why) return true;
  if (process.env.RC_REQUIRE_DOCKER === '1') throw new Error(`A Docker engine is required (RC_REQUIRE_DOCKER=1) but ${DOCKER_SOCKET} did not answer: ${why}`);
  t.skip(`no Docker engine at ${DOCKER_SOCKET}: ${why}`);
  return false;
}

/**
 * Returns true when this machine has what the local images `tags` are built from
 * (agent/images/local-images.ts). When a package is missing: with RC_REQUIRE_DOCKER=1 (CI, whose
 * docker tests need their images) the test fails; otherwise it is skipped with the packages to install.
 */
export async function localImagesBuildable(t: TestContext, ...tags: string[]): Promise<boolean> {
  const { missingImagePackages } = await import('../agent/images/local-images.js');
  const missing = [...new Set(tags.flatMap(missingImagePackages))];
  if (missing.length === 0) return true;
  const why = `the test images ${tags.join(', ')} are built from this machine's files: install ${missing.join(', ')} (Debian: apt-get install ${missing.join(' ')})`;
  if (process.env.RC_REQUIRE_DOCKER === '1') throw new Error(`RC_REQUIRE_DOCKER=1 but ${why}`);
  t.skip(why);
  return false;
}

/**
 * The environment of a whole platform for a test: data under `dataDir`, every server on an
 * ephemeral port, fast sims, in-memory gates, the default catalog, instances as host processes
 * (the docker runtime has its own suites). `extra` adds or overrides settings.
 */
export function platformTestEnv(dataDir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    ...ephemeralPlatformEnv(dataDir),
    REDIS_URL: '',
    RC_CONFIG: '',
    RC_AGENT_RUNTIME: 'process',
    ...extra,
  };
}

/** Listens on an ephemeral loopback port; the server and its open connections are closed after the test. Returns the port. */
export async function listenLocal(t: TestContext, server: HttpServer): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(
    () =>
      new Promise((r) => {
        server.closeAllConnections();
        server.close(r);
      }),
  );
  return (server.address() as { port: number }).port;
}

/**
 * A self-signed certificate for `localhost` (1 day, made with openssl; .ci/run installs it), or
 * undefined after skipping the test when openssl is missing.
 */
export function localhostCertificate(t: TestContext): { cert: Buffer; key: Buffer } | undefined {
  const dir = mkdtempSync(join(tmpdir(), 'rc-test-tls-'));
  try {
    execFileSync(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'rsa:2048',
        '-nodes',
        '-days',
        '1',
        '-subj',
        '/CN=localhost',
        '-addext',
        'subjectAltName=DNS:localhost',
        '-keyout',
        join(dir, 'key.pem'),
        '-out',
        join(dir, 'cert.pem'),
      ],
      { stdio: 'ignore' },
    );
    return { cert: readFileSync(join(dir, 'cert.pem')), key: readFileSync(join(dir, 'key.pem')) };
  } catch {
    t.skip('openssl is not available to make a test certificate');
    return undefined;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Whether a TCP connection to host:port opens within `timeoutMs`. */
export function tcpConnects(host: string, port: number, timeoutMs = 3000): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect({ host, port });
    s.setTimeout(timeoutMs, () => {
      s.destroy();
      resolve(false);
    });
    s.once('connect', () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}
