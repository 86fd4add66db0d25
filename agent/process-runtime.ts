// The process runtime: the start command runs through /bin/sh -c in the instance's own directory,
// in its own session and process group (so it outlives the agent), with stdout and stderr written
// straight into the log file. Stop signals the whole group: SIGTERM, then SIGKILL after the grace.
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import { findByEnv, groupMembers, isAlive, readProcStat } from './procfs.js';
import { StartFailure, type ExitInfo, type Runtime, type StartContext } from './runtime.js';
import type { RuntimeRef } from './state.js';

/** Variables of the agent's own environment an instance inherits (never secrets such as the agent token). */
const INHERITED_ENV = ['PATH', 'HOME', 'USER', 'LOGNAME', 'LANG', 'LC_ALL', 'TZ', 'TMPDIR', 'SHELL'];

/** Environment variable that marks an instance's processes as this agent's (orphan discovery). */
export const AGENT_ID_ENV = 'RC_AGENT_ID';
export const INSTANCE_ID_ENV = 'RC_INSTANCE_ID';

interface ProcessRef {
  pid: number;
  startTime: string;
}

function asProcessRef(ref: RuntimeRef): ProcessRef {
  return { pid: Number(ref.pid), startTime: String(ref.startTime) };
}

function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // ESRCH: the group is gone already.
  }
}

export class ProcessRuntime implements Runtime {
  readonly kind = 'process' as const;
  readonly checkHost = '127.0.0.1';
  /** Children started by this agent process: their exit events are exact (code and signal). */
  private readonly children = new Map<number, { child: ChildProcess; exit: ExitInfo | undefined }>();

  constructor(private readonly agentId: string) {}

  async start(ctx: StartContext): Promise<RuntimeRef> {
    const { spec } = ctx;
    if (!spec.startCommand.trim()) throw new StartFailure('start_failed', 'The process runtime needs a start command');
    const env: Record<string, string> = {};
    for (const k of INHERITED_ENV) if (process.env[k] !== undefined) env[k] = process.env[k]!;
    Object.assign(env, spec.env, ctx.agentEnv, { [AGENT_ID_ENV]: this.agentId });
    const mainPort = spec.ports[0];
    if (mainPort !== undefined) env.PORT = String(ctx.hostPorts.get(mainPort));
    env.RC_INSTANCE_DIR = ctx.homeDir;
    if (ctx.volumePath) env.RC_VOLUME_DIR = ctx.volumePath;

    const fd = openSync(ctx.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn('/bin/sh', ['-c', spec.startCommand], { cwd: ctx.homeDir, env, detached: true, stdio: ['ignore', fd, fd] });
    } catch (err) {
      throw new StartFailure('start_failed', `Could not start /bin/sh: ${(err as Error).message}`);
    } finally {
      closeSync(fd);
    }
    const pid = child.pid;
    if (pid === undefined) {
      const err = await new Promise<Error>((resolve) => child.once('error', resolve));
      throw new StartFailure('start_failed', `Could not start /bin/sh: ${err.message}`);
    }
    child.unref();
    const entry = { child, exit: undefined as ExitInfo | undefined };
    this.children.set(pid, entry);
    child.once('exit', (code, signal) => {
      entry.exit = { code, signal };
    });
    child.on('error', () => {});
    // The process exists (at worst as a zombie, until Node reaps it), so its start time is readable.
    const startTime = readProcStat(pid)?.startTime ?? '';
    return { pid, startTime };
  }

  describe(ref: RuntimeRef): string {
    return String(ref.pid);
  }

  /** A process listens on its host port itself: nothing stands in front of it. */
  async probeAddress(_ref: RuntimeRef, _port: number, hostPort: number): Promise<{ host: string; port: number }> {
    return { host: this.checkHost, port: hostPort };
  }

  async isRunning(ref: RuntimeRef): Promise<boolean> {
    const { pid, startTime } = asProcessRef(ref);
    const known = this.children.get(pid);
    if (known) return known.exit === undefined;
    return isAlive(pid, startTime);
  }

  watchExit(ref: RuntimeRef, onExit: (exit: ExitInfo) => void): () => void {
    const { pid, startTime } = asProcessRef(ref);
    const known = this.children.get(pid);
    if (known) {
      if (known.exit) {
        const exit = known.exit;
        queueMicrotask(() => onExit(exit));
        return () => {};
      }
      const listener = (code: number | null, signal: NodeJS.Signals | null) => onExit({ code, signal });
      known.child.once('exit', listener);
      return () => known.child.off('exit', listener);
    }
    // Adopted after a restart: not our child, so poll for its end.
    const timer = setInterval(() => {
      if (!isAlive(pid, startTime)) {
        clearInterval(timer);
        onExit({ code: null, signal: null });
      }
    }, 500);
    timer.unref();
    return () => clearInterval(timer);
  }

  async stop(ref: RuntimeRef, graceMs: number): Promise<void> {
    const { pid, startTime } = asProcessRef(ref);
    // The group is ours unless its leader's pid now belongs to a different process.
    const leader = readProcStat(pid);
    if (leader && leader.state !== 'Z' && leader.startTime !== startTime) return;
    if (groupMembers(pid).length === 0) return;
    signalGroup(pid, 'SIGTERM');
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline) {
      if (groupMembers(pid).length === 0) return this.forget(pid);
      await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
    }
    for (let i = 0; i < 100 && groupMembers(pid).length > 0; i++) {
      signalGroup(pid, 'SIGKILL');
      await sleep(50);
    }
    this.forget(pid);
  }

  private forget(pid: number): void {
    const known = this.children.get(pid);
    if (known?.exit) this.children.delete(pid);
  }

  async remove(ref: RuntimeRef): Promise<void> {
    await this.stop(ref, 0);
    this.children.delete(Number(ref.pid));
  }

  async discover(): Promise<Map<string, RuntimeRef[]>> {
    const out = new Map<string, RuntimeRef[]>();
    const seen = new Set<number>();
    for (const { env, stat } of findByEnv(AGENT_ID_ENV, this.agentId)) {
      const id = env.get(INSTANCE_ID_ENV);
      if (!id || seen.has(stat.pgrp)) continue;
      seen.add(stat.pgrp);
      const leader = readProcStat(stat.pgrp);
      const refs = out.get(id) ?? [];
      refs.push({ pid: stat.pgrp, startTime: leader?.startTime ?? '' });
      out.set(id, refs);
    }
    return out;
  }
}
