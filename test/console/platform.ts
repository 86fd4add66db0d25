// The whole platform in this process for a console test: a fresh data dir, a configured-GPU
// local agent, launches not rate limited, and the `rc` command on the same data dir. Closed,
// its agent's processes killed and its directories removed after the test.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { startPlatform, type Platform } from '../../bin/platform.js';
import { loadConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { killAgentProcesses } from '../agent/harness.js';
import { platformTestEnv } from '../helpers.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));

export interface ConsolePlatform {
  platform: Platform;
  dataDir: string;
  /** The platform API's (and console's) URL. */
  api: string;
  /** `rc <args> --data-dir <dataDir>`, its JSON output parsed. */
  rc(...args: string[]): Promise<any>;
}

/** `extra`: more settings (they win over these defaults). */
export async function startConsolePlatform(t: TestContext, prefix: string, extra: Record<string, string> = {}): Promise<ConsolePlatform> {
  const dataDir = mkdtempSync(join(tmpdir(), prefix));
  const env = { ...platformTestEnv(dataDir), RC_AGENT_GPU_DETECT: 'configured', RC_INSTANCE_LAUNCH_RATE: '1:100', RC_LOG_LEVEL: 'silent', ...extra };
  const platform = await startPlatform(loadConfig(env), createLogger('silent'));
  t.after(async () => {
    await platform.close();
    killAgentProcesses(platform.agent.agentId);
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(`${dataDir}-instances`, { recursive: true, force: true });
  });
  const rc = async (...args: string[]) =>
    JSON.parse((await promisify(execFile)(process.execPath, [RC, ...args, '--data-dir', dataDir], { env: { ...process.env, ...env } })).stdout);
  return { platform, dataDir, api: platform.controlPlane.url, rc };
}
