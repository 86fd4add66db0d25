// Relays one backend response to one uWS client response, as bytes.
//
// - Each upstream chunk is written as it arrives, inside res.cork; when uWS cannot take more
//   (write returns false) the upstream body is paused and resumed from onWritable.
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
import { USAGE_KEY, usageAt, findUsage, ZERO_USAGE } from './usage.js';

const LF2 = Buffer.from('\n\n');
const CRLF2 = Buffer.from('\r\n\r\n');
const DATA = Buffer.from('data:');
const EMPTY_CHOICES = Buffer.from('"choices":[]');
/** Status recorded when the client went away before its response ended (nginx's convention). */
export const CLIENT_CLOSED = 499;

/** Response headers not copied from the backend: uWS writes its own framing, Date and mark. */
function isHopByHop(name: Buffer): boolean {
  const n = name.length;
  if (n !== 4 && n !== 10 && n !== 11 && n !== 14 && n !== 17) return false;
  const s = name.toString('latin1').toLowerCase();
  return s === 'date' || s === 'connection' || s === 'keep-alive' || s === 'content-length' || s === 'transfer-encoding' || s === 'uwebsockets';
}

function isContentLength(name: Buffer): boolean {
  return name.length === 14 && name.toString('latin1').toLowerCase() === 'content-length';
}

export interface RelayOptions {
  route: string;
  stream: boolean;
  /** The gateway added stream_options.include_usage: drop the usage-only event. */
  stripUsage: boolean;
  gateRequest: GateRequest;
  decision: GateDecision & { allowed: true };
}

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
  private done = false;
  private sse = false;
  // Bound once per request: the cork callback and its argument, the writable callback.
  private pending: Buffer | undefined;
  private writeOk = true;
  private readonly corkedWrite = (): void => {
    if (!this.headWritten) this.writeHead();
    this.writeOk = this.res.write(this.pending!);
  };
  private readonly onWritable = (): boolean => {
    this.call?.resume();
    return true;
  };

  constructor(
    private readonly res: Res,
    private readonly ctx: GatewayContext,
    private readonly model: ModelState,
    private readonly opts: RelayOptions,
  ) {
    res.onAbort = () => {
      this.call?.abort();
      this.finish(CLIENT_CLOSED, undefined);
    };
  }

  onHead(status: number, rawHeaders: Buffer[]): void {
    this.status = status;
    this.rawHeaders = rawHeaders;
    this.sse = this.opts.stream && status === 200;
    if (!this.sse) {
      for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
        if (isContentLength(rawHeaders[i]!)) { this.contentLength = Number(rawHeaders[i + 1]!.toString('latin1')); break; }
      }
    }
  }

  onData(chunk: Buffer): boolean {
    if (this.done) return true;
    if (this.sse) return this.sseData(chunk);
    if (this.status === 200) {
      // Usage sits near the end of a completion; scanning each chunk is one native search.
      const u = chunk.lastIndexOf(USAGE_KEY) >= 0 ? findUsage(chunk) : undefined;
      if (u) this.usage = u;
    }
    if (!this.headWritten && this.held === undefined && chunk.length === this.contentLength) {
      this.held = chunk;
      return true;
    }
    return this.write(chunk);
  }

  onEnd(): void {
    if (this.done) return;
    const res = this.res;
    const held = this.held;
    const carry = this.carry;
    res.cork(() => {
      if (!this.headWritten) this.writeHead();
      if (carry) res.write(carry);
      if (held) res.end(held);
      else res.end();
    });
    this.finish(this.status, this.status === 200 ? this.usage : ZERO_USAGE);
  }

  onError(err: UpstreamError): void {
    if (this.done) return;
    if (err.kind === 'aborted' || this.res.aborted) {
      this.finish(CLIENT_CLOSED, this.usage);
      return;
    }
    const res = this.res;
    if (!this.headWritten) {
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
      res.cork(() => {
        res.write(event);
        res.end();
      });
    } else {
      // A truncated non-stream body: cut the connection so the client cannot take it as whole.
      res.close();
    }
    this.finish(this.status, this.usage);
  }

  /** Ends the request's bookkeeping exactly once: gate, admission slot, metrics. */
  private finish(status: number, usage: GateUsage | undefined): void {
    if (this.done) return;
    this.done = true;
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

  /** Writes one chunk (and the head before the first); false when uWS buffered it (pause upstream). */
  private write(chunk: Buffer): boolean {
    if (this.res.aborted) return true;
    this.pending = chunk;
    this.res.cork(this.corkedWrite);
    this.pending = undefined;
    if (this.writeOk) return true;
    this.ctx.metrics.backpressurePauses++;
    this.res.onWritable(this.onWritable);
    return false;
  }

  private sseData(input: Buffer): boolean {
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
        return true;
      }
      this.carry = Buffer.from(chunk.subarray(cut));
      chunk = chunk.subarray(0, cut);
    }
    let p = chunk.indexOf(USAGE_KEY);
    if (p < 0) return this.write(chunk);
    // Rare: an event carries usage (normally only the last one before [DONE]).
    let from = 0;
    let ok = true;
    while (p >= 0) {
      const start = Math.max(from, chunk.lastIndexOf(DATA, p));
      let end = chunk.indexOf(LF2, p);
      end = end < 0 ? chunk.length : end + 2;
      const u = usageAt(chunk, p, end);
      if (u) this.usage = u;
      if (this.opts.stripUsage) {
        const c = chunk.indexOf(EMPTY_CHOICES, start);
        if (c >= 0 && c < end) {
          if (start > from) ok = this.write(chunk.subarray(from, start)) && ok;
          from = end;
        }
      }
      p = chunk.indexOf(USAGE_KEY, end);
    }
    if (from < chunk.length) ok = this.write(chunk.subarray(from)) && ok;
    return ok;
  }
}
