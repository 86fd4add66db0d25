// A streamed generation: the headers and the head event (the role delta) when it starts running,
// or, for a server that sends its head with its first token (llama.cpp), with that token; then
// one event per token, paced (one timer per token, honouring backpressure) or all in one write
// with `fast`, then the closing events (finish, usage, [DONE]), and the connection closed after
// it where the server does that (llama.cpp); a breaking fault (close-mid-stream, stall-during)
// stops it after N tokens.
import type { Call } from './calls.js';
import type { Completion, SseRenderer } from './completion.js';
import { breakOff, tokensBeforeFault } from './fault-injection.js';
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
  private withHead(data: string): string {
    if (this.headSent) return data;
    this.headSent = true;
    const r = this.call.res;
    r.writeStatus('200 OK');
    r.writeHeader('content-type', 'text/event-stream; charset=utf-8');
    r.writeHeader('cache-control', 'no-cache');
    for (const [k, v] of this.flavour.streamHeaders) r.writeHeader(k, v);
    if (this.flavour.closeAfterStream) r.writeHeader('connection', 'close');
    if (this.instanceName !== undefined) r.writeHeader('x-sim-instance', this.instanceName);
    if (this.engineFirstTokenMs !== undefined) r.writeHeader('x-sim-first-token-ms', this.engineFirstTokenMs.toFixed(1));
    return this.events.head() + data;
  }

  /** The closing events, ending the response (and the connection, where the server closes it). */
  private finish(before: string): void {
    const r = this.call.res;
    const data = this.withHead.bind(this);
    if (this.flavour.closeAfterStream) {
      // Written, then ended: the head (with its `connection: close`) goes out chunked as in a
      // paced stream, and uWS adds no second Connection header when it closes.
      r.cork(() => {
        r.write(data(before + this.events.tail()));
        r.end(undefined, true);
      });
    } else r.cork(() => r.end(data(before + this.events.tail())));
    this.call.end('completed');
  }

  /** Everything at once; uWS keeps what the socket cannot take yet. */
  private sendAtOnce(): void {
    const r = this.call.res;
    const upTo = this.stopAt >= 0 ? this.stopAt : this.n;
    let out = '';
    for (let i = 0; i < upTo; i++) out += this.events.token(i);
    if (this.stopAt >= 0) {
      r.cork(() => r.write(this.withHead(out)));
      breakOff(this.call, this.fault!);
      return;
    }
    this.finish(out);
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
