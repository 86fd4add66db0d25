// The load harness: drives HTTP targets with wrk (when on PATH) or autocannon, measures req/s,
// p50/p99 latency and each target's CPU microseconds per request (from /proc/PID/stat), and
// compares targets side by side in one run (e.g. "gateway in front of the sim" vs "the sim
// directly"). Targets are separate processes, so the CPU they burn is theirs alone.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** One HTTP request, repeated by the load generator. */
export interface LoadRequest {
  method: 'GET' | 'POST';
  path: string;
  headers?: Record<string, string>;
  body?: string;
}

/** A running target: where it listens and which process serves it (for its CPU time). */
export interface Target {
  label: string;
  url: string;
  pid: number;
}

export interface LoadOptions {
  /** Seconds of measured load per target (env RC_BENCH_DURATION_S, default 3). */
  durationS?: number;
  /** Seconds of unmeasured warm-up per target (env RC_BENCH_WARMUP_S, default 1). */
  warmupS?: number;
  /** Concurrent connections (env RC_BENCH_CONNECTIONS, default 32). */
  connections?: number;
  /** 'wrk' or 'autocannon' (env RC_BENCH_TOOL; default wrk when on PATH). */
  tool?: LoadTool;
}

export type LoadTool = 'wrk' | 'autocannon';

export interface LoadResult {
  label: string;
  url: string;
  tool: LoadTool;
  connections: number;
  durationS: number;
  requests: number;
  rps: number;
  p50Ms: number;
  p99Ms: number;
  /** Responses with a status other than 2xx/3xx, plus socket errors and timeouts. */
  errors: number;
  /** Target process CPU time (user + system) per completed request, in microseconds. */
  cpuUsPerRequest: number | null;
  /** Target CPU utilisation during the run (1 = one core fully busy). */
  cpuCores: number | null;
}

export interface Comparison {
  name: string;
  request: LoadRequest;
  results: LoadResult[];
  /** Label of the target the others are compared with. */
  baseline: string;
  /** rps of each target divided by the baseline's rps. */
  ratios: Record<string, number>;
  /** CPU µs per request of each target divided by the baseline's (when both were measured). */
  cpuRatios?: Record<string, number>;
  /** Chunks relayed per request (streams): the table then shows CPU µs per chunk too. */
  chunks?: number;
}

const num = (v: string | undefined, def: number) => (v && Number.isFinite(Number(v)) && Number(v) > 0 ? Number(v) : def);

function resolveOptions(o: LoadOptions = {}): Required<LoadOptions> {
  const envTool = process.env.RC_BENCH_TOOL;
  const tool = o.tool ?? (envTool === 'wrk' || envTool === 'autocannon' ? envTool : hasWrk() ? 'wrk' : 'autocannon');
  return {
    durationS: o.durationS ?? num(process.env.RC_BENCH_DURATION_S, 3),
    warmupS: o.warmupS ?? num(process.env.RC_BENCH_WARMUP_S, 1),
    connections: o.connections ?? num(process.env.RC_BENCH_CONNECTIONS, 32),
    tool,
  };
}

let wrkOnPath: boolean | undefined;
export function hasWrk(): boolean {
  if (wrkOnPath === undefined) {
    try {
      execFileSync('wrk', ['--version'], { stdio: 'ignore' });
      wrkOnPath = true;
    } catch (err) {
      // wrk --version exits 1 after printing its version; only ENOENT means it is missing.
      wrkOnPath = (err as NodeJS.ErrnoException).code !== 'ENOENT';
    }
  }
  return wrkOnPath;
}

// ---- CPU time of a process ------------------------------------------------------------------

let clockTicks: number | undefined;
function ticksPerSecond(): number {
  if (clockTicks === undefined) {
    try {
      clockTicks = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      clockTicks = 100;
    }
  }
  return clockTicks;
}

/** User + system CPU time of process `pid` in microseconds, or null where /proc is unavailable. */
export function processCpuUs(pid: number): number | null {
  const path = `/proc/${pid}/stat`;
  if (!existsSync(path)) return null;
  const stat = readFileSync(path, 'utf8');
  // Fields after "(comm)": state is field 3, utime field 14, stime field 15.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1e6) / ticksPerSecond();
}

// ---- load generators ------------------------------------------------------------------------

interface RawResult {
  requests: number;
  durationS: number;
  p50Ms: number;
  p99Ms: number;
  errors: number;
}

const luaString = (s: string) => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')}"`;

async function runWrk(url: string, req: LoadRequest, connections: number, durationS: number): Promise<RawResult> {
  const dir = mkdtempSync(join(tmpdir(), 'rc-bench-'));
  try {
    const script = join(dir, 'req.lua');
    const headers = Object.entries({ 'content-type': 'application/json', ...req.headers })
      .map(([k, v]) => `wrk.headers[${luaString(k)}] = ${luaString(v)}`)
      .join('\n');
    writeFileSync(
      script,
      `wrk.method = "${req.method}"
${req.body !== undefined ? `wrk.body = ${luaString(req.body)}` : ''}
${headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RCBENCH {"requests":%d,"duration_us":%d,"errors":%d,"p50_us":%d,"p99_us":%d}\\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`,
    );
    const out = await runProcess('wrk', ['-t1', `-c${connections}`, `-d${durationS}s`, '--timeout', '10s', '-s', script, url + req.path]);
    const line = out.split('\n').find((l) => l.startsWith('RCBENCH '));
    if (!line) throw new Error(`wrk printed no summary:\n${out}`);
    const j = JSON.parse(line.slice(8)) as { requests: number; duration_us: number; errors: number; p50_us: number; p99_us: number };
    return { requests: j.requests, durationS: j.duration_us / 1e6, p50Ms: j.p50_us / 1000, p99Ms: j.p99_us / 1000, errors: j.errors };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function runAutocannon(url: string, req: LoadRequest, connections: number, durationS: number): Promise<RawResult> {
  const bin = createRequire(import.meta.url).resolve('autocannon/autocannon.js');
  const args = [bin, '-c', String(connections), '-d', String(durationS), '-m', req.method, '-j', '-t', '10'];
  for (const [k, v] of Object.entries({ 'content-type': 'application/json', ...req.headers })) args.push('-H', `${k}=${v}`);
  if (req.body !== undefined) args.push('-b', req.body);
  const out = await runProcess(process.execPath, [...args, url + req.path]);
  const j = JSON.parse(out.slice(out.indexOf('{'))) as {
    requests: { total: number };
    duration: number;
    latency: { p50: number; p99: number };
    non2xx: number;
    errors: number;
    timeouts: number;
  };
  return { requests: j.requests.total, durationS: j.duration, p50Ms: j.latency.p50, p99Ms: j.latency.p99, errors: j.non2xx + j.errors + j.timeouts };
}

function runProcess(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d;
    });
    child.stderr.on('data', (d: Buffer) => {
      err += d;
    });
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${cmd} exited with ${code}: ${err || out}`))));
  });
}

/** Drives one target with the request for `durationS` and reports throughput, latency and CPU. */
export async function runLoad(target: Target, request: LoadRequest, options?: LoadOptions): Promise<LoadResult> {
  const o = resolveOptions(options);
  const drive = o.tool === 'wrk' ? runWrk : runAutocannon;
  if (o.warmupS > 0) await drive(target.url, request, o.connections, o.warmupS);
  const cpuBefore = processCpuUs(target.pid);
  const raw = await drive(target.url, request, o.connections, o.durationS);
  const cpuAfter = processCpuUs(target.pid);
  const cpu = cpuBefore !== null && cpuAfter !== null ? cpuAfter - cpuBefore : null;
  return {
    label: target.label,
    url: target.url,
    tool: o.tool,
    connections: o.connections,
    durationS: raw.durationS,
    requests: raw.requests,
    rps: raw.requests / raw.durationS,
    p50Ms: raw.p50Ms,
    p99Ms: raw.p99Ms,
    errors: raw.errors,
    cpuUsPerRequest: cpu !== null && raw.requests > 0 ? cpu / raw.requests : null,
    cpuCores: cpu !== null ? cpu / 1e6 / raw.durationS : null,
  };
}

/**
 * Runs the same load against each target in turn and compares their throughput with the
 * baseline (default: the last target, e.g. "backend directly" after "gateway in front").
 */
export async function compare(spec: { name: string; request: LoadRequest; targets: Target[]; baseline?: string; options?: LoadOptions }): Promise<Comparison> {
  const results: LoadResult[] = [];
  for (const t of spec.targets) results.push(await runLoad(t, spec.request, spec.options));
  const baseline = spec.baseline ?? spec.targets.at(-1)!.label;
  const base = results.find((r) => r.label === baseline);
  return { name: spec.name, request: spec.request, results, baseline, ratios: ratiosTo(base, results) };
}

/** Each row's throughput as a ratio to `base`'s (NaN without a base or when it served nothing). */
export function ratiosTo(base: LoadResult | undefined, rows: LoadResult[]): Record<string, number> {
  return Object.fromEntries(rows.map((r) => [r.label, base && base.rps > 0 ? r.rps / base.rps : NaN]));
}

/** Prints comparisons as one table. */
export function printComparisons(comparisons: Comparison[], write: (s: string) => void = (s) => process.stdout.write(s)): void {
  const head = ['scenario', 'target', 'req/s', 'p50 ms', 'p99 ms', 'CPU us/req', 'cores', 'errors', 'vs base', 'CPU x base', 'us/chunk'];
  const rows = comparisons.flatMap((c) =>
    c.results.map((r) => {
      const cpuRatio = c.cpuRatios?.[r.label];
      return [
        c.name,
        r.label,
        r.rps.toFixed(0),
        r.p50Ms.toFixed(2),
        r.p99Ms.toFixed(2),
        r.cpuUsPerRequest === null ? 'n/a' : r.cpuUsPerRequest.toFixed(1),
        r.cpuCores === null ? 'n/a' : r.cpuCores.toFixed(2),
        String(r.errors),
        c.results.length > 1 ? `${(c.ratios[r.label]! * 100).toFixed(0)}%` : '-',
        cpuRatio === undefined || Number.isNaN(cpuRatio) ? '-' : `${cpuRatio.toFixed(2)}x`,
        c.chunks && r.cpuUsPerRequest !== null ? (r.cpuUsPerRequest / c.chunks).toFixed(2) : '-',
      ];
    }),
  );
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => cells.map((c, i) => (i < 2 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ') + '\n';
  write(line(head));
  write(line(widths.map((w) => '-'.repeat(w))));
  for (const r of rows) write(line(r));
}

// ---- target processes -----------------------------------------------------------------------

/** The compiled `rc` CLI next to this compiled file (dist/bin/rc.js or .build/NAME/bin/rc.js). */
export const RC_CLI = fileURLToPath(new URL('../bin/rc.js', import.meta.url));
/** bench/floor-relay.ts, compiled next to this file: the runtime's floor (uWS + net, no gateway work). */
export const FLOOR_RELAY = fileURLToPath(new URL('./floor-relay.js', import.meta.url));
/** bench/uws-front.ts, compiled next to this file: uWS and one JS handler answering from memory, no backend exchange. */
export const UWS_FRONT = fileURLToPath(new URL('./uws-front.js', import.meta.url));

export interface SpawnedTarget extends Target {
  child: ChildProcess;
  stop(): Promise<void>;
}

/**
 * Spawns `rc <args>` (e.g. `['sim', '--fast', '--port', '0', '--model', 'm']`) and waits for the
 * one JSON line with its `url` on stdout. `cpu` pins it to one core with taskset when available.
 */
export function spawnRc(label: string, args: string[], opts: { cpu?: number; env?: NodeJS.ProcessEnv } = {}): Promise<SpawnedTarget> {
  return spawnNode(label, RC_CLI, args, opts);
}

/** Spawns `node <script> <args>` and waits for the one JSON line with its `url` on stdout (as spawnRc). */
export async function spawnNode(label: string, script: string, args: string[], opts: { cpu?: number; env?: NodeJS.ProcessEnv } = {}): Promise<SpawnedTarget> {
  const pin = opts.cpu !== undefined && hasTaskset();
  const [cmd, argv] = pin ? ['taskset', ['-c', String(opts.cpu), process.execPath, script, ...args]] : [process.execPath, [script, ...args]];
  const child = spawn(cmd, argv, { stdio: ['ignore', 'pipe', 'inherit'], env: { RC_LOG_LEVEL: 'warn', ...process.env, ...opts.env } });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once('line', resolve);
    child.once('exit', (code) => reject(new Error(`${script} ${args.join(' ')} exited with ${code} before printing its URL`)));
  });
  const { url } = JSON.parse(line) as { url: string };
  return { label, url, pid: child.pid!, child, stop: stopper(child, exited) };
}

/** Stops a target: SIGTERM, SIGKILL after `graceMs`, resolves once `exited` has. */
export function stopper(child: ChildProcess, exited: Promise<void>, graceMs = 5000): () => Promise<void> {
  return async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
    await exited;
    clearTimeout(timer);
  };
}

let tasksetOnPath: boolean | undefined;
function hasTaskset(): boolean {
  if (tasksetOnPath === undefined) {
    try {
      execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
      tasksetOnPath = true;
    } catch {
      tasksetOnPath = false;
    }
  }
  return tasksetOnPath;
}
