// A streamed generation: the headers and the role event at once, then one event per token,
// paced (one timer per token, honouring backpressure) or all in one write with `fast`, then the
// closing events; a breaking fault (close-mid-stream, stall-during) stops it after N tokens.
import type { Call } from './calls.js';
import type { Completion, SseRenderer } from './completion.js';
import { breakOff, tokensBeforeFault } from './fault-injection.js';
import type { Fault } from './faults.js';
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

  constructor(
    private readonly call: Call,
    completion: Completion,
    private readonly fault: Fault | undefined,
    private readonly pace: Pace,
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
    const r = this.call.res;
    r.cork(() => {
      r.writeStatus('200 OK');
      r.writeHeader('content-type', 'text/event-stream; charset=utf-8');
      r.writeHeader('cache-control', 'no-cache');
      if (this.instanceName !== undefined) r.writeHeader('x-sim-instance', this.instanceName);
      if (this.engineFirstTokenMs !== undefined) r.writeHeader('x-sim-first-token-ms', this.engineFirstTokenMs.toFixed(1));
      r.write(this.events.role());
    });
    if (this.pace.fast) this.sendAtOnce();
    else this.startPaced();
  }

  private tail(): string {
    return (this.n === 0 ? this.events.emptyFinish() : '') + this.events.tail();
  }

  /** Everything at once; uWS keeps what the socket cannot take yet. */
  private sendAtOnce(): void {
    const r = this.call.res;
    const upTo = this.stopAt >= 0 ? this.stopAt : this.n;
    let out = '';
    for (let i = 0; i < upTo; i++) out += this.events.token(i);
    if (this.stopAt >= 0) {
      r.cork(() => r.write(out));
      breakOff(this.call, this.fault!);
      return;
    }
    r.cork(() => r.end(out + this.tail()));
    this.call.end('completed');
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
    if (this.i === stopAt) return breakOff(call, this.fault!);
    let ok = true;
    if (this.i < n) {
      const chunk = this.events.token(this.i++);
      r.cork(() => {
        ok = r.write(chunk);
      });
      if (this.i < n || stopAt === n) {
        if (ok) this.schedule();
        else this.waitingWritable = true;
        return;
      }
    }
    const last = this.tail();
    r.cork(() => r.end(last));
    call.end('completed');
  }
}
