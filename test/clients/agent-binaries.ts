// Shared setup of the slow suite's real coding agents (Claude Code, Codex CLI, Qwen Code,
// opencode): each is installed with npm at test time (its platform binary comes inside an npm
// package), runs headless with a fresh HOME against `rc start` (what `npm start` runs), and
// reaches nothing but the gateway: every other host is unreachable in CI.
import { execFile, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { platformTestEnv, waitFor } from '../helpers.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));
const run = promisify(execFile);

/** An agent package of the slow suite: what to install and which env vars override it. */
export interface AgentPackage {
  pkg: string;
  version: string;
  /** The executable in node_modules/.bin. */
  bin: string;
  /** Env var naming an installed executable to use instead (then nothing is installed). */
  binEnv: string;
  /** Env var naming the install directory (default: <tmpdir>/rc-<bin>-<version>, reused). */
  dirEnv: string;
}

/** The slow tests run with RC_SLOW_TESTS=1 (.ci/run sets it) or when the agent's binary is given. */
export const slowEnabled = (a: AgentPackage): boolean => process.env.RC_SLOW_TESTS === '1' || !!process.env[a.binEnv];

/** The agent's executable, installed from the npm registry on first use. */
export async function agentBinary(a: AgentPackage): Promise<string> {
  const given = process.env[a.binEnv];
  if (given) return given;
  const dir = process.env[a.dirEnv] || join(tmpdir(), `rc-${a.bin}-${a.version}`);
  const bin = join(dir, 'node_modules', '.bin', a.bin);
  if (!existsSync(bin)) {
    await run('npm', ['install', '--prefix', dir, '--no-audit', '--no-fund', '--no-save', `${a.pkg}@${a.version}`], { timeout: 600_000 });
  }
  return bin;
}

export interface Platform {
  /** The gateway's origin (`http://127.0.0.1:PORT`): `/v1` for OpenAI clients, `/api` for Messages ones. */
  gateway: string;
  /** The platform API's origin. */
  api: string;
  /** An API key of a new verified account. */
  key: string;
  /** A temporary directory removed after the test (data, HOMEs, working dirs). */
  dir: string;
}

/** `rc start` on ephemeral ports in a temporary data dir, and an account's key; all stopped and removed after the test. */
export async function startPlatform(t: TestContext): Promise<Platform> {
  const dir = mkdtempSync(join(tmpdir(), 'rc-agent-'));
  const env = { ...process.env, ...platformTestEnv(join(dir, 'data')), RC_LOG_LEVEL: 'warn' };
  const platform = spawn(process.execPath, [RC, 'start'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  platform.stdout.on('data', (d: Buffer) => (out += d));
  platform.stderr.on('data', (d: Buffer) => (out += d));
  t.after(async () => {
    if (platform.exitCode === null) {
      const exited = new Promise((r) => platform.once('exit', r));
      platform.kill('SIGTERM');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
    rmSync(`${join(dir, 'data')}-instances`, { recursive: true, force: true });
  });
  await waitFor(() => /sim backend .*sim-reasoner/.test(out) || platform.exitCode !== null, 60_000);
  const gateway = /model gateway\s+(http:\/\/\S+)\/v1/.exec(out)?.[1];
  const api = /platform API\s+(http:\/\/\S+)\/api/.exec(out)?.[1];
  if (!gateway || !api) throw new Error(`rc start did not come up:\n${out}`);
  const { stdout } = await run(process.execPath, [RC, 'account', 'create', '--email', 'agent@example.com', '--verified'], { env });
  const key = (JSON.parse(stdout) as { api_token: string }).api_token;
  return { gateway, api, key, dir };
}

/** The catalog models every agent is run on. */
export const CATALOG_MODELS = ['sim-chat', 'sim-reasoner'] as const;

/** Requests the gateway metered for the account on `model` (GET /api/profile/model-usage). */
export async function modelRequests(p: Platform, model: string): Promise<number> {
  const r = await fetch(`${p.api}/api/profile/model-usage`, { headers: { authorization: `Bearer ${p.key}` } });
  const body = (await r.json()) as { by_model: Record<string, { requests: number }> };
  return body.by_model[model]?.requests ?? 0;
}

export interface AgentRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * Runs an agent non-interactively with exactly `env` (nothing inherited but PATH) and a TMPDIR of
 * its own, removed after it (the agents leave files in the temporary directory: the native
 * modules their single-file builds unpack, some 22 MB a run, and their own scratch
 * directories), stdin closed (some read a prompt from a pipe), killed after `timeoutMs`. Resolves
 * with the exit code and output whatever the code; the caller asserts.
 */
export function runAgent(bin: string, args: string[], o: { env: Record<string, string>; cwd: string; timeoutMs?: number }): Promise<AgentRun> {
  return new Promise((resolve, reject) => {
    // Its own process group: a timeout kills what the agent started too (shells, servers).
    const tmp = mkdtempSync(join(tmpdir(), 'rc-agent-tmp-'));
    const child = spawn(bin, args, {
      env: { PATH: process.env.PATH ?? '', TMPDIR: tmp, ...o.env },
      cwd: o.cwd,
      stdio: ['ignore', 'pipe', 'pipe'],
      detached: true,
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d));
    child.stderr.on('data', (d: Buffer) => (stderr += d));
    const timer = setTimeout(() => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        /* already gone */
      }
    }, o.timeoutMs ?? 240_000);
    child.on('error', (e) => {
      clearTimeout(timer);
      rmSync(tmp, { recursive: true, force: true });
      reject(e);
    });
    child.on('close', (code) => {
      clearTimeout(timer);
      rmSync(tmp, { recursive: true, force: true });
      resolve({ code, stdout, stderr });
    });
  });
}

/** The JSON objects of a JSON-lines output (other lines skipped). */
export function jsonLines(text: string): Record<string, any>[] {
  const out: Record<string, any>[] = [];
  for (const line of text.split('\n')) {
    if (!line.startsWith('{')) continue;
    try {
      out.push(JSON.parse(line) as Record<string, any>);
    } catch {
      /* not a whole JSON line */
    }
  }
  return out;
}
