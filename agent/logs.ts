// Instance output. The instance writes stdout and stderr straight into its log file (so it keeps
// running when the agent dies: no pipe to break). While the agent runs, a LogWatcher per live
// instance tails that file into a ring buffer of recent lines and fans new lines out to followers;
// the same code serves instances the agent started and instances it adopted after a restart.
// The watcher also keeps the file within its cap (log-file.ts): it rotates the file when a poll
// finds it past `fileBytes`, after reading what it holds.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { StringDecoder } from 'node:string_decoder';
import { droppedBytes, droppedLine, rotate, rotatedPath, type LogCap, type Rotated } from './log-file.js';

/** Longest line kept; longer lines are split. */
const MAX_LINE = 16 * 1024;
/** Most bytes read from the end of a file for a tail. */
const MAX_TAIL_BYTES = 8 * 1024 * 1024;

/** A fixed-size circular buffer of the most recent lines. */
export class RingBuffer {
  private readonly items: string[];
  private start = 0;
  private size = 0;
  constructor(readonly capacity: number) {
    this.items = new Array<string>(capacity);
  }
  push(line: string): void {
    if (this.size < this.capacity) {
      this.items[(this.start + this.size++) % this.capacity] = line;
    } else {
      this.items[this.start] = line;
      this.start = (this.start + 1) % this.capacity;
    }
  }
  get length(): number {
    return this.size;
  }
  /** The last `n` lines, oldest first. */
  last(n: number): string[] {
    const k = Math.min(n, this.size);
    const out = new Array<string>(k);
    for (let i = 0; i < k; i++) out[i] = this.items[(this.start + this.size - k + i) % this.capacity]!;
    return out;
  }
}

/** Splits text into complete lines; returns the unterminated rest. */
export function splitLines(pending: string, chunk: string, out: string[]): string {
  let text = pending + chunk;
  let nl: number;
  while ((nl = text.indexOf('\n')) >= 0) {
    pushLine(text.slice(0, nl), out);
    text = text.slice(nl + 1);
  }
  while (text.length > MAX_LINE) {
    out.push(text.slice(0, MAX_LINE));
    text = text.slice(MAX_LINE);
  }
  return text;
}

function pushLine(line: string, out: string[]): void {
  if (line.endsWith('\r')) line = line.slice(0, -1);
  for (let i = 0; i < line.length; i += MAX_LINE) out.push(line.slice(i, i + MAX_LINE));
  if (line.length === 0) out.push('');
}

/**
 * The last `n` complete lines of the file's first `end` bytes (the whole file by default), plus an
 * unterminated last line if any. Missing file: no lines.
 */
export function readLastLines(path: string, n: number, end?: number): string[] {
  return readTail(path, n, end).lines;
}

/** readLastLines, and whether the lines reach the file's first byte (nothing older in it). */
function readTail(path: string, n: number, end?: number): { lines: string[]; fromStart: boolean } {
  if (n <= 0) return { lines: [], fromStart: false };
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return { lines: [], fromStart: true };
  }
  try {
    const size = Math.min(end ?? Number.MAX_SAFE_INTEGER, fstatSync(fd).size);
    const from = Math.max(0, size - MAX_TAIL_BYTES);
    const buf = Buffer.allocUnsafe(size - from);
    let read = 0;
    while (read < buf.length) {
      const r = readSync(fd, buf, read, buf.length - read, from + read);
      if (r === 0) break;
      read += r;
    }
    const lines: string[] = [];
    let text = buf.toString('utf8', 0, read);
    if (from > 0) text = text.slice(text.indexOf('\n') + 1); // drop a partial first line
    const rest = splitLines('', text, lines);
    if (rest) lines.push(rest);
    return { lines: lines.slice(-n), fromStart: from === 0 && lines.length <= n };
  } finally {
    closeSync(fd);
  }
}

/**
 * The last `n` lines of what is kept of an instance's output: the live file's first `end` bytes,
 * then its rotated copies (log-file.ts) as far as needed. When that reaches back past what is
 * kept and output was dropped, the first line is droppedLine() (unless `marker` is false).
 */
export function readKeptLines(path: string, n: number, cap: LogCap | undefined, end?: number, marker = true): string[] {
  let { lines, fromStart } = readTail(path, n, end);
  for (let i = 1; cap && i < cap.files && fromStart && lines.length < n; i++) {
    const older = readTail(rotatedPath(path, i), n - lines.length);
    lines = [...older.lines, ...lines];
    fromStart = older.fromStart;
  }
  if (marker && fromStart && lines.length < n) {
    const dropped = droppedBytes(path);
    if (dropped > 0) lines.unshift(droppedLine(dropped));
  }
  return lines;
}

/** The offset just after the file's last newline (0 when missing): an unterminated last line is read later, whole. */
function completeLinesEnd(path: string): number {
  let fd: number;
  try {
    fd = openSync(path, 'r');
  } catch {
    return 0;
  }
  try {
    const size = fstatSync(fd).size;
    const chunk = Buffer.allocUnsafe(64 * 1024);
    for (let end = size; end > 0; ) {
      const from = Math.max(0, end - chunk.length);
      const n = readSync(fd, chunk, 0, end - from, from);
      const nl = chunk.subarray(0, n).lastIndexOf(10);
      if (nl >= 0) return from + nl + 1;
      if (size - from > MAX_LINE * 4) return size; // a giant unterminated line: skip it
      end = from;
    }
    return 0;
  } finally {
    closeSync(fd);
  }
}

export interface LogFollower {
  onLines(lines: string[]): void;
  onEnd(): void;
}

/** Tails one log file while its instance lives. */
export class LogWatcher {
  private readonly ring: RingBuffer;
  private readonly followers = new Set<LogFollower>();
  private offset: number;
  private pending = '';
  private readonly decoder = new StringDecoder('utf8');
  private timer: NodeJS.Timeout | undefined;
  /** An extra poll soon after one that found a flood (keeps the file near its cap between polls). */
  private soon: NodeJS.Timeout | undefined;
  private readonly buf = Buffer.allocUnsafe(64 * 1024);

  /**
   * Starts at the current end of the file, after loading its last `ringSize` lines into the ring.
   * `cap`: the file is rotated past it (undefined: never).
   */
  constructor(
    readonly path: string,
    private readonly cap: LogCap | undefined = undefined,
    ringSize = 1000,
    pollMs = 200,
  ) {
    this.ring = new RingBuffer(ringSize);
    const end = completeLinesEnd(path);
    this.offset = end;
    for (const line of readKeptLines(path, ringSize, cap, end, false)) this.ring.push(line);
    this.timer = setInterval(() => this.poll(), pollMs);
    this.timer.unref();
  }

  /**
   * Reads whatever was appended since the last poll and delivers it. A file at its cap is rotated
   * first (from its size, before reading: a flood faster than this reader must not grow the file
   * while it reads), and what was unread is read from the copy, its last `fileBytes` at most.
   */
  poll(): void {
    let fd: number;
    try {
      fd = openSync(this.path, 'r');
    } catch {
      return;
    }
    const lines: string[] = [];
    const from = this.offset;
    let size: number;
    try {
      size = fstatSync(fd).size;
      // Truncated by someone else (or rotated by an earlier agent): read it from its start.
      if (size < this.offset) this.offset = 0;
      if (!this.cap || size < this.cap.fileBytes) this.readFrom(fd, lines, size);
    } finally {
      closeSync(fd);
    }
    let read = this.offset - Math.min(from, this.offset);
    if (this.cap && size >= this.cap.fileBytes) read = this.rotate(lines);
    if (lines.length) this.deliver(lines);
    // A flood (an eighth of the cap since the last poll): look again in 10 ms rather than at the
    // next tick, so the file overshoots its cap by about 10 ms of output, not a whole interval's.
    if (this.cap && this.timer && !this.soon && read >= this.cap.fileBytes / 8) {
      this.soon = setTimeout(() => {
        this.soon = undefined;
        this.poll();
      }, 10);
      this.soon.unref();
    }
  }

  /** Reads `fd` from the offset up to `until`, into `lines`; `base`: the offset the file's first byte stands for (a rotated copy's). */
  private readFrom(fd: number, lines: string[], until: number, base = 0): void {
    while (this.offset < until) {
      const r = readSync(fd, this.buf, 0, Math.min(this.buf.length, until - this.offset), this.offset - base);
      if (r <= 0) break;
      this.offset += r;
      this.pending = splitLines(this.pending, this.decoder.write(this.buf.subarray(0, r)), lines);
    }
  }

  /**
   * Rotates the file (log-file.ts) and reads what was unread from the copy: its last `fileBytes`
   * at most (followers then get a line saying how much they missed; the bytes stay on disk).
   * Returns the bytes spanned.
   */
  private rotate(lines: string[]): number {
    let kept: Rotated;
    try {
      kept = rotate(this.path, this.cap!);
    } catch {
      return 0; // the disk refused (full, gone): the next poll tries again
    }
    const { size: copied, base } = kept;
    const unread = copied - this.offset;
    if (unread > 0) {
      if (this.offset < base) {
        // The copy keeps the file's last fileBytes only: what was unread before them is gone.
        lines.push(`[output skipped here: ${base - this.offset} bytes, written faster than the agent reads]`);
        this.offset = base;
        this.pending = '';
        this.decoder.end();
      }
      try {
        const fd = openSync(rotatedPath(this.path, 1), 'r');
        try {
          this.readFrom(fd, lines, copied, base);
        } finally {
          closeSync(fd);
        }
      } catch {
        // the copy is gone already: those lines are dropped with it
      }
    }
    this.offset = 0;
    return Math.max(0, unread);
  }

  private deliver(lines: string[]): void {
    for (const l of lines) this.ring.push(l);
    for (const f of this.followers) f.onLines(lines);
  }

  /**
   * The last `n` complete lines so far and a subscription to the lines after them, taken
   * atomically (no line lost or repeated between the two). Beyond the ring, the history comes from
   * the file. `onEnd` runs when the watcher closes (the instance ended).
   */
  tailAndFollow(n: number, follower?: LogFollower): { lines: string[]; unsubscribe: () => void } {
    this.poll();
    const lines =
      n <= 0 ? [] : n <= this.ring.length ? this.ring.last(n) : readKeptLines(this.path, n, this.cap, this.offset - Buffer.byteLength(this.pending));
    if (!follower) return { lines, unsubscribe: () => {} };
    this.followers.add(follower);
    return { lines, unsubscribe: () => this.followers.delete(follower) };
  }

  /** The most recent lines (for failure details). */
  recent(n: number): string[] {
    this.poll();
    const lines = this.ring.last(n);
    if (this.pending) lines.push(this.pending);
    return lines.slice(-n);
  }

  /** Final read, flush of an unterminated last line, and the end of every follower. */
  close(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.soon) clearTimeout(this.soon);
    this.soon = undefined;
    this.poll();
    if (this.pending) {
      const last = this.pending;
      this.pending = '';
      this.deliver([last]);
    }
    const followers = [...this.followers];
    this.followers.clear();
    for (const f of followers) f.onEnd();
  }
}
