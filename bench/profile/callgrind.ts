// A target process under valgrind's callgrind, counting the instructions it executes while a known
// number of requests goes through it. Instructions, unlike CPU time, do not depend on what else
// the machine is doing: the same binary, inputs and load give the same count, so two versions of
// the code (or the gateway and nginx) can be compared on a shared, noisy machine. Kernel work is
// not counted (callgrind sees user space only).
//
// Instrumentation starts off: the target starts, takes an unmeasured warm-up (V8 optimizes the
// hot functions), then `callgrind_control -i on`, the measured requests, `-i off` and a dump.
// Node targets run with --perf-basic-prof, whose map names the JIT code callgrind sees only as
// addresses.
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { promisify } from 'node:util';
import { findOrInstall } from '../apt.js';
import { stopper } from '../load.js';

const run = promisify(execFile);

/** valgrind, installed from Debian's package when missing; undefined when that fails. */
export function findValgrind(): string | undefined {
  return findOrInstall(['/usr/bin/valgrind'], 'valgrind');
}

/**
 * glibc's memcpy copies more than a few KB with `rep movsb` (above `x86_rep_movsb_threshold`, 4 KB
 * with AVX2), which callgrind counts as one instruction a byte: a backend read of 8.5 KB copied
 * once counted 8.7k instructions where its 6.4 KB read of another backend counted 0.7k, though
 * the hardware copies either in a few hundred cycles. The target's glibc is told to copy with its
 * vector loop at any size instead, which callgrind counts as the instructions they are, so a
 * count follows the bytes' real cost (every target alike; RC_PROFILE_REP_MOVSB=1 keeps glibc's
 * default). Appended to the caller's GLIBC_TUNABLES, if any.
 */
function glibcTunables(): Record<string, string> {
  if (process.env.RC_PROFILE_REP_MOVSB === '1') return {};
  const own = 'glibc.cpu.x86_rep_movsb_threshold=4194304';
  const given = process.env.GLIBC_TUNABLES;
  return { GLIBC_TUNABLES: given ? `${given}:${own}` : own };
}

/** How the target says it is ready: a JSON line with `url` on stdout, or a port that accepts connections. */
export type Readiness = { kind: 'json-url' } | { kind: 'port'; url: string };

export interface CallgrindTarget {
  label: string;
  url: string;
  pid: number;
  child: ChildProcess;
  /** Counts what `load` makes the target execute (one dump each call); `requests` divides the totals. */
  measure(load: () => Promise<unknown>, requests: number): Promise<Counts>;
  /**
   * The functions of the last measure()'s main thread by their own instructions (or, `inclusive`,
   * with those of what they call), JIT code named.
   */
  topFunctions(n: number, inclusive?: boolean): Promise<FunctionCost[]>;
  /** Stops the target; `keepMap` leaves its JIT map in /tmp. */
  stop(keepMap?: boolean): Promise<void>;
}

export interface Counts {
  /** Instructions per request on the main thread (the event loop). */
  mainPerRequest: number;
  /** Instructions per request on every thread (V8's GC and compiler threads, libuv's pool). */
  allPerRequest: number;
}

export interface FunctionCost {
  /** Instructions per request in the function itself. */
  perRequest: number;
  name: string;
}

/**
 * Starts `argv` under callgrind, its output files in `outDir`; resolves once it is ready.
 * `env` is added to this process's environment.
 */
export async function startUnderCallgrind(
  label: string,
  argv: string[],
  env: Record<string, string>,
  ready: Readiness,
  outDir: string,
): Promise<CallgrindTarget> {
  const valgrind = findValgrind();
  if (!valgrind) throw new Error('valgrind is not installed and could not be');
  const args = ['--tool=callgrind', '--separate-threads=yes', '--instr-atstart=no', `--callgrind-out-file=${join(outDir, 'cg.%p')}`, ...argv];
  const child = spawn(valgrind, args, { stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, RC_LOG_LEVEL: 'warn', ...glibcTunables(), ...env } });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const url = await whenReady(child, ready);
  const pid = child.pid!;
  let requests = 1;
  let dumps = 0;
  return {
    label,
    url,
    pid,
    child,
    async measure(load, n) {
      requests = n;
      await run('callgrind_control', ['-i', 'on', String(pid)]);
      await load();
      await run('callgrind_control', ['-i', 'off', String(pid)]);
      await run('callgrind_control', ['-d', String(pid)]);
      const files = dumpFiles(outDir, pid, ++dumps);
      if (files.length === 0) throw new Error(`callgrind wrote no dump for ${label}`);
      let main = 0;
      let all = 0;
      for (const f of files) {
        const total = totalOf(readFileSync(f, 'latin1'));
        all += total;
        if (f.endsWith('-01')) main = total;
      }
      return { mainPerRequest: Math.round(main / n), allPerRequest: Math.round(all / n) };
    },
    async topFunctions(n, inclusive = false) {
      const main = dumpFiles(outDir, pid, dumps).find((f) => f.endsWith('-01'));
      if (!main) return [];
      const { stdout } = await run('callgrind_annotate', ['--threshold=100', `--inclusive=${inclusive ? 'yes' : 'no'}`, main], {
        maxBuffer: 64 * 1024 * 1024,
      });
      const mapFile = `/tmp/perf-${pid}.map`;
      const jit = existsSync(mapFile) ? parsePerfMap(readFileSync(mapFile, 'utf8')) : [];
      return parseAnnotate(stdout, jit)
        .slice(0, n)
        .map((f) => ({ perRequest: Math.round(f.instructions / requests), name: f.name }));
    },
    async stop(keepMap = false) {
      await stopper(child, exited, 30_000)();
      if (!keepMap) rmSync(`/tmp/perf-${pid}.map`, { force: true });
    },
  };
}

/** The target's URL once it is ready; a target not ready within 120 s is killed. */
function whenReady(child: ChildProcess, ready: Readiness): Promise<string> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const settle = (err: Error | undefined, url = ''): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(url);
    };
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      settle(new Error('the target under callgrind was not ready within 120 s'));
    }, 120_000);
    child.once('exit', (code) => settle(new Error(`the target under callgrind exited with ${code} before it was ready`)));
    if (ready.kind === 'json-url') {
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (line.startsWith('{') && line.includes('"url"')) settle(undefined, (JSON.parse(line) as { url: string }).url);
      });
      return;
    }
    const poll = (): void => {
      if (settled) return;
      fetch(ready.url).then(
        () => settle(undefined, ready.url),
        () => setTimeout(poll, 200),
      );
    };
    poll();
  });
}

/** The per-thread files of `pid`'s dump number `dump` (`cg.<pid>.<dump>-<thread>`). */
function dumpFiles(dir: string, pid: number, dump: number): string[] {
  const prefix = `cg.${pid}.${dump}-`;
  return readdirSync(dir)
    .filter((f) => f.startsWith(prefix))
    .map((f) => join(dir, f));
}

/** The instruction total of one callgrind output file. */
export function totalOf(text: string): number {
  const m = /^totals:\s+(\d+)/m.exec(text) ?? /^summary:\s+(\d+)/m.exec(text);
  return m ? Number(m[1]) : 0;
}

export interface JitRange {
  start: number;
  size: number;
  name: string;
}

/** Node's --perf-basic-prof map: `<hex start> <hex size> <name>` per line, sorted by start. */
export function parsePerfMap(text: string): JitRange[] {
  const out: JitRange[] = [];
  for (const line of text.split('\n')) {
    const a = line.indexOf(' ');
    const b = line.indexOf(' ', a + 1);
    if (a < 0 || b < 0) continue;
    out.push({ start: Number.parseInt(line.slice(0, a), 16), size: Number.parseInt(line.slice(a + 1, b), 16), name: line.slice(b + 1) });
  }
  return out.sort((x, y) => x.start - y.start);
}

/** The JIT code at `address`, or undefined. */
export function jitName(ranges: readonly JitRange[], address: number): string | undefined {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const r = ranges[mid]!;
    if (address < r.start) hi = mid - 1;
    else if (address >= r.start + r.size) lo = mid + 1;
    else return r.name;
  }
  return undefined;
}

/**
 * callgrind_annotate's function lines (`1,234 (5.6%)  file:function [object]`), in its order
 * (most instructions first), with `???:0x...` addresses named from the JIT map when they fall in it.
 */
export function parseAnnotate(text: string, jit: readonly JitRange[]): { instructions: number; name: string }[] {
  const out: { instructions: number; name: string }[] = [];
  for (const line of text.split('\n')) {
    const m = /^\s*([\d,]+)\s+\(\s*[\d.]+%\)\s+(.+)$/.exec(line);
    if (!m || m[2]!.includes('PROGRAM TOTALS')) continue;
    let name = m[2]!.trim();
    const address = /^\?\?\?:0x([0-9a-f]+) \[\?\?\?\]$/.exec(name);
    if (address) name = jitName(jit, Number.parseInt(address[1]!, 16)) ?? name;
    else name = name.replace(/^\?\?\?:/, '').replace(/^\S+\/([^/\s]+:)/, '$1');
    out.push({ instructions: Number(m[1]!.replace(/,/g, '')), name });
  }
  return out;
}
