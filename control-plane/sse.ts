// Server-sent events on a uWS response (text/event-stream): the platform API's live routes
// (logs, instance status) use it instead of a JSON reply. The stream sends a comment every
// HEARTBEAT_MS so that proxies keep an idle stream open and a gone client is noticed; it
// honours backpressure (`drain()` waits until uWS has flushed what it buffered).
import { statusLine, type Res } from '../lib/http.js';

export const HEARTBEAT_MS = 15_000;

export interface Sse {
  /** False once the client went away or the stream was ended. */
  readonly open: boolean;
  /**
   * Sends one event (`data` is a string, sent line by line, or a value sent as JSON). Returns
   * false when uWS had to buffer it: wait for `drain()` before sending much more.
   */
  send(event: string, data: unknown, id?: string): boolean;
  /** Resolves when the buffered bytes have been flushed (at once when nothing is buffered), or the client left. */
  drain(): Promise<void>;
  /** Ends the response. */
  end(): void;
  /** Runs `fn` once when the stream closes (client gone or end()). */
  onClose(fn: () => void): void;
}

/** One event in the wire format: every line of `data` gets its own `data:` field. */
export function formatEvent(event: string, data: unknown, id?: string): string {
  const text = typeof data === 'string' ? data : JSON.stringify(data);
  let out = id === undefined ? '' : `id: ${id}\n`;
  out += `event: ${event}\n`;
  for (const line of text.split(/\r\n|\r|\n/)) out += `data: ${line}\n`;
  return out + '\n';
}

/** Writes the event-stream head on `res` (already tracked) and returns the stream. */
export function openSse(res: Res, requestId: string | undefined, heartbeatMs = HEARTBEAT_MS): Sse {
  // The router marks a response as answered through `aborted`; an event stream keeps it until the end.
  let open = true;
  const closers: (() => void)[] = [];
  let waiting: (() => void)[] = [];
  /** uWS buffered the last write: wait for onWritable. */
  let backpressured = false;
  const close = () => {
    if (!open) return;
    open = false;
    clearInterval(beat);
    for (const w of waiting) w();
    waiting = [];
    for (const fn of closers.splice(0)) fn();
  };
  res.onAbort = close;
  res.cork(() => {
    res.writeStatus(statusLine(200));
    res.writeHeader('content-type', 'text/event-stream; charset=utf-8');
    res.writeHeader('cache-control', 'no-store');
    res.writeHeader('x-accel-buffering', 'no');
    if (requestId) res.writeHeader('x-request-id', requestId);
    res.write(': stream open\n\n');
  });
  const write = (chunk: string): boolean => {
    if (!open || res.aborted) return false;
    let ok = true;
    res.cork(() => {
      ok = res.write(chunk);
    });
    if (!ok) backpressured = true;
    return ok;
  };
  const beat = setInterval(() => write(': keep-alive\n\n'), heartbeatMs);
  beat.unref();
  res.onWritable(() => {
    backpressured = false;
    for (const w of waiting) w();
    waiting = [];
    return true;
  });
  return {
    get open() {
      return open && !res.aborted;
    },
    send: (event, data, id) => write(formatEvent(event, data, id)),
    drain() {
      if (!open || !backpressured) return Promise.resolve();
      return new Promise((r) => waiting.push(r));
    },
    end() {
      if (!open) return;
      if (!res.aborted) {
        res.aborted = true;
        res.cork(() => res.end());
      }
      close();
    },
    onClose(fn) {
      if (open) closers.push(fn);
      else fn();
    },
  };
}
