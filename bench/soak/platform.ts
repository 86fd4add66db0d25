// The platform a soak runs against: `rc start` as a child process of its own (so the soak's
// client is not in the process it measures), on ephemeral ports and a fresh data dir, with every
// per-account limit that would refuse a soak's steady traffic raised. The child listens for V8's
// inspector on loopback (an ephemeral port), through which the soak collects its garbage before a
// quiet sample and takes heap snapshots (inspector.ts).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { ephemeralPlatformEnv } from '../platform-env.js';
import { Inspector } from './inspector.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));

export interface SoakPlatform {
  child: ChildProcess;
  pid: number;
  dataDir: string;
  api: string;
  gateway: string;
  /** The tunnels' listener port (public tunnel URLs are `http://<id>.<host>:<port>/`). */
  tunnelsPort: number;
  /** The platform's V8 inspector: full collections and heap snapshots. */
  inspector: Inspector;
  stop(): Promise<void>;
}

export interface SoakPlatformOptions {
  runtime: 'process' | 'docker';
  redisUrl: string;
  /** More environment for `rc start` (the platform API benchmark's RC_DATABASE_URL). */
  env?: Record<string, string>;
}

export async function startSoakPlatform(o: SoakPlatformOptions): Promise<SoakPlatform> {
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-soak-'));
  const env = soakEnv(o, dataDir);
  const child = spawn(process.execPath, ['--inspect=127.0.0.1:0', RC, 'start'], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => (out += d));
  let inspectorUrl: string | undefined;
  child.stderr!.on('data', (d: Buffer) => {
    err = (err + d).slice(-20_000);
    inspectorUrl ??= /Debugger listening on (ws:\/\/\S+)/.exec(err)?.[1];
  });
  const deadline = Date.now() + 120_000;
  while (!/Then:/.test(out) || !inspectorUrl) {
    if (child.exitCode !== null || Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`rc start did not come up:\n${out}\n${err}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  const api = /platform API\s+(http:\/\/\S+)\/api/.exec(out)?.[1];
  const gateway = /model gateway\s+(http:\/\/\S+)\/v1/.exec(out)?.[1];
  const tunnelsPort = Number(/tunnels\s+http:\/\/<tunnel id>\.\S+?:(\d+)\//.exec(out)?.[1]);
  if (!api || !gateway || !tunnelsPort || !inspectorUrl) throw new Error(`cannot read the URLs of rc start:\n${out}\n${err}`);
  const inspector = await Inspector.connect(inspectorUrl);
  const pid = child.pid!;
  return {
    child,
    pid,
    dataDir,
    api,
    gateway,
    tunnelsPort,
    inspector,
    async stop() {
      inspector.close();
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
      rmSync(`${dataDir}-instances`, { recursive: true, force: true });
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
    ...o.env,
  };
}
