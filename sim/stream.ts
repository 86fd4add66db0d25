// A streamed generation: the headers and the head event (the role delta) when it starts running,
// or, for a server that sends its head with its first token (llama.cpp), with that token; then
// one event per token, paced (one timer per token, honouring backpressure) or all in one write
// with `fast`, then the closing events (finish, usage, [DONE]), and the connection closed after
// it where the server does that (llama.cpp); a breaking fault (close-mid-stream, stall-during)
// stops it after N tokens.
import type { Call } from './calls.js';
import type { Completion, SseRenderer } from './completion.js';
import { breakOff, MID_STREAM_ERROR, tokensBeforeFault } from './fault-injection.js';
import type { Fault } from './faults.js';
import type { Flavour } from './flavours/index.js';
import type { Pace } from './pace.js';

export class StreamedAnswer {
  private readonly events: SseRenderer;
  /** Token events in all. */
  private readonly n: number;
  /** Token events sent before the fault hits (-1: no fault). */
  private readonly stopAt: number;
  /** Prompt tokens to prefill before the first token (not served from the prefix cache). */
  private readonly uncachedTokens: number;
  /** performance.now() when pacing started. */
  private start = 0;
  /** The next token to send. */
  private i = 0;
  private waitingWritable = false;
  /** The response head is written (it goes with the first write). */
  private headSent = false;

  constructor(
    private readonly call: Call,
    completion: Completion,
    private readonly fault: Fault | undefined,
    private readonly pace: Pace,
    private readonly flavour: Flavour,
    private readonly instanceName?: string | undefined,
    /** With recordFirstTokens: this generation's engine time to first token, sent as `x-sim-first-token-ms`. */
    private readonly engineFirstTokenMs?: number | undefined,
  ) {
    this.events = completion.renderer();
    this.n = this.events.tokens;
    this.stopAt = tokensBeforeFault(fault, this.n);
    this.uncachedTokens = completion.uncachedTokens;
  }

  send(): void {
    if (!this.flavour.headWithFirstToken) {
      const r = this.call.res;
      r.cork(() => r.write(this.withHead('')));
    }
    if (this.pace.fast) this.sendAtOnce();
    else this.startPaced();
  }

  /**
   * `data`, preceded by the status, the headers and the head event the first time. Call inside
   * cork(): uWS sends the head with the first write.
   */
  private withHead(data: string, ending = false): string {
    if (this.headSent) return data;
    this.headSent = true;
    const r = this.call.res;
    r.writeStatus('200 OK');
    r.writeHeader('content-type', 'text/event-stream; charset=utf-8');
    r.writeHeader('cache-control', 'no-cache');
    for (const [k, v] of this.flavour.streamHeaders) r.writeHeader(k, v);
    if (this.flavour.closeAfterStream && !ending) r.writeHeader('Connection', 'close');
    if (this.instanceName !== undefined) r.writeHeader('x-sim-instance', this.instanceName);
    if (this.engineFirstTokenMs !== undefined) r.writeHeader('x-sim-first-token-ms', this.engineFirstTokenMs.toFixed(1));
    return this.events.head() + data;
  }

  /** The closing events, ending the response (and the connection, where the server closes it). */
  private finish(before: string): void {
    this.end(before + this.events.tail());
  }

  /** Writes the last events and ends the response (and the connection, where the server closes it). */
  private end(last: string): void {
    const r = this.call.res;
    // llama.cpp closes the connection after a stream. A response still unsent (fast mode) is
    // ended with uWS's closeConnection: one `Connection: close` header, the socket shut after
    // it. Once the head is out, uWS's end(body, true) would write its Connection header into
    // the body (breaking the chunked encoding) and the response cannot be touched after end(),
    // so a paced stream's head carried `Connection: close` (withHead) and the client, as HTTP/1.1
    // requires, does not reuse the connection.
    const closeNow = this.flavour.closeAfterStream && !this.headSent;
    r.cork(() => r.end(this.withHead(last, closeNow), closeNow));
    this.call.end('completed');
  }

  /** Everything at once; uWS keeps what the socket cannot take yet. */
  private sendAtOnce(): void {
    const r = this.call.res;
    const upTo = this.stopAt >= 0 ? this.stopAt : this.n;
    let out = '';
    for (let i = 0; i < upTo; i++) out += this.events.token(i);
    if (this.stopAt >= 0) {
      if (this.fault!.kind === 'error-mid-stream') return this.fail(out);
      r.cork(() => r.write(this.withHead(out)));
      breakOff(this.call, this.fault!);
      return;
    }
    this.finish(out);
  }

  /** error-mid-stream: the server's in-stream error event (and what follows it) ends the stream. */
  private fail(before: string): void {
    this.end(before + this.flavour.streamError(500, MID_STREAM_ERROR));
  }

  /** Paced: token i is due at start + ttft + prefill + i / tokensPerSecond (no drift). */
  private startPaced(): void {
    this.start = performance.now();
    this.call.res.onWritable(() => {
      if (this.waitingWritable) {
        this.waitingWritable = false;
        this.schedule();
      }
      return true;
    });
    this.schedule();
  }

  private schedule(): void {
    const due = this.start + this.pace.tokenDueMs(this.uncachedTokens, this.i);
    this.call.after(Math.max(0, due - performance.now()), () => this.step());
  }

  private step(): void {
    const { call, n, stopAt } = this;
    const r = call.res;
    if (call.ended || r.aborted) return;
    if (this.i === stopAt) {
      if (this.fault!.kind === 'error-mid-stream') return this.fail('');
      if (!this.headSent) r.cork(() => r.write(this.withHead('')));
      return breakOff(call, this.fault!);
    }
    let ok = true;
    if (this.i < n) {
      const chunk = this.events.token(this.i++);
      r.cork(() => {
        ok = r.write(this.withHead(chunk));
      });
      if (this.i < n || stopAt === n) {
        if (ok) this.schedule();
        else this.waitingWritable = true;
        return;
      }
    }
    this.finish('');
  }
}
