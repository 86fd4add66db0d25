// Structured logging: one JSON object per line on stderr. Quiet in tests (RC_LOG_LEVEL=silent,
// set by the test runner). Log calls below the level cost one comparison.
import { randomBytes } from 'node:crypto';

export type LogLevel = 'silent' | 'error' | 'warn' | 'info' | 'debug';
const RANK: Record<LogLevel, number> = { silent: 0, error: 1, warn: 2, info: 3, debug: 4 };

export interface Logger {
  error(msg: string, fields?: Record<string, unknown>): void;
  warn(msg: string, fields?: Record<string, unknown>): void;
  info(msg: string, fields?: Record<string, unknown>): void;
  debug(msg: string, fields?: Record<string, unknown>): void;
  /** A logger whose lines all carry `bindings` (for example `{ part: 'gateway' }` or a request id). */
  child(bindings: Record<string, unknown>): Logger;
  readonly level: LogLevel;
}

export function createLogger(
  level: LogLevel = (process.env.RC_LOG_LEVEL as LogLevel) || 'info',
  bindings: Record<string, unknown> = {},
  write: (line: string) => void = (line) => process.stderr.write(line),
): Logger {
  const rank = RANK[level] ?? RANK.info;
  const emit = (lvl: LogLevel, msg: string, fields?: Record<string, unknown>) => {
    if (RANK[lvl] > rank) return;
    const entry: Record<string, unknown> = { time: new Date().toISOString(), level: lvl, ...bindings, msg, ...fields };
    const err = entry.err;
    if (err instanceof Error) entry.err = { name: err.name, message: err.message, code: (err as { code?: unknown }).code, stack: err.stack };
    write(JSON.stringify(entry) + '\n');
  };
  return {
    level,
    error: (m, f) => emit('error', m, f),
    warn: (m, f) => emit('warn', m, f),
    info: (m, f) => emit('info', m, f),
    debug: (m, f) => emit('debug', m, f),
    child: (b) => createLogger(level, { ...bindings, ...b }, write),
  };
}

let counter = 0;
const prefix = randomBytes(4).toString('hex');
/** A request id unique within this process and unlikely to collide across processes. */
export function requestId(): string {
  return `${prefix}-${(++counter).toString(36)}`;
}
