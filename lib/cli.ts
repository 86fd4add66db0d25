// Shared plumbing of the rc subcommands (every part adds its own): argument parsing with clear
// errors, JSON output, waiting for a signal. In lib/ because every part's CLI uses it.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { LibError } from './errors.js';
import type { Logger } from './log.js';
import { TIMED_OUT, within } from './within.js';

/** Bad command-line input: printed with the command's usage, exit code 2. */
export class UsageError extends LibError {
  constructor(message: string) {
    super('RC_ERR_USAGE', message);
  }
}

export interface Command {
  /** One line for `rc --help`. */
  summary: string;
  /** Runs the command; resolves to the exit code (or never, for servers). */
  run(argv: string[]): Promise<number>;
}

/** parseArgs that throws UsageError (not TypeError) on unknown or malformed options. */
export function parse<T extends NonNullable<ParseArgsConfig['options']>>(argv: string[], options: T, allowPositionals = false) {
  try {
    return parseArgs({ args: argv, options: { help: { type: 'boolean', short: 'h' }, ...options }, allowPositionals, strict: true });
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

/** A number option: absent gives `undefined`; anything but a finite number is a UsageError. */
export function numberOption(name: string, value: string | undefined, { integer = false, min = -Infinity } = {}): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n)) || n < min) {
    throw new UsageError(`--${name} must be ${integer ? 'an integer' : 'a number'}${min > -Infinity ? ` >= ${min}` : ''}, got ${JSON.stringify(value)}`);
  }
  return n;
}

/** A TCP port option: absent gives `undefined`; anything but an integer in [min, 65535] is a UsageError. */
export function portOption(value: string | undefined, { name = 'port', min = 0 } = {}): number | undefined {
  const port = numberOption(name, value, { integer: true, min });
  if (port !== undefined && port > 65535) throw new UsageError(`--${name} must be at most 65535, got ${port}`);
  return port;
}

export function printJson(value: unknown): void {
  process.stdout.write(JSON.stringify(value, null, 2) + '\n');
}

/** Resolves when SIGINT or SIGTERM arrives. */
export function untilSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    const on = (sig: NodeJS.Signals) => {
      process.off('SIGINT', on);
      process.off('SIGTERM', on);
      resolve(sig);
    };
    process.on('SIGINT', on);
    process.on('SIGTERM', on);
  });
}

/** How long a server's shutdown may take after SIGINT or SIGTERM before the process gives up on it. */
export const SHUTDOWN_DEADLINE_MS = 15_000;
/** How long a closed server may take to exit by itself before it is made to (a handle left open). */
export const EXIT_GRACE_MS = 2_000;

/**
 * Waits for SIGINT or SIGTERM, then closes the server; resolves to the exit code. A signal must
 * end the process: a supervisor (or a test) waiting for it must not wait forever on one close that
 * hangs or one timer or socket nobody closed. So `close` gets SHUTDOWN_DEADLINE_MS (exit code 1
 * past it, logged), and once it has settled the process gets EXIT_GRACE_MS to exit by itself;
 * past that the resources still open are logged by type and the process exits anyway. A second
 * signal during the close ends the process at once (Node's default, the listeners being gone).
 */
export async function closeOnSignal(
  close: () => Promise<unknown>,
  logger: Logger,
  {
    signal = untilSignal(),
    deadlineMs = SHUTDOWN_DEADLINE_MS,
    exitGraceMs = EXIT_GRACE_MS,
  }: { signal?: Promise<NodeJS.Signals>; deadlineMs?: number; exitGraceMs?: number } = {},
): Promise<number> {
  logger.info('stopping', { signal: await signal });
  let code = 0;
  try {
    if ((await within(close(), deadlineMs)) === TIMED_OUT) {
      logger.error('shutdown did not finish in time; exiting', { deadlineMs, open: process.getActiveResourcesInfo() });
      code = 1;
    }
  } catch (err) {
    logger.error('shutdown failed; exiting', { err });
    code = 1;
  }
  setTimeout(() => {
    logger.warn('resources left open after the shutdown; exiting', { open: process.getActiveResourcesInfo() });
    process.exit(code);
  }, exitGraceMs).unref();
  return code;
}
