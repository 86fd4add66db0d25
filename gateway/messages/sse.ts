// An incremental parser of the server-sent events a chat-completions backend streams. It takes
// byte chunks split anywhere (even inside a UTF-8 character) and calls `onData` with each
// event's data (several `data:` lines joined by "\n"). Lines end with "\n" or "\r\n"; other
// fields (event, id, retry) and comments are ignored, since backends put everything in data.
//
// A read that is all ASCII (English text streams, and any backend that escapes the rest) is read
// as one latin1 string: its lines are found with String#indexOf and cut out as slices of it,
// which V8 makes without copying. Any other read is split into lines as bytes and each data line
// decoded as UTF-8 on its own (so a character cut by the read's end waits for the next read).
// The two give the same events: in ASCII, latin1 and UTF-8 decode alike.
//
// With `onChunk`, an all-ASCII read's events that are plain chunks (chunk-parse.ts) are matched in
// place, as whole events (several in a row by one sticky regex), and handed over read: no line is searched or
// cut out for them. A single-line event there that is not one reaches onData with `notPlain`.
import { isAscii } from 'node:buffer';
import { decode, indexOf, subarray } from '../../lib/bytes.js';
import { type ChunkFields, textChunksAt } from './chunk-parse.js';

const LF = 10;
const CR = 13;

export class SseParser {
  private rest: Buffer | undefined;
  private data: string | undefined;

  /**
   * `onData`: an event's data (`notPlain`: it is known not to be a plain chunk); `onChunk`: a
   * plain chunk read in place (without it, every event reaches onData), `plain` when its text had
   * no escape (then, from an all-ASCII read, it needs none in JSON either).
   */
  constructor(
    private readonly onData: (data: string, notPlain: boolean) => void,
    private readonly onChunk?: (c: ChunkFields, plain: boolean) => void,
  ) {}

  push(chunk: Buffer): void {
    let buf = chunk;
    if (this.rest) {
      buf = Buffer.concat([this.rest, chunk]);
      this.rest = undefined;
    }
    const len = buf.length;
    let start = isAscii(buf) ? this.asciiLines(decode(buf, 'latin1')) : 0;
    while (start < len) {
      const nl = indexOf(buf, LF, start);
      if (nl < 0) break;
      const end = nl > start && buf[nl - 1] === CR ? nl - 1 : nl;
      this.line(buf, start, end);
      start = nl + 1;
    }
    // Keep the partial line (a copy: the caller may reuse its buffer).
    if (start < len) this.rest = Buffer.from(subarray(buf, start));
  }

  /** Takes the whole lines of `s` (one read, all ASCII); returns where the unfinished last line starts. */
  private asciiLines(s: string): number {
    let start = 0;
    const len = s.length;
    const onChunk = this.onChunk;
    while (start < len) {
      // Plain chunks' events, matched whole where they start (`d`: data), several at a time.
      let tried = false;
      if (onChunk !== undefined && this.data === undefined && s.charCodeAt(start) === 0x64) {
        const end = textChunksAt(s, start, onChunk);
        if (end >= 0) {
          start = end;
          continue;
        }
        tried = true;
      }
      const nl = s.indexOf('\n', start);
      if (nl < 0) break;
      // The usual event, one `data: ` line then the blank line: delivered at once, without
      // collecting the line as the event's data and dispatching it on the blank line.
      if (this.data === undefined && s.charCodeAt(nl + 1) === LF && s.charCodeAt(nl - 1) !== CR && s.startsWith('data: ', start)) {
        this.onData(s.slice(start + 6, nl), tried);
        start = nl + 2;
        continue;
      }
      const end = nl > start && s.charCodeAt(nl - 1) === CR ? nl - 1 : nl;
      if (start === end) this.dispatch();
      else if (end - start >= 5 && s.startsWith('data:', start)) this.addData(s.slice(s.charCodeAt(start + 5) === 0x20 ? start + 6 : start + 5, end));
      start = nl + 1;
    }
    return start;
  }

  /** The stream ended: an event not terminated by a blank line is still delivered. */
  end(): void {
    if (this.rest) {
      const rest = this.rest;
      this.rest = undefined;
      this.line(rest, 0, rest[rest.length - 1] === CR ? rest.length - 1 : rest.length);
    }
    this.dispatch();
  }

  private line(buf: Buffer, start: number, end: number): void {
    if (start === end) {
      this.dispatch();
      return;
    }
    // "data:" = 64 61 74 61 3a
    if (end - start >= 5 && buf[start] === 0x64 && buf[start + 1] === 0x61 && buf[start + 2] === 0x74 && buf[start + 3] === 0x61 && buf[start + 4] === 0x3a) {
      const from = buf[start + 5] === 0x20 ? start + 6 : start + 5;
      this.addData(decode(buf, 'utf8', from, end));
    }
  }

  /** One data line's value: an event's data lines are joined with "\n". */
  private addData(value: string): void {
    this.data = this.data === undefined ? value : `${this.data}\n${value}`;
  }

  private dispatch(): void {
    const data = this.data;
    if (data === undefined) return;
    this.data = undefined;
    this.onData(data, false);
  }
}
