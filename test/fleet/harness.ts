// Running the fleet's parts as real processes: `rc control-plane`, `rc gateway` replicas and
// `rc agent`s (optionally inside a network namespace: `ip netns exec <ns>`), each resolved once it
// prints its ready line; plus JSON clients for the platform API, the admin API and the gateways.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { request } from 'undici';
import { TIMED_OUT, within } from '../../lib/within.js';
import { killAgentProcesses, newToken as newAgentToken, RC_JS, tempDir as tempDirOf } from '../agent/harness.js';
import { firstLine } from '../helpers.js';

export { killChild, newToken, tempDir } from '../agent/harness.js';

export interface RcProcess {
  child: ChildProcess;
  /** The ready line printed on stdout. */
  ready: Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any
  /** What the process wrote on stderr so far (logs). */
  stderr(): string;
}

/** How long a part may take to exit after SIGTERM (its own deadline is 17 s: lib/cli.ts). */
const STOP_WITHIN_MS = 30_000;

/** Every process the fleet tests started, killed on test end and on process exit (also when a test fails). */
const started = new Set<ChildProcess>();
/** Agent ids whose instance processes are killed at the end (instances outlive their agent by design). */
const agentIds = new Set<string>();
process.on('exit', () => {
  for (const c of started) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  for (const id of agentIds) killAgentProcesses(id);
});

/** Spawns `rc <args>` (behind `prefix`, e.g. ['ip', 'netns', 'exec', ns]) and waits for its first stdout line (JSON). */
export async function spawnRc(t: TestContext, args: string[], env: Record<string, string>, prefix: string[] = []): Promise<RcProcess> {
  const argv = [...prefix, process.execPath, RC_JS, ...args];
  // The fleet's test hosts run instances as processes (the sim), trusted: what is tested here is
  // the fleet, not the runtime (the docker runtime has its own suites, test/agent/docker*).
  const agentEnv = args[0] === 'agent' ? { RC_AGENT_RUNTIME: 'process', RC_AGENT_PROCESS_UNTRUSTED: 'allow' } : {};
  const child = spawn(argv[0]!, argv.slice(1), {
    env: { ...process.env, RC_LOG_LEVEL: 'warn', RC_METRICS_PORT: '0', RC_TUNNEL_PORT: '0', ...agentEnv, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  started.add(child);
  child.once('exit', () => started.delete(child));
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-20_000);
  });
  const ready = JSON.parse(await firstLine(child, `rc ${args[0]}`, { context: () => stderr }));
  if (args[0] === 'agent') {
    agentIds.add(ready.agentId);
    t.after(() => killAgentProcesses(ready.agentId));
  }
  return { child, ready, stderr: () => stderr };
}

/** Runs a one-shot `rc <args>` (an admin command) to its end; its JSON output, or throws with its stderr. */
export function runRc(args: string[], env: Record<string, string>): Promise<any> {
  // eslint-disable-line @typescript-eslint/no-explicit-any
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [RC_JS, ...args], { env: { ...process.env, RC_LOG_LEVEL: 'warn', ...env }, timeout: 30_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`rc ${args.join(' ')} failed: ${stderr}`));
      else resolve(JSON.parse(stdout));
    });
  });
}

/**
 * Stops a part with SIGTERM and waits for it to exit. Parts give up on their shutdown after
 * lib/cli.ts SHUTDOWN_DEADLINE_MS + EXIT_GRACE_MS; one still running at STOP_WITHIN_MS is killed
 * and the test fails with its logs.
 */
export async function stopChild(p: RcProcess): Promise<void> {
  const { child } = p;
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGTERM');
  if ((await within(exited, STOP_WITHIN_MS)) === TIMED_OUT) {
    child.kill('SIGKILL');
    throw new Error(`an rc part did not exit within ${STOP_WITHIN_MS} ms of SIGTERM: ${p.stderr()}`);
  }
}

/** A TCP port free right now on `host` (for a server that must come back on the same port). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export interface Reply {
  status: number;
  body: any;
} // eslint-disable-line @typescript-eslint/no-explicit-any

export async function call(url: string, o: { method?: string; key?: string; body?: unknown; headers?: Record<string, string> } = {}): Promise<Reply> {
  const headers: Record<string, string> = { ...o.headers };
  if (o.key) headers.authorization = `Bearer ${o.key}`;
  if (o.body !== undefined) headers['content-type'] = 'application/json';
  const r = await request(url, {
    method: (o.method ?? (o.body === undefined ? 'GET' : 'POST')) as 'GET',
    headers,
    body: o.body === undefined ? undefined : JSON.stringify(o.body),
    headersTimeout: 30_000,
    bodyTimeout: 30_000,
  });
  const text = await r.body.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    /* keep text */
  }
  return { status: r.statusCode, body };
}

/** POST /api/admin/<op> on the control plane with the data dir's admin token. */
export function admin(api: string, dataDir: string, op: string, body: unknown = {}): Promise<Reply> {
  return call(`${api}/api/admin/${op}`, { body, headers: { 'x-rc-admin-token': readFileSync(join(dataDir, 'admin.token'), 'utf8').trim() } });
}

/** One chat completion through a gateway (a shared model or a dedicated endpoint's base URL). */
export function chat(baseUrl: string, key: string, model: string, extra: Record<string, unknown> = {}): Promise<Reply> {
  return call(`${baseUrl}/chat/completions`, { key, body: { model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 8, ...extra } });
}

/**
 * The environment of an `rc control-plane` on the PostgreSQL database `url` with data dir `dir`,
 * every port ephemeral, launches unlimited (control planes on one database: failover*.test.ts,
 * replica-streams.test.ts); `extra` adds or overrides settings.
 */
export function controlPlaneEnv(url: string, dir: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    RC_DATABASE_URL: url,
    RC_DATA_DIR: dir,
    RC_HOST: '127.0.0.1',
    RC_API_PORT: '0',
    RC_PROXY_PORT: '0',
    RC_CONTROL_METRICS_PORT: '0',
    RC_SIM_PORT_BASE: '0',
    RC_INSTANCE_LAUNCH_RATE: '1:1000',
    ...extra,
  };
}

/**
 * An `rc agent` with one configured GPU (the process runtime) and a fresh token, that never stops
 * its instances for a silent control plane; register it with `host.add` and the token.
 */
export async function spawnOneGpuAgent(t: TestContext, dirPrefix: string): Promise<{ agent: RcProcess; token: string }> {
  const token = newAgentToken();
  const agent = await spawnRc(t, ['agent', '--host', '127.0.0.1', '--port', '0', '--data-dir', tempDirOf(t, dirPrefix)], {
    RC_AGENT_TOKEN: token,
    RC_AGENT_GPU_DETECT: 'configured',
    RC_AGENT_GPUS: '1',
    RC_AGENT_LOST_CONTROL_PLANE_MS: '0',
    RC_AGENT_STOP_GRACE_MS: '1000',
  });
  return { agent, token };
}
