// The chat completions body transform: passthrough with usage scanning. One backend response
// goes to one client as bytes through the response writer (lib/relay/response-writer.ts: cork
// batching, backpressure, abort, finish once, hop-by-hop filtering).
//
// - A non-stream body that arrives whole is written in one corked end with its Content-Length.
// - Streams are cut at SSE event boundaries (a partial event waits for its end, usually there is
//   none) so the usage event can be found and, when the gateway asked for it on the client's
//   behalf, left out: the client sees exactly the events it asked for.
// - The request's finish(status, usage) (gate settle, admission slot, metrics) runs exactly once.
// - An error status (4xx, 5xx) is the one body not relayed as bytes: it is read whole (up to
//   MAX_ERROR_BODY_BYTES) and answered in the chat shape `{error: {message, type, param, code}}`
//   with the backend's status, headers and message (backend-error.ts), since vLLM writes its own
//   flat shape, which OpenAI clients cannot read.
import { indexOf, lastIndexOf, subarray } from '../../lib/bytes.js';
import type { Res } from '../../lib/http.js';
import { chatBackendErrorBody, MAX_ERROR_BODY_BYTES } from '../backends/backend-error.js';
import { CHAT_CODES, ERRORS } from '../errors.js';
import type { GateUsage } from '../gates/gate.js';
import { CLIENT_CLOSED } from '../metrics.js';
import type { HeaderLines } from '../../lib/relay/http-pool.js';
import { headerNameIs, type HeaderName, ResponseWriter, type WriterHooks } from '../../lib/relay/response-writer.js';
import type { UpstreamCall, UpstreamError, UpstreamHandler } from '../backends/upstreams.js';
import type { ModelRequest } from '../request/lifecycle.js';
import type { ChatError } from './protocol.js';
import { indexOfUsage, lastIndexOfUsage, relayedUsage, reservedUsage, usageAt, ZERO_USAGE } from '../usage.js';

const LF2 = Buffer.from('\n\n');
const CRLF2 = Buffer.from('\r\n\r\n');
const CHOICES_KEY = Buffer.from('"choices":[');
const CONTENT_TYPE = Buffer.from('content-type');
const JSON_TYPE = 'application/json';

export class ChatRelay implements UpstreamHandler, WriterHooks<GateUsage> {
  call: UpstreamCall | undefined;
  private readonly out: ResponseWriter<GateUsage>;
  private status = 0;
  private contentLength = -1;
  /** A whole non-stream body waiting for onEnd, to be written with its length in one go. */
  private held: Buffer | undefined;
  /** The unfinished SSE event at the end of the last chunk. */
  private carry: Buffer | undefined;
  private usage: GateUsage | undefined;
  /** SSE events relayed so far: the output charged when the backend's own count never arrives. */
  private events = 0;
  private sse = false;
  /** An error status: its body, collected to be answered in the chat shape. */
  private errorParts: Buffer[] | undefined;
  private errorSize = 0;

  /**
   * `stream`: the client asked for a stream; `stripUsage`: the gateway added
   * stream_options.include_usage, so the usage-only event is dropped; `headers`: the gate's
   * (x-ratelimit-*), added to the response. The request (`r`) gives the input estimate and the
   * reservation charged when no usage arrives, and ends through its `finish`.
   */
  constructor(
    private readonly r: ModelRequest<ChatError>,
    private readonly stream: boolean,
    private readonly stripUsage: boolean,
    private readonly headers: Record<string, string>,
  ) {
    this.out = new ResponseWriter(r.res, this, { metrics: r.ctx.metrics });
  }

  // WriterHooks

  onAbort(): void {
    this.call?.abort();
    this.out.finish(CLIENT_CLOSED, this.usage ?? this.abandonedUsage());
  }

  onDrain(): void {
    this.call?.resume();
  }

  /** Called once by the writer: the request ends (gate, admission slot, metrics: request/lifecycle.ts). */
  onFinish(status: number, usage: GateUsage | undefined): void {
    this.r.finish(status, usage);
  }

  // UpstreamHandler

  onHead(status: number, headers: HeaderLines): void {
    this.status = status;
    this.sse = this.stream && status === 200;
    if (status >= 400) {
      this.errorParts = [];
      this.out.head(status, jsonTyped(headers.endToEnd()), this.headers);
      return;
    }
    if (!this.sse) this.contentLength = headers.contentLength;
    this.out.head(status, headers.endToEnd(), this.headers);
  }

  onData(chunk: Buffer): boolean {
    const out = this.out;
    if (out.isClosed) return true;
    if (this.errorParts) {
      if (this.errorSize < MAX_ERROR_BODY_BYTES) {
        this.errorParts.push(chunk);
        this.errorSize += chunk.length;
      }
      return true;
    }
    if (this.sse) this.sseData(chunk);
    else {
      if (this.status === 200) {
        // Usage sits near the end of a completion: a backward search finds it at once.
        const p = lastIndexOfUsage(chunk);
        if (p >= 0) this.usage = usageAt(chunk, p) ?? this.usage;
      }
      if (!out.started && this.held === undefined && chunk.length === this.contentLength) {
        this.held = chunk;
        return true;
      }
      out.write(chunk);
    }
    return out.isFull ? out.pauseSource() : true;
  }

  onEnd(): void {
    const out = this.out;
    if (this.errorParts) {
      out.end(chatBackendErrorBody(this.status, Buffer.concat(this.errorParts)));
      out.finish(this.status, ZERO_USAGE);
      return;
    }
    if (this.carry) out.write(this.carry);
    out.end(this.held);
    out.finish(this.status, this.status === 200 ? this.usage : ZERO_USAGE);
  }

  onError(err: UpstreamError): void {
    const out = this.out;
    if (err.kind === 'aborted' || this.res.aborted) {
      out.finish(CLIENT_CLOSED, this.usage ?? this.abandonedUsage());
      return;
    }
    if (!out.started) {
      // Nothing reached the client yet: a clean 502 in the chat shape.
      const e = err.kind === 'timeout' || err.kind === 'idle' ? ERRORS.upstreamTimeout : ERRORS.unavailable;
      out.reply(e.status, e.body);
      out.finish(e.status, this.usage ?? (err.headSeen ? undefined : ZERO_USAGE));
      return;
    }
    if (this.sse) {
      // The stream had started: end it with an error event the client libraries raise.
      const code = err.kind === 'idle' ? CHAT_CODES.upstreamTimeout : CHAT_CODES.upstreamError;
      const event = `data: {"error":{"message":"Model backend stream failed: ${err.kind === 'idle' ? 'no data within the idle timeout' : 'connection lost'}","type":"api_error","param":null,"code":"${code}"}}\n\n`;
      this.carry = undefined; // an unfinished event is not relayed
      out.end(event);
      out.finish(this.status, this.usage ?? this.relayedUsage());
      return;
    }
    // A truncated non-stream body: cut the connection so the client cannot take it as whole.
    out.cut();
    out.finish(this.status, this.usage);
  }

  private get res(): Res {
    return this.out.res;
  }

  /**
   * What a stream that ended without the backend's usage is charged: the input estimate plus one
   * output token per relayed event (a backend streams one event per decoding step; the role event
   * makes it a slight over-count). What was generated reached the client as it came.
   */
  private relayedUsage(): GateUsage {
    return relayedUsage(this.r.inputTokens, this.events);
  }

  /**
   * What a request the client abandoned is charged: a stream what was relayed; a non-stream
   * request its whole reservation (its body comes at the end, so nothing relayed tells how much
   * the backend had generated when the abort reached it).
   */
  private abandonedUsage(): GateUsage {
    if (this.stream) return this.relayedUsage();
    return reservedUsage(this.r.inputTokens, this.r.reservedTokens);
  }

  private sseData(input: Buffer): void {
    let chunk = input;
    if (this.carry) {
      chunk = Buffer.concat([this.carry, chunk]);
      this.carry = undefined;
    }
    const n = chunk.length;
    const whole = n >= 2 && chunk[n - 1] === 0x0a && (chunk[n - 2] === 0x0a || (n >= 4 && chunk[n - 2] === 0x0d && chunk[n - 3] === 0x0a));
    if (!whole) {
      const cut = Math.max(lastIndexOf(chunk, LF2) + 2, lastIndexOf(chunk, CRLF2) + 4);
      if (cut <= 3) {
        this.carry = Buffer.from(chunk); // copy: an unfinished event waits for the rest
        return;
      }
      this.carry = Buffer.from(subarray(chunk, cut));
      chunk = subarray(chunk, 0, cut);
    }
    const out = this.out;
    let p = indexOfUsage(chunk);
    let from = 0;
    // The events that carry usage (normally only the last one before [DONE]).
    while (p >= 0) {
      const end = eventEnd(chunk, p);
      const u = usageAt(chunk, p, end);
      if (u) this.usage = u;
      if (this.stripUsage) {
        const start = Math.max(from, lastIndexOf(chunk, 0x0a, p) + 1); // the start of the line that has the usage
        if (isUsageOnly(chunk, start, end)) {
          if (start > from) out.write(subarray(chunk, from, start));
          from = end;
        }
      }
      p = indexOfUsage(chunk, end);
    }
    // The relayed events are counted only while the backend's own usage has not come: once it
    // has, they are never charged (a stream asked for usage has it in its last read, so a stream
    // that arrives in one read is not counted at all).
    if (this.usage === undefined) this.events += countEventEnds(chunk);
    if (from === 0) out.write(chunk);
    else if (from < chunk.length) out.write(subarray(chunk, from));
  }
}

/** A backend's end-to-end headers with its content type replaced by JSON's (an error rewritten in the chat shape). */
function jsonTyped(raw: Buffer[]): HeaderName[] {
  const out: HeaderName[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2) if (!headerNameIs(raw[i]!, CONTENT_TYPE)) out.push(raw[i]!, raw[i + 1]!);
  out.push('content-type', JSON_TYPE);
  return out;
}

/**
 * The index just past the blank line that ends the event holding `p` (`\n\n` or `\n\r\n`), or
 * the chunk's length. One-byte searches: Buffer#indexOf of a number is V8's fast API call.
 */
function eventEnd(chunk: Buffer, p: number): number {
  const n = chunk.length;
  let i = indexOf(chunk, 0x0a, p);
  while (i >= 0) {
    if (chunk[i + 1] === 0x0a) return i + 2;
    if (chunk[i + 1] === 0x0d && chunk[i + 2] === 0x0a) return i + 3;
    i = indexOf(chunk, 0x0a, i + 1);
  }
  return n;
}

/**
 * The number of `\n\n` (ends of events) in `chunk`. It searches for the one byte LF: V8 calls
 * Buffer#indexOf of a number through its fast API, about a tenth of the cost of a call with a
 * Buffer needle, and this runs for every event of every stream.
 */
export function countEventEnds(chunk: Buffer): number {
  let n = 0;
  const last = chunk.length - 1;
  let i = indexOf(chunk, 0x0a);
  while (i >= 0 && i < last) {
    if (chunk[i + 1] === 0x0a) {
      n++;
      i = indexOf(chunk, 0x0a, i + 2);
    } else i = indexOf(chunk, 0x0a, i + 1);
  }
  return n;
}

/** `"choices":`, the 10 bytes before the `[` of a chunk's list of choices. */
const CHOICES_NAME = CHOICES_KEY.subarray(0, CHOICES_KEY.length - 1);

/**
 * The event in chunk[start, end) is a usage-only one: its `choices` list is empty. The list's `[`
 * is found with a one-byte search for the event's first `[` (before it come only the id, object,
 * created and model), checked to follow `"choices":`; a search for the whole key (a Buffer needle
 * starting with `"`, several times slower) is left for events where it does not.
 */
function isUsageOnly(chunk: Buffer, start: number, end: number): boolean {
  let open = indexOf(chunk, 0x5b, start);
  if (open < 0 || open >= end) return false;
  if (!follows(chunk, open, CHOICES_NAME)) {
    const c = indexOf(chunk, CHOICES_KEY, start);
    if (c < 0 || c >= end) return false;
    open = c + CHOICES_NAME.length;
  }
  return open + 1 < end && chunk[open + 1] === 0x5d; // ']'
}

/** chunk[at - name.length, at) equals `name`. */
function follows(chunk: Buffer, at: number, name: Buffer): boolean {
  const from = at - name.length;
  if (from < 0) return false;
  for (let i = 0; i < name.length; i++) if (chunk[from + i] !== name[i]) return false;
  return true;
}
