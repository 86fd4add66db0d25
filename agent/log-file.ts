// The bytes an instance's output may keep on the agent's disk (issue 44: a start command printing
// 28 MB/s filled the disk that holds platform.db, 1.7 GB a minute). The log file is capped by
// rotation: once `instance.log` reaches `fileBytes`, its last `fileBytes` are copied to
// `instance.log.1` (older copies shift to `.2` ... and the oldest beyond `files - 1` is deleted),
// then it is truncated in place.
//
// Why copy-and-truncate rather than rename: in the process runtime the instance writes into the
// file itself (its stdout is the file, opened O_APPEND, so it keeps running when the agent dies);
// after a rename it would go on writing into the renamed file. Truncating a file opened O_APPEND
// is safe: the next write lands at the new end. The docker runtime's copy (a write stream, also
// O_APPEND) behaves the same. Bytes written between the copy and the truncation (microseconds)
// are lost; the reader delivers everything up to the copy.
//
// The bytes deleted so far are kept in `instance.log.dropped` (a number), so a tail that reaches
// past what is kept starts with DROPPED_LINE, across agent restarts too.
import {
  closeSync,
  existsSync,
  fstatSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from 'node:fs';

export interface LogCap {
  /** Bytes of one file before it rotates (RC_AGENT_LOG_FILE_BYTES). */
  fileBytes: number;
  /** Files kept, the live one included (RC_AGENT_LOG_FILES): at most `files * fileBytes` on disk, plus one poll's output. */
  files: number;
}

/** The engine's own json-file cap is 2 x 20 MB: the same by default. */
export const DEFAULT_LOG_CAP: LogCap = { fileBytes: 20 * 1024 * 1024, files: 2 };

/** The line a tail starts with when older output is gone. */
export function droppedLine(bytes: number): string {
  return `[older output dropped: ${bytes} bytes]`;
}

/** The i-th older copy of `path` (`path` itself for 0). */
export function rotatedPath(path: string, i: number): string {
  return i === 0 ? path : `${path}.${i}`;
}

const droppedPath = (path: string): string => `${path}.dropped`;

/** Bytes of output deleted by rotation so far (0 when none). */
export function droppedBytes(path: string): number {
  try {
    const n = Number(readFileSync(droppedPath(path), 'utf8').trim());
    return Number.isSafeInteger(n) && n > 0 ? n : 0;
  } catch {
    return 0;
  }
}

function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** What a rotation kept of the live file: its size when copied, and where in it `.1` starts. */
export interface Rotated {
  /** Bytes the live file had when it was copied (0 with `files` 1: nothing kept). */
  size: number;
  /** The offset in the live file where `.1` begins: its head before that, beyond one file's cap, was dropped. */
  base: number;
}

/**
 * Rotates `path` now: older copies shift, the oldest beyond the cap is deleted (its bytes counted
 * as dropped), the live file's last `fileBytes` (from a line start) are copied to `.1`, the rest
 * counted as dropped (or, with `files` 1, all of it), and it is truncated. So what is kept never
 * exceeds `files` x `fileBytes` plus what the live file took since the last poll, however late
 * that poll came (a flood written before the agent looked at all included).
 */
export function rotate(path: string, cap: LogCap): Rotated {
  let dropped = 0;
  const oldest = cap.files - 1;
  let kept: Rotated = { size: 0, base: 0 };
  if (oldest < 1) {
    dropped += sizeOf(path);
  } else {
    const last = rotatedPath(path, oldest);
    if (existsSync(last)) {
      dropped += sizeOf(last);
      rmSync(last, { force: true });
    }
    for (let i = oldest - 1; i >= 1; i--) {
      const from = rotatedPath(path, i);
      if (existsSync(from)) renameSync(from, rotatedPath(path, i + 1));
    }
    kept = copyTail(path, rotatedPath(path, 1), cap.fileBytes);
    dropped += kept.base;
  }
  truncateSync(path, 0);
  if (dropped > 0) writeFileSync(droppedPath(path), String(droppedBytes(path) + dropped));
  return kept;
}

/** How far past the cut a line start is looked for (a longer first line is kept from the cut). */
const LINE_START_WINDOW = 64 * 1024;

/** Copies the last `maxBytes` of `from` (from the first line start after the cut) to `to`. */
function copyTail(from: string, to: string, maxBytes: number): Rotated {
  const src = openSync(from, 'r');
  try {
    const size = fstatSync(src).size;
    let base = Math.max(0, size - maxBytes);
    const buf = Buffer.allocUnsafe(Math.min(1024 * 1024, Math.max(LINE_START_WINDOW, 1)));
    if (base > 0) {
      // From the byte before the cut: a newline there means the cut is a line start already.
      const n = readSync(src, buf, 0, Math.min(LINE_START_WINDOW, size - base + 1), base - 1);
      const nl = buf.subarray(0, n).indexOf(0x0a);
      if (nl >= 0) base += nl;
    }
    const dst = openSync(to, 'w');
    try {
      for (let at = base; at < size; ) {
        const n = readSync(src, buf, 0, Math.min(buf.length, size - at), at);
        if (n <= 0) break;
        writeSync(dst, buf, 0, n);
        at += n;
      }
    } finally {
      closeSync(dst);
    }
    return { size, base };
  } finally {
    closeSync(src);
  }
}
