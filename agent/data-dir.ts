// The agent's directories on disk: its data dir (state, token, logs; 0700, one agent at a time)
// and the instances root outside it (homes, process volumes, the `rc` wrappers; 0711).
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { AgentDataDirLockedError } from './errors.js';
import { isAlive, readProcStat } from './procfs.js';

/** Where an agent keeps what it runs, as absolute paths. */
export interface AgentDirs {
  dataDir: string;
  instancesRoot: string;
}

/** Creates both trees with their modes; `instancesDir` defaults to `<dataDir>-instances`. */
export function prepareAgentDirs(dataDir: string, instancesDir: string | undefined): AgentDirs {
  const dir = resolve(dataDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // The token, the state file and the logs: nobody but the agent's user.
  chmodSync(dir, 0o700);
  const instancesRoot = resolve(instancesDir ?? `${dir}-instances`);
  for (const d of [instancesRoot, join(instancesRoot, 'homes'), join(instancesRoot, 'volumes')]) {
    mkdirSync(d, { recursive: true, mode: 0o711 });
    chmodSync(d, 0o711); // instances reach their own home by path, and list nobody else's
  }
  return { dataDir: dir, instancesRoot };
}

/** Data dirs held by agents of this process. */
const lockedDirs = new Set<string>();

/**
 * Refuses a second agent on one data dir (pid + start time, so a stale file from a killed agent
 * does not block). Returns the unlock.
 */
export function lockDataDir(dir: string): () => void {
  const path = join(dir, 'agent.pid');
  if (lockedDirs.has(path)) throw new AgentDataDirLockedError(dir, process.pid);
  if (existsSync(path)) {
    try {
      const { pid, startTime } = JSON.parse(readFileSync(path, 'utf8')) as { pid: number; startTime: string };
      if (pid !== process.pid && isAlive(pid, startTime)) throw new AgentDataDirLockedError(dir, pid);
    } catch (err) {
      if (err instanceof AgentDataDirLockedError) throw err;
    }
  }
  const mine = JSON.stringify({ pid: process.pid, startTime: readProcStat(process.pid)?.startTime ?? '' });
  writeFileSync(path, mine);
  lockedDirs.add(path);
  return () => {
    lockedDirs.delete(path);
    try {
      if (readFileSync(path, 'utf8') === mine) rmSync(path, { force: true });
    } catch {
      // Already gone.
    }
  };
}
