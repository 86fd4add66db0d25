// The one writer of relayed responses to a uWS client: every route that relays a backend's
// response (chat completions, messages streams) writes through it. What it does, once for all:
//
// - Cork batching: chunks written during one backend read (the pool hands them over one by
//   one, synchronously) are queued, and a microtask, which runs as soon as that read has been
//   handled, writes them in one res.cork, so one socket send. Nothing waits for more data: the
//   queue never outlives the read that filled it.
// - The head is written with the first flush: the backend's status and headers minus the
//   hop-by-hop ones (uWS writes its own framing, Date and mark), minus what the route's header
//   filter drops, plus the route's own headers (the gate's x-ratelimit-*).
// - Backpressure: when uWS buffers a write (the client reads slowly), write() returns false and
//   the source pauses (pauseSource()); onWritable resumes it through `onDrain`.
// - Abort: a client that goes away calls `onAbort` (the source then cancels the backend request).
// - Finish once: `finish(status, usage)` reaches `onFinish` exactly once, however the response ended.
import type { Res } from '../http.js';
import { headerName, sendJson, statusLine } from '../http.js';
import { write } from '../bytes.js';
import { asciiLowerEquals, HOP_BY_HOP_BYTES, mayBeHopByHop } from './http-parser.js';

/** A response header name, as the backend client hands it over. */
export type HeaderName = Buffer | string;

/** A route's own response header rule: true drops the header (checked after the hop-by-hop list). */
export type HeaderFilter = (name: HeaderName, value: HeaderName) => boolean;

const CONTENT_LENGTH = Buffer.from('content-length');

/** ASCII case-insensitive equality of a header name with a lower-case name (no string is made for a Buffer). */
export function headerNameIs(name: HeaderName, lower: Buffer): boolean {
  const n = lower.length;
  if (name.length !== n) return false;
  if (typeof name === 'string') {
    // `| 0x20` lower-cases letters; the other bytes of header names ('-') are unchanged by it.
    for (let i = 0; i < n; i++) if ((name.charCodeAt(i) | 0x20) !== lower[i]) return false;
    return true;
  }
  return asciiLowerEquals(name, lower);
}

/** True for a response header that is never relayed. */
export function isHopByHop(name: HeaderName): boolean {
  if (!mayBeHopByHop(name.length)) return false;
  for (let i = 0; i < HOP_BY_HOP_BYTES.length; i++) if (headerNameIs(name, HOP_BY_HOP_BYTES[i]!)) return true;
  return false;
}

/** The Content-Length value in a flat name/value list, or -1. */
export function contentLengthOf(raw: readonly HeaderName[]): number {
  for (let i = 0; i + 1 < raw.length; i += 2) {
    if (headerNameIs(raw[i]!, CONTENT_LENGTH)) return Number(raw[i + 1]!.toString());
  }
  return -1;
}

/** Status recorded when the client went away before its response ended (nginx's convention). */
export const CLIENT_CLOSED = 499;

/**
 * What a response's source learned of it, handed to onFinish untouched (the gateway's token usage;
 * nothing for a dedicated endpoint or a tunnel): the writer never reads it.
 */
export interface WriterHooks<U = unknown> {
  /** The client went away (the source cancels its backend request, then calls finish). */
  onAbort(): void;
  /** The source paused with pauseSource() may flow again. */
  onDrain(): void;
  /** Called exactly once, by the first finish(). */
  onFinish(status: number, usage: U | undefined): void;
}

const NO_HEADERS: readonly HeaderName[] = [];

export interface WriterOptions {
  /** The route's own response header rule (for example: no Set-Cookie from an instance). */
  dropHeader?: HeaderFilter | undefined;
  /** Counts the times the client could not take more (gateway metrics). */
  metrics?: { backpressurePauses: number } | undefined;
}

// res.cork takes a callback; these module-level ones read the writer from `corking` (set just
// around the synchronous cork call) so that no closure is made per write.
let corking: ResponseWriter<unknown> | undefined;
let closing: Buffer | string | undefined;
function corkedFlush(): void {
  corking!.writeQueued();
}
function corkedEnd(): void {
  corking!.writeEnd(closing);
}

export class ResponseWriter<U = unknown> {
  private status = 0;
  private raw: readonly HeaderName[] = NO_HEADERS;
  private extra: Record<string, string> | undefined;
  private headSet = false;
  private headWritten = false;
  /** Chunks accepted and not yet written. */
  private readonly queue: (Buffer | string)[] = [];
  /** Length of the queued chunks. */
  private queuedBytes = 0;
  /**
   * Bytes handed to uWS that it may still hold (an upper bound): a write that uWS takes whole
   * proves its own buffer empty, but inside a cork it may still keep that flush's bytes, so the
   * count restarts at the last flush; after a refused write every later one adds up.
   */
  private unsentBytes = 0;
  private flushScheduled = false;
  /** uWS buffered our last write: the client is not reading fast enough. */
  private full = false;
  /** The response was ended, cut or abandoned: nothing more is written. */
  private closed = false;
  private finished = false;
  /** The source paused (pauseSource) until the client drains. */
  private sourcePaused = false;
  // Made on first use: a whole non-stream body needs neither.
  private flushTask: (() => void) | undefined;
  private writableTask: (() => boolean) | undefined;

  constructor(
    readonly res: Res,
    private readonly hooks: WriterHooks<U>,
    private readonly options: WriterOptions = {},
  ) {
    res.onAbort = () => {
      this.closed = true;
      this.queue.length = 0;
      hooks.onAbort();
    };
  }

  /** The client is gone or the response is over. */
  get isClosed(): boolean {
    return this.closed || this.res.aborted;
  }

  /** The head has been written, or will be with what is queued. */
  get started(): boolean {
    return this.headWritten || this.queue.length > 0;
  }

  /** The client cannot take more now (the source should stay paused). */
  get isFull(): boolean {
    return this.full;
  }

  /** Body bytes accepted and not yet known to have left the process (queued, or possibly in uWS's buffer): an upper bound. */
  get heldBytes(): number {
    return this.closed ? 0 : this.queuedBytes + this.unsentBytes;
  }

  /** Sets the response head, written with the first flush: status, relayed headers (flat name/value list), the route's headers. */
  head(status: number, raw: readonly HeaderName[], extra?: Record<string, string>): void {
    this.status = status;
    this.raw = raw;
    this.extra = extra;
    this.headSet = true;
  }

  /** Queues a chunk for the client. False when the client is full: pause the source until onDrain. */
  write(chunk: Buffer | string): boolean {
    if (this.closed) return true;
    this.queue.push(chunk);
    this.queuedBytes += chunk.length;
    if (!this.flushScheduled && !this.full) {
      this.flushScheduled = true;
      queueMicrotask(
        (this.flushTask ??= () => {
          this.flushScheduled = false;
          this.flush();
        }),
      );
    }
    return !this.full;
  }

  /** The source stops (its onData returns this false) until hooks.onDrain. Call after write() returned false. */
  pauseSource(): false {
    this.sourcePaused = true;
    return false;
  }

  /** Writes the head (if set and not yet written) and what is queued now, without waiting for the microtask. */
  flush(): void {
    if (this.isClosed || (this.queue.length === 0 && (this.headWritten || !this.headSet))) return;
    corking = this;
    this.res.cork(corkedFlush);
    corking = undefined;
  }

  /**
   * Ends the response: the head if still due, what is queued, then `last`. A Buffer `last` with
   * nothing written before goes out with its Content-Length (uWS sets it on end).
   */
  end(last?: Buffer | string): void {
    if (this.isClosed) {
      this.closed = true;
      return;
    }
    this.closed = true;
    corking = this;
    closing = last;
    this.res.cork(corkedEnd);
    corking = undefined;
    closing = undefined;
  }

  /** Ends a response that has no body (HEAD, 204, 304); `reportedLength`: the Content-Length a HEAD answer reports. */
  endWithoutBody(reportedLength?: number): void {
    if (this.isClosed) {
      this.closed = true;
      return;
    }
    this.closed = true;
    const res = this.res;
    res.cork(() => {
      this.writeQueued();
      res.endWithoutBody(reportedLength);
    });
  }

  /** Answers a whole response of its own (nothing relayed was written): status, JSON body, headers. */
  reply(status: number, body: string, headers?: Record<string, string>): void {
    if (this.isClosed) return;
    this.closed = true;
    this.queue.length = 0;
    sendJson(this.res, status, body, headers);
  }

  /**
   * Closes the connection without ending the response: a truncated body is never taken as whole.
   * uWS reports our own close as an abort; that is not the client going away, so the abort hook is
   * detached first and the caller's finish() records the response's real status, not 499.
   */
  cut(): void {
    if (this.isClosed) return;
    this.closed = true;
    this.queue.length = 0;
    this.res.onAbort = undefined;
    this.res.close();
  }

  /** Ends the exchange's bookkeeping exactly once. */
  finish(status: number, usage: U | undefined): void {
    if (this.finished) return;
    this.finished = true;
    this.closed = true;
    this.queue.length = 0;
    this.res.onAbort = undefined;
    this.hooks.onFinish(status, usage);
  }

  /** Inside res.cork: the head (first time), then every queued chunk. */
  writeQueued(): void {
    if (!this.headWritten && this.headSet) this.writeHead();
    const q = this.queue;
    if (q.length === 0) return;
    const res = this.res;
    let ok = true;
    for (let i = 0; i < q.length; i++) ok = res.write(q[i]!) && ok;
    q.length = 0;
    this.unsentBytes = ok ? this.queuedBytes : this.unsentBytes + this.queuedBytes;
    this.queuedBytes = 0;
    if (ok || this.full) return;
    this.full = true;
    const m = this.options.metrics;
    if (m) m.backpressurePauses++;
    res.onWritable((this.writableTask ??= () => this.onWritable()));
  }

  /** Inside res.cork: whatever is queued, then the end of the response. */
  writeEnd(last: Buffer | string | undefined): void {
    this.writeQueued();
    if (last !== undefined) this.res.end(last);
    else this.res.end();
  }

  private onWritable(): boolean {
    this.full = false;
    if (this.closed) return true;
    if (this.queue.length > 0) this.writeQueued(); // may find the client full again
    if (!this.full && this.sourcePaused) {
      this.sourcePaused = false;
      this.hooks.onDrain();
    }
    return true;
  }

  private writeHead(): void {
    const res = this.res;
    this.headWritten = true;
    // uWS writes `200 OK` itself with the first header or the end: one call less on most responses.
    if (this.status !== 200) res.writeStatus(statusLine(this.status));
    const raw = this.raw;
    const drop = this.options.dropHeader;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!;
      const value = raw[i + 1]!;
      if (!isHopByHop(name) && (drop === undefined || !drop(name, value))) res.writeHeader(name, value);
    }
    const extra = this.extra;
    if (extra) writeOwnHeaders(res, extra);
  }
}

/**
 * The route's own headers (the gate's `x-ratelimit-*`) written as one header line in one uWS
 * call: uWS writes `name: value\r\n` as given, so the lines after the first ride in the first
 * one's value (the same bytes on the wire; each writeHeader costs about as much as relaying a
 * header). The value goes as bytes, since a string costs uWS a UTF-8 conversion of the whole
 * line (about 2.7k instructions a request), and the bytes are a scratch buffer of the line's
 * length, reused: uWS copies them before writeHeader returns, and Buffer.from would allocate and
 * wrap new ones (some 1.8k instructions more a request). Call inside the response's cork. The
 * names and values are made by our code (numbers and durations), never with a CR or LF.
 */
function writeOwnHeaders(res: Res, headers: Record<string, string>): void {
  let first: string | undefined;
  let lines = '';
  for (const k in headers) {
    if (first === undefined) {
      first = k;
      lines = headers[k]!;
    } else lines += `\r\n${k}: ${headers[k]!}`;
  }
  if (first === undefined) return;
  const n = lines.length;
  if (n > MAX_SCRATCH) {
    res.writeHeader(headerName(first), Buffer.from(lines, 'latin1'));
    return;
  }
  let bytes = scratch[n];
  if (bytes === undefined) bytes = scratch[n] = Buffer.allocUnsafeSlow(n);
  write(bytes, lines, 0, n, 'latin1');
  res.writeHeader(headerName(first), bytes);
}

/** writeOwnHeaders' buffers by length (a line's length varies with its numbers: a few of them are ever made). */
const scratch: (Buffer | undefined)[] = [];
const MAX_SCRATCH = 1024;
