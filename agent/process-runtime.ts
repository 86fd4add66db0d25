// The process runtime: the start command runs through /bin/sh -c in the instance's own directory,
// in its own session and process group (so it outlives the agent), with stdout and stderr written
// straight into the log file. Stop signals the whole group: SIGTERM, then SIGKILL after the grace;
// and so the groups of the instance's processes that left it for sessions of their own (`rc-tunnel
// --detach` must outlive an SSH login, so it calls setsid): they carry the instance's id and this
// agent's in their environment. Left alone they outlived the instance (issue 44's soak).
//
// It is for one trusted user on their own machine (see agent/README.md, "The process runtime"):
// when the platform runs as root, instances run as an unprivileged user (instanceUser) in homes
// outside the data dir, so the platform's 0600 files are out of their reach; it cannot isolate the
// host network, the loopback services or instances from each other. It refuses to start anything
// when the agent is reachable from other machines, unless the operator allows it.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, closeSync, lstatSync, mkdirSync, openSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { PROJECT_ROOT, TOOL_COMMANDS } from './toolbox.js';
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

/** The account instances run as when the agent runs as root. */
export interface InstanceUser {
  name: string;
  uid: number;
  gid: number;
}

/** Looks up a local user (`id`); throws a clear error when it does not exist. */
export function lookupUser(name: string): InstanceUser {
  try {
    const uid = Number(execFileSync('id', ['-u', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    const gid = Number(execFileSync('id', ['-g', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    if (!Number.isInteger(uid) || !Number.isInteger(gid)) throw new Error('unparsable id output');
    return { name, uid, gid };
  } catch {
    throw new Error(
      `The process runtime runs instances as user ${JSON.stringify(name)} (RC_AGENT_PROCESS_USER) when the agent runs as root, and there is no such user: create it (e.g. useradd --system --no-create-home ${name}) or name another one`,
    );
  }
}

/** chown -R without following symlinks (a symlink an instance made must not redirect it). */
function chownTree(path: string, uid: number, gid: number): void {
  const st = lstatSync(path);
  if (st.isSymbolicLink()) return;
  chownSync(path, uid, gid);
  if (st.isDirectory()) for (const name of readdirSync(path)) chownTree(join(path, name), uid, gid);
}

export interface ProcessRuntimeOptions {
  agentId: string;
  /** Instances run as this user; undefined: as the agent's own user (it does not run as root). */
  user: InstanceUser | undefined;
  /** A directory outside the data dir for the `rc` and `rc-tunnel` commands put on instances' PATH. */
  binDir: string;
  /** Why starts are refused (the agent is reachable from other machines); undefined: they are not. */
  refusal: string | undefined;
}

/** Writes `rc` and `rc-tunnel` wrappers (the running node, this install) into `binDir`. */
function writeCommands(binDir: string): void {
  mkdirSync(binDir, { recursive: true, mode: 0o755 });
  chmodSync(binDir, 0o755);
  for (const [name, entry] of TOOL_COMMANDS) {
    writeFileSync(join(binDir, name), `#!/bin/sh\nexec "${process.execPath}" "${join(PROJECT_ROOT, 'dist', entry)}" "$@"\n`, { mode: 0o755 });
  }
}

export class ProcessRuntime implements Runtime {
  readonly kind = 'process' as const;
  readonly checkHost = '127.0.0.1';
  /** Children started by this agent process: their exit events are exact (code and signal). */
  private readonly children = new Map<number, { child: ChildProcess; exit: ExitInfo | undefined }>();

  constructor(private readonly opts: ProcessRuntimeOptions) {
    writeCommands(opts.binDir);
  }

  async start(ctx: StartContext): Promise<RuntimeRef> {
    const { spec } = ctx;
    if (this.opts.refusal) throw new StartFailure('runtime_refused', this.opts.refusal);
    if (!spec.startCommand.trim()) throw new StartFailure('start_failed', 'The process runtime needs a start command');
    const env: Record<string, string> = {};
    for (const k of INHERITED_ENV) if (process.env[k] !== undefined) env[k] = process.env[k]!;
    env.PATH = `${this.opts.binDir}:${env.PATH ?? '/usr/local/bin:/usr/bin:/bin'}`;
    const user = this.opts.user;
    if (user) {
      Object.assign(env, { HOME: ctx.homeDir, USER: user.name, LOGNAME: user.name });
      // The instance owns its home (files, .ssh) and its named volume; nothing else of the agent's.
      chownTree(ctx.homeDir, user.uid, user.gid);
      if (ctx.volumePath && !spec.volume.startsWith('/')) chownTree(ctx.volumePath, user.uid, user.gid);
    }
    Object.assign(env, spec.env, ctx.agentEnv, { [AGENT_ID_ENV]: this.opts.agentId });
    const mainPort = spec.ports[0];
    if (mainPort !== undefined) env.PORT = String(ctx.hostPorts.get(mainPort));
    env.RC_INSTANCE_DIR = ctx.homeDir;
    if (ctx.volumePath) env.RC_VOLUME_DIR = ctx.volumePath;

    const fd = openSync(ctx.logFile, 'a');
    let child: ChildProcess;
    try {
      child = spawn('/bin/sh', ['-c', spec.startCommand], {
        cwd: ctx.homeDir,
        env,
        detached: true,
        stdio: ['ignore', fd, fd],
        ...(user ? { uid: user.uid, gid: user.gid } : {}),
      });
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
    return { pid, startTime, instanceId: ctx.agentEnv[INSTANCE_ID_ENV] ?? '' };
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
    const ours = !(leader && leader.state !== 'Z' && leader.startTime !== startTime);
    const groups = [...(ours ? [pid] : []), ...this.strayGroups(String(ref.instanceId ?? ''), pid)];
    const alive = () => groups.some((g) => groupMembers(g).length > 0);
    if (!alive()) return;
    for (const g of groups) signalGroup(g, 'SIGTERM');
    const deadline = Date.now() + graceMs;
    while (Date.now() < deadline) {
      if (!alive()) return this.forget(pid);
      await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
    }
    for (let i = 0; i < 100 && alive(); i++) {
      for (const g of groups) signalGroup(g, 'SIGKILL');
      await sleep(50);
    }
    this.forget(pid);
  }

  /** Process groups other than `group` with processes of `instanceId` started by this agent (sessions of their own). */
  private strayGroups(instanceId: string, group: number): number[] {
    if (instanceId === '') return []; // a ref from before instance ids were kept in it
    const found = findByEnv(INSTANCE_ID_ENV, instanceId).filter((p) => p.env.get(AGENT_ID_ENV) === this.opts.agentId && p.pid !== process.pid);
    return [...new Set(found.map((p) => p.stat.pgrp))].filter((g) => g !== group && g > 1);
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
    for (const { env, stat } of findByEnv(AGENT_ID_ENV, this.opts.agentId)) {
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
