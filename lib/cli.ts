// Shared plumbing of the rc subcommands (every part adds its own): argument parsing with clear
// errors, JSON output, waiting for a signal. In lib/ because every part's CLI uses it.
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { LibError } from './errors.js';

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
