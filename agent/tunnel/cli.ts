// `rc-tunnel` (also `rc tunnel`): run inside an instance to expose a local service on a public URL.
//
//   rc-tunnel expose --port P [--host H] [--detach]   (alias: start)
//   rc-tunnel status [--json]
//   rc-tunnel logs [--lines N]
//
// `expose` runs in the foreground (or, with --detach, in the background) and keeps a status file
// per port and one log file in the state directory; `status` and `logs` read them.
import { spawn } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { numberOption, parse, printJson, UsageError, untilSignal, type Command, portOption } from '../../lib/cli.js';
import { RcError } from '../../lib/errors.js';
import { TunnelClient, type TunnelStatus } from './client.js';
import { readIdentity, stateDir } from './identity-files.js';

export const LOG_FILE = 'tunnel.log';
const STATUS_FILE = /^tunnel-(\d+)\.json$/;
const statusFile = (dir: string, port: number) => join(dir, `tunnel-${port}.json`);

export const TUNNEL_HELP = `Usage: rc-tunnel <command> [options]

Exposes a service running inside this instance on a public URL, through a reverse tunnel to the
platform's gateway. Anyone with the URL can reach the service: put your own authentication in
front of it.

Commands:
  expose --port P [--host H] [--detach]   Expose http://H:P (H default 127.0.0.1); alias: start
  status [--json]                         The tunnels of this instance and their public URLs
  logs [--lines N]                        The last N lines of the tunnel log (default 50)
`;

/** One status file: the client's status plus the process that owns it. */
export interface TunnelRecord extends TunnelStatus {
  pid: number;
}

export function readRecords(dir: string): (TunnelRecord & { running: boolean })[] {
  if (!existsSync(dir)) return [];
  const out: (TunnelRecord & { running: boolean })[] = [];
  for (const name of readdirSync(dir).sort()) {
    if (!STATUS_FILE.test(name)) continue;
    try {
      const r = JSON.parse(readFileSync(join(dir, name), 'utf8')) as TunnelRecord;
      out.push({ ...r, running: isRunning(r.pid) });
    } catch {
      // a status file being rewritten: skip it this time
    }
  }
  return out;
}

function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** The last `n` lines of a file ('' when it does not exist). */
export function tail(file: string, n: number): string {
  if (!existsSync(file)) return '';
  const lines = readFileSync(file, 'utf8').split('\n');
  if (lines.at(-1) === '') lines.pop();
  return lines.slice(Math.max(0, lines.length - n)).join('\n');
}

async function expose(argv: string[], fullArgv: readonly string[]): Promise<number> {
  const { values } = parse(argv, { port: { type: 'string', short: 'p' }, host: { type: 'string' }, detach: { type: 'boolean', short: 'd' } });
  if (values.help) {
    process.stdout.write(TUNNEL_HELP);
    return 0;
  }
  const port = portOption(values.port, { min: 1 });
  if (port === undefined) throw new UsageError('--port is required (the local port to expose)');
  const identity = readIdentity();
  const dir = stateDir();
  mkdirSync(dir, { recursive: true });
  if (values.detach) return detach(port, values.host, dir, fullArgv.length - argv.length - 1);

  const logFile = join(dir, LOG_FILE);
  const log = (line: string) => {
    const text = `${new Date().toISOString()} [port ${port}] ${line}\n`;
    try {
      appendFileSync(logFile, text);
    } catch {
      // the log is best effort
    }
    process.stderr.write(text);
  };
  const file = statusFile(dir, port);
  let announced: string | undefined;
  // The broker setting may list several gateway replicas (comma-separated): one connection to
  // each, so the public URL answers through every replica. The status file shows the best one.
  const brokers = identity.broker
    .split(',')
    .map((b) => b.trim())
    .filter(Boolean);
  const statuses = new Map<string, TunnelRecord>();
  const writeStatus = () => {
    const all = [...statuses.values()];
    const record = all.find((r) => r.state === 'connected') ?? all[0]!;
    writeFileSync(file, JSON.stringify(record) + '\n');
    if (record.state === 'connected' && record.publicUrl !== announced) {
      announced = record.publicUrl;
      process.stdout.write(`Forwarding ${record.publicUrl} -> http://${values.host ?? '127.0.0.1'}:${port}\n`);
    }
  };
  const clients = brokers.map(
    (broker) =>
      new TunnelClient({
        broker,
        token: identity.token,
        port,
        targetHost: values.host,
        log,
        onStatus(status) {
          statuses.set(broker, { ...status, pid: process.pid });
          writeStatus();
        },
      }),
  );
  log(`starting tunnel to ${brokers.join(', ')}`);
  for (const c of clients) c.start();
  const finished = Promise.all(clients.map((c) => c.finished));
  const outcome = await Promise.race([untilSignal().then(() => 'signal' as const), finished.then(() => 'finished' as const)]);
  for (const c of clients) c.stop();
  if (outcome === 'signal') {
    log('stopped');
    rmSync(file, { force: true });
    return 0;
  }
  const failed = readRecords(dir).find((r) => r.port === port && r.pid === process.pid);
  throw new RcError('RC_ERR_TUNNEL_FAILED', failed?.error ?? 'The tunnel stopped', 1);
}

/** Re-runs `expose` in the background and waits until it is connected (or failed). */
async function detach(port: number, host: string | undefined, dir: string, commandIndex: number): Promise<number> {
  // process.argv = [node, script, ...prefix (e.g. "tunnel"), "expose", ...options]
  const prefix = process.argv.slice(2, 2 + Math.max(0, commandIndex));
  const args = [process.argv[1]!, ...prefix, 'expose', '--port', String(port), ...(host ? ['--host', host] : [])];
  const child = spawn(process.execPath, args, { detached: true, stdio: 'ignore', env: process.env });
  child.unref();
  let exited = false;
  child.once('exit', () => (exited = true));
  const deadline = Date.now() + 15_000;
  while (Date.now() < deadline) {
    const r = readRecords(dir).find((x) => x.port === port && x.pid === child.pid);
    if (r?.state === 'connected') {
      process.stdout.write(`Forwarding ${r.publicUrl} -> http://${host ?? '127.0.0.1'}:${port} (pid ${child.pid}; rc-tunnel status, rc-tunnel logs)\n`);
      return 0;
    }
    if (r?.state === 'failed' || exited) throw new RcError('RC_ERR_TUNNEL_FAILED', r?.error ?? `rc-tunnel exited; see rc-tunnel logs`, 1);
    await sleep(100);
  }
  // Why not, when the broker said (a limit's 429: which limit, and that it retries after Retry-After).
  const why = readRecords(dir).find((x) => x.port === port && x.pid === child.pid)?.error;
  process.stdout.write(
    `rc-tunnel is running in the background (pid ${child.pid}) but not connected yet${why ? ` (${why})` : ''}; see rc-tunnel status and rc-tunnel logs\n`,
  );
  return 0;
}

async function status(argv: string[]): Promise<number> {
  const { values } = parse(argv, { json: { type: 'boolean' } });
  if (values.help) {
    process.stdout.write(TUNNEL_HELP);
    return 0;
  }
  const identity = readIdentity();
  const tunnels = readRecords(stateDir()).map((r) => ({
    port: r.port,
    state: r.running ? r.state : 'stopped',
    public_url: r.publicUrl ?? null,
    tunnel_id: r.tunnelId ?? null,
    pid: r.pid,
    running: r.running,
    since: new Date(r.since).toISOString(),
    error: r.error ?? null,
  }));
  if (values.json) {
    printJson({ identity_dir: identity.dir, broker: identity.broker, tunnels });
    return 0;
  }
  const lines = [`Tunnel identity: ${identity.dir} (broker ${identity.broker})`];
  if (!tunnels.length) lines.push('No tunnel is running. Start one with: rc-tunnel expose --port <port>');
  for (const t of tunnels) {
    lines.push(
      `port ${t.port}: ${t.state}${t.public_url ? ` ${t.public_url}` : ''}${t.running ? ` (pid ${t.pid}, since ${t.since})` : ''}${t.error && t.state !== 'connected' ? ` - ${t.error}` : ''}`,
    );
  }
  process.stdout.write(lines.join('\n') + '\n');
  return 0;
}

async function logs(argv: string[]): Promise<number> {
  const { values } = parse(argv, { lines: { type: 'string', short: 'n' } });
  if (values.help) {
    process.stdout.write(TUNNEL_HELP);
    return 0;
  }
  const n = numberOption('lines', values.lines, { integer: true, min: 1 }) ?? 50;
  const text = tail(join(stateDir(), LOG_FILE), n);
  process.stdout.write(text ? text + '\n' : '(no tunnel logs yet)\n');
  return 0;
}

/** Runs a subcommand; `fullArgv` is what the process was given after the script (for --detach). */
export async function runTunnel(argv: string[], fullArgv: readonly string[] = argv): Promise<number> {
  const [sub, ...rest] = argv;
  switch (sub) {
    case 'expose':
    case 'start':
      return expose(rest, fullArgv);
    case 'status':
      return status(rest);
    case 'logs':
      return logs(rest);
    case undefined:
    case '--help':
    case '-h':
    case 'help':
      process.stdout.write(TUNNEL_HELP);
      return sub ? 0 : 2;
    default:
      throw new UsageError(`unknown command ${JSON.stringify(sub)} (expose, status, logs)`);
  }
}

export const tunnelCommand: Command = {
  summary: 'Expose a local service of this instance on a public URL (rc-tunnel)',
  run: (argv) => runTunnel(argv, process.argv.slice(2)),
};
