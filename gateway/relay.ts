// Relays one backend response to one uWS client response, as bytes.
//
// - Chunks are written as they arrive, but the chunks of one backend read (the pool's parser
//   hands them over one by one, synchronously) are written together: they are queued and a microtask,
//   which runs as soon as that read has been handled, writes them in one res.cork, so one
//   socket send. A fast backend's stream (role, tokens, usage, [DONE] in one read) costs one
//   send instead of one per chunk. Nothing waits for more data: the queue never outlives the
//   read that filled it.
// - When uWS cannot take more (write returns false) the next backend chunk pauses the backend
//   body (onData returns false) until onWritable; at most one more read is held meanwhile.
// - A client that goes away aborts the upstream exchange (freeing its pool connection).
// - A non-stream body that arrives whole is written in one corked write with Content-Length.
// - Streams are cut at SSE event boundaries (a partial event waits for its end, usually there is
//   none) so the usage event can be found and, when the gateway asked for it on the client's
//   behalf, left out: the client sees exactly the events it asked for.
// - settle() on the gate, the admission slot and the metrics happen exactly once, at the end.
import type { Res } from '../lib/http.js';
import { statusLine } from '../lib/http.js';
import type { GatewayContext } from './context.js';
import type { ModelState } from './catalog.js';
import { ERRORS } from './errors.js';
import type { GateDecision, GateRequest, GateUsage } from './gate.js';
import type { UpstreamCall, UpstreamError, UpstreamHandler } from './upstreams.js';
import { CLIENT_CLOSED } from './metrics.js';
import { indexOfUsage, lastIndexOfUsage, usageAt, ZERO_USAGE } from './usage.js';

const LF2 = Buffer.from('\n\n');
const CRLF2 = Buffer.from('\r\n\r\n');
const DATA = Buffer.from('data:');
const CHOICES_KEY = Buffer.from('"choices":[');

/** Response headers not copied from the backend (lower case): uWS writes its own framing, Date and mark. */
const HOP_BY_HOP = ['date', 'connection', 'keep-alive', 'content-length', 'transfer-encoding', 'uwebsockets'].map((h) => Buffer.from(h));
const CONTENT_LENGTH = HOP_BY_HOP[3]!;

/** ASCII case-insensitive equality of a header name with a lower-case name (no string is made). */
function nameIs(name: Buffer, lower: Buffer): boolean {
  const n = lower.length;
  if (name.length !== n) return false;
  // `| 0x20` lower-cases letters; the other bytes of our names ('-') are unchanged by it.
  for (let i = 0; i < n; i++) if ((name[i]! | 0x20) !== lower[i]) return false;
  return true;
}

function isHopByHop(name: Buffer): boolean {
  const n = name.length;
  if (n !== 4 && n !== 10 && n !== 11 && n !== 14 && n !== 17) return false;
  for (let i = 0; i < HOP_BY_HOP.length; i++) if (nameIs(name, HOP_BY_HOP[i]!)) return true;
  return false;
}

export interface RelayOptions {
  route: string;
  stream: boolean;
  /** The gateway added stream_options.include_usage: drop the usage-only event. */
  stripUsage: boolean;
  gateRequest: GateRequest;
  decision: GateDecision & { allowed: true };
}

// res.cork takes a callback; these module-level ones read the relay from `corking` (set just
// around the synchronous cork call) so that no closure is made per write.
let corking: ChatRelay | undefined;
function corkedFlush(): void { corking!.writeQueued(); }
function corkedEnd(): void { corking!.writeEnd(); }

export class ChatRelay implements UpstreamHandler {
  call: UpstreamCall | undefined;
  private status = 0;
  private rawHeaders: Buffer[] | undefined;
  private contentLength = -1;
  private headWritten = false;
  /** A whole non-stream body waiting for onEnd, to be written with its length in one go. */
  private held: Buffer | undefined;
  /** The unfinished SSE event at the end of the last chunk. */
  private carry: Buffer | undefined;
  private usage: GateUsage | undefined;
  /** SSE events relayed so far: the output charged when the backend's own count never arrives. */
  private events = 0;
  private done = false;
  private sse = false;
  /** Chunks accepted from the backend and not yet written to the client. */
  private readonly queue: Buffer[] = [];
  private flushScheduled = false;
  /** uWS buffered our last write: the client is not reading fast enough. */
  private clientFull = false;
  /** onData returned false: the backend body waits for call.resume(). */
  private upstreamPaused = false;
  private flushTask: (() => void) | undefined;
  private writableTask: (() => boolean) | undefined;

  constructor(
    private readonly res: Res,
    private readonly ctx: GatewayContext,
    private readonly model: ModelState,
    private readonly opts: RelayOptions,
  ) {
    res.onAbort = () => {
      this.call?.abort();
      this.finish(CLIENT_CLOSED, this.usage ?? this.abandonedUsage());
    };
  }

  onHead(status: number, rawHeaders: Buffer[]): void {
    this.status = status;
    this.rawHeaders = rawHeaders;
    this.sse = this.opts.stream && status === 200;
    if (!this.sse) {
      for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
        if (nameIs(rawHeaders[i]!, CONTENT_LENGTH)) { this.contentLength = Number(rawHeaders[i + 1]!.toString('latin1')); break; }
      }
    }
  }

  onData(chunk: Buffer): boolean {
    if (this.done) return true;
    if (this.sse) this.sseData(chunk);
    else {
      if (this.status === 200) {
        // Usage sits near the end of a completion: a backward search finds it at once.
        const p = lastIndexOfUsage(chunk);
        if (p >= 0) this.usage = usageAt(chunk, p) ?? this.usage;
      }
      if (!this.headWritten && this.held === undefined && chunk.length === this.contentLength) {
        this.held = chunk;
        return true;
      }
      this.enqueue(chunk);
    }
    if (!this.clientFull) return true;
    this.upstreamPaused = true;
    return false;
  }

  onEnd(): void {
    if (this.done) return;
    if (!this.res.aborted) {
      corking = this;
      this.res.cork(corkedEnd);
      corking = undefined;
    }
    this.finish(this.status, this.status === 200 ? this.usage : ZERO_USAGE);
  }

  onError(err: UpstreamError): void {
    if (this.done) return;
    if (err.kind === 'aborted' || this.res.aborted) {
      this.finish(CLIENT_CLOSED, this.usage ?? this.abandonedUsage());
      return;
    }
    const res = this.res;
    if (!this.headWritten && this.queue.length === 0) {
      // Nothing reached the client yet: a clean 502 in the chat shape.
      const e = err.kind === 'timeout' || err.kind === 'idle' ? ERRORS.upstreamTimeout : ERRORS.unavailable;
      res.cork(() => {
        res.writeStatus(statusLine(e.status));
        res.writeHeader('content-type', 'application/json');
        res.end(e.body);
      });
      this.finish(e.status, this.usage ?? (err.headSeen ? undefined : ZERO_USAGE));
      return;
    }
    if (this.sse) {
      // The stream had started: end it with an error event the client libraries raise.
      const code = err.kind === 'idle' ? 'upstream_timeout' : 'upstream_error';
      const event = `data: {"error":{"message":"Model backend stream failed: ${err.kind === 'idle' ? 'no data within the idle timeout' : 'connection lost'}","type":"api_error","param":null,"code":"${code}"}}\n\n`;
      this.carry = undefined; // an unfinished event is not relayed
      res.cork(() => {
        this.writeQueued();
        res.write(event);
        res.end();
      });
      this.finish(this.status, this.usage ?? this.relayedUsage());
      return;
    } else {
      // A truncated non-stream body: cut the connection so the client cannot take it as whole.
      this.queue.length = 0;
      res.close();
    }
    this.finish(this.status, this.usage);
  }

  /**
   * What a stream that ended without the backend's usage is charged: the input estimate plus one
   * output token per relayed event (a backend streams one event per decoding step; the role event
   * makes it a slight over-count). What was generated reached the client as it came.
   */
  private relayedUsage(): GateUsage {
    return { inputTokens: this.opts.gateRequest.inputTokens ?? 0, outputTokens: this.events };
  }

  /**
   * What a request the client abandoned is charged: a stream what was relayed; a non-stream
   * request its whole reservation (its body comes at the end, so nothing relayed tells how much
   * the backend had generated when the abort reached it).
   */
  private abandonedUsage(): GateUsage {
    if (this.opts.stream) return this.relayedUsage();
    const input = this.opts.gateRequest.inputTokens ?? 0;
    const reserved = this.opts.decision.reservedTokens ?? this.opts.gateRequest.estimatedTokens;
    return { inputTokens: input, outputTokens: Math.max(0, reserved - input) };
  }

  /** Ends the request's bookkeeping exactly once: gate, admission slot, metrics. */
  private finish(status: number, usage: GateUsage | undefined): void {
    if (this.done) return;
    this.done = true;
    this.queue.length = 0;
    this.res.onAbort = undefined;
    const ctx = this.ctx;
    ctx.admission.leave();
    if (usage && usage !== ZERO_USAGE) this.model.series.tokens(usage.inputTokens, usage.outputTokens);
    ctx.metrics.request(this.opts.route, this.model.name, status);
    try {
      ctx.gate.settle(this.opts.gateRequest, this.opts.decision, usage);
    } catch (err) {
      ctx.logger.error('gate settle failed', { err });
    }
  }

  private writeHead(): void {
    const res = this.res;
    this.headWritten = true;
    res.writeStatus(statusLine(this.status));
    const raw = this.rawHeaders!;
    for (let i = 0; i + 1 < raw.length; i += 2) {
      const name = raw[i]!;
      if (!isHopByHop(name)) res.writeHeader(name, raw[i + 1]!);
    }
    const extra = this.opts.decision.headers;
    for (const k in extra) res.writeHeader(k, extra[k]!);
  }

  /** Queues a chunk for the client; it is written when the current backend read has been handled. */
  private enqueue(chunk: Buffer): void {
    this.queue.push(chunk);
    if (this.flushScheduled || this.clientFull) return; // a full client is flushed from onWritable
    this.flushScheduled = true;
    queueMicrotask((this.flushTask ??= () => {
      this.flushScheduled = false;
      this.flush();
    }));
  }

  private flush(): void {
    if (this.done || this.res.aborted || this.queue.length === 0) return;
    corking = this;
    this.res.cork(corkedFlush);
    corking = undefined;
  }

  /** Inside res.cork: the head (first time), then every queued chunk. */
  writeQueued(): void {
    if (!this.headWritten) this.writeHead();
    const q = this.queue;
    if (q.length === 0) return;
    const res = this.res;
    let ok = true;
    for (let i = 0; i < q.length; i++) ok = res.write(q[i]!) && ok;
    q.length = 0;
    if (ok || this.clientFull) return;
    this.clientFull = true;
    this.ctx.metrics.backpressurePauses++;
    res.onWritable((this.writableTask ??= () => this.onWritable()));
  }

  /** Inside res.cork: whatever is queued, then the end of the response. */
  writeEnd(): void {
    this.writeQueued();
    const res = this.res;
    if (this.carry) res.write(this.carry);
    if (this.held) res.end(this.held);
    else res.end();
  }

  private onWritable(): boolean {
    this.clientFull = false;
    if (this.done || this.res.aborted) return true;
    if (this.queue.length > 0) this.writeQueued(); // may find the client full again
    if (!this.clientFull && this.upstreamPaused) {
      this.upstreamPaused = false;
      this.call?.resume();
    }
    return true;
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
      const cut = Math.max(chunk.lastIndexOf(LF2) + 2, chunk.lastIndexOf(CRLF2) + 4);
      if (cut <= 3) {
        this.carry = Buffer.from(chunk); // copy: an unfinished event waits for the rest
        return;
      }
      this.carry = Buffer.from(chunk.subarray(cut));
      chunk = chunk.subarray(0, cut);
    }
    for (let e = chunk.indexOf(LF2); e >= 0; e = chunk.indexOf(LF2, e + 2)) this.events++;
    let p = indexOfUsage(chunk);
    if (p < 0) {
      this.enqueue(chunk);
      return;
    }
    // An event carries usage (normally only the last one before [DONE]).
    let from = 0;
    while (p >= 0) {
      const start = Math.max(from, chunk.lastIndexOf(DATA, p));
      let end = chunk.indexOf(LF2, p);
      end = end < 0 ? chunk.length : end + 2;
      const u = usageAt(chunk, p, end);
      if (u) this.usage = u;
      if (this.opts.stripUsage && isUsageOnly(chunk, start, end)) {
        if (start > from) this.enqueue(chunk.subarray(from, start));
        from = end;
      }
      p = indexOfUsage(chunk, end);
    }
    if (from < chunk.length) this.enqueue(chunk.subarray(from));
  }
}

/** The event in chunk[start, end) is a usage-only one: its `choices` list is empty. */
function isUsageOnly(chunk: Buffer, start: number, end: number): boolean {
  const c = chunk.indexOf(CHOICES_KEY, start);
  if (c < 0 || c >= end) return false;
  const i = c + CHOICES_KEY.length;
  return i < end && chunk[i] === 0x5d; // ']'
}
