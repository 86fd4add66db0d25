// Linux /proc helpers: process identity (pid + start time, so a reused pid is never mistaken for
// ours), liveness that treats zombies as dead, and the members of a process group.
import { readdirSync, readFileSync } from 'node:fs';

export interface ProcStat {
  pid: number;
  /** One letter: R, S, D, Z, T, ... */
  state: string;
  ppid: number;
  pgrp: number;
  /** Start time in clock ticks since boot (field 22); stable for the life of the process. */
  startTime: string;
}

/** Parses /proc/PID/stat. The command name may contain spaces and parentheses, so fields are counted after the last ')'. */
export function parseProcStat(text: string): ProcStat | undefined {
  const open = text.indexOf('(');
  const close = text.lastIndexOf(')');
  if (open < 0 || close < open) return undefined;
  const pid = Number(text.slice(0, open).trim());
  const rest = text.slice(close + 2).split(' ');
  // rest[0] is field 3 (state); field N is rest[N - 3].
  const startTime = rest[22 - 3];
  if (!Number.isInteger(pid) || rest.length < 20 || startTime === undefined) return undefined;
  return { pid, state: rest[0]!, ppid: Number(rest[1]), pgrp: Number(rest[2]), startTime };
}

export function readProcStat(pid: number): ProcStat | undefined {
  try {
    return parseProcStat(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return undefined;
  }
}

/** True when `pid` runs (not a zombie) and, if given, started at `startTime`. */
export function isAlive(pid: number, startTime?: string): boolean {
  const stat = readProcStat(pid);
  if (!stat || stat.state === 'Z' || stat.state === 'X') return false;
  return startTime === undefined || stat.startTime === startTime;
}

/** Live (non-zombie) members of process group `pgid`. */
export function groupMembers(pgid: number): number[] {
  const out: number[] = [];
  for (const pid of allPids()) {
    const stat = readProcStat(pid);
    if (stat && stat.pgrp === pgid && stat.state !== 'Z' && stat.state !== 'X') out.push(stat.pid);
  }
  return out;
}

/** Every pid in /proc (empty when /proc cannot be read). */
function allPids(): number[] {
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return [];
  }
  const pids: number[] = [];
  for (const e of entries) {
    const c = e.charCodeAt(0);
    if (c >= 48 && c <= 57) pids.push(Number(e));
  }
  return pids;
}

/** Reads the environment of `pid` (own processes only); undefined when unreadable. */
export function readEnviron(pid: number): Map<string, string> | undefined {
  let raw: string;
  try {
    raw = readFileSync(`/proc/${pid}/environ`, 'utf8');
  } catch {
    return undefined;
  }
  const env = new Map<string, string>();
  for (const entry of raw.split('\0')) {
    const eq = entry.indexOf('=');
    if (eq > 0) env.set(entry.slice(0, eq), entry.slice(eq + 1));
  }
  return env;
}

/** Pids of live processes whose environment has `key=value` (used to find orphans of this agent). */
export function findByEnv(key: string, value: string): { pid: number; env: Map<string, string>; stat: ProcStat }[] {
  const out: { pid: number; env: Map<string, string>; stat: ProcStat }[] = [];
  for (const pid of allPids()) {
    const stat = readProcStat(pid);
    if (!stat || stat.state === 'Z') continue;
    const env = readEnviron(pid);
    if (env?.get(key) === value) out.push({ pid, env, stat });
  }
  return out;
}
