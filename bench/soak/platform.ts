// The platform a soak runs against: `rc start` as a child process of its own (so the soak's
// client is not in the process it measures), on ephemeral ports and a fresh data dir, with every
// per-account limit that would refuse a soak's steady traffic raised. It can write a heap
// snapshot on SIGUSR2 (into its diagnostic dir).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ephemeralPlatformEnv } from '../platform-env.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));

export interface SoakPlatform {
  child: ChildProcess;
  pid: number;
  dataDir: string;
  api: string;
  gateway: string;
  /** The tunnels' listener port (public tunnel URLs are `http://<id>.<host>:<port>/`). */
  tunnelsPort: number;
  /** Writes a heap snapshot of the platform and returns its text. */
  heapSnapshot(): Promise<string>;
  stop(): Promise<void>;
}

export interface SoakPlatformOptions {
  runtime: 'process' | 'docker';
  redisUrl: string;
}

export async function startSoakPlatform(o: SoakPlatformOptions): Promise<SoakPlatform> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-soak-'));
  const diagDir = mkdtempSync(join(tmpdir(), 'rc-soak-heap-'));
  const env = soakEnv(o, dataDir);
  const child = spawn(process.execPath, ['--heapsnapshot-signal=SIGUSR2', `--diagnostic-dir=${diagDir}`, RC, 'start'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  child.stderr!.on('data', (d: Buffer) => (err = (err + d).slice(-20_000)));
  const deadline = Date.now() + 120_000;
  while (!/Then:/.test(out)) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`rc start did not come up:\n${out}\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const api = /platform API\s+(http:\/\/\S+)\/api/.exec(out)?.[1];
  const gateway = /model gateway\s+(http:\/\/\S+)\/v1/.exec(out)?.[1];
  const tunnelsPort = Number(/tunnels\s+http:\/\/<tunnel id>\.\S+?:(\d+)\//.exec(out)?.[1]);
  if (!api || !gateway || !tunnelsPort) throw new Error(`cannot read the URLs of rc start:\n${out}`);
  const pid = child.pid!;
  return {
    child,
    pid,
    dataDir,
    api,
    gateway,
    tunnelsPort,
    async heapSnapshot() {
      const before = new Set(readdirSync(diagDir));
      child.kill('SIGUSR2');
      return takeSnapshot(diagDir, before);
    },
    async stop() {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(`${dataDir}-instances`, { recursive: true, force: true });
      rmSync(diagDir, { recursive: true, force: true });
    },
  };
}

/** `rc start`'s environment for a soak: ephemeral ports, fast sims, the soak's limits raised. */
function soakEnv(o: SoakPlatformOptions, dataDir: string): NodeJS.ProcessEnv {
  return {
    ...process.env,
    ...ephemeralPlatformEnv(dataDir),
    RC_LOG_LEVEL: 'warn',
    RC_CONFIG: '',
    REDIS_URL: o.redisUrl,
    RC_AGENT_RUNTIME: o.runtime,
    RC_AGENT_GPU_DETECT: 'configured',
    // A soak launches, signs in and calls the models far more often than one person would.
    RC_INSTANCE_LAUNCH_RATE: '1:1000000',
    RC_LOGIN_PER_ADDRESS_PER_MINUTE: '1000000',
    RC_SIGNUP_PER_ADDRESS_PER_HOUR: '1000000',
    RC_COUPON_ATTEMPTS_PER_ACCOUNT_PER_HOUR: '1000000',
    RC_COUPON_ATTEMPTS_PER_ADDRESS_PER_HOUR: '1000000',
    RC_MODEL_RPM: '100000000',
    RC_MODEL_TPM: '1000000000',
    RC_MODEL_DAILY_TOKENS: '1000000000000',
    RC_AGENT_STOP_GRACE_MS: '1000',
  };
}

/** Waits for the heap snapshot V8 writes into `diagDir` (a file not in `before`) and returns its text. */
async function takeSnapshot(diagDir: string, before: Set<string>): Promise<string> {
  // The file appears when V8 starts writing it: wait until its size holds still and it ends
  // as the format's JSON object does.
  let size = -1;
  for (;;) {
    await new Promise((r) => setTimeout(r, 500));
    const file = readdirSync(diagDir).find((f) => f.endsWith('.heapsnapshot') && !before.has(f));
    if (!file) continue;
    const now = statSync(join(diagDir, file)).size;
    if (now !== size || now === 0) {
      size = now;
      continue;
    }
    const text = readFileSync(join(diagDir, file), 'utf8');
    if (!text.trimEnd().endsWith('}')) continue;
    rmSync(join(diagDir, file));
    return text;
  }
}
