// The running batch, bounded as vLLM's --max-num-seqs bounds it: at most `maxNumSeqs` requests
// run (prefill or decode) at once; the others wait in a FIFO queue and start, in arrival order,
// when a slot frees. A request whose client goes away while waiting leaves the queue. The
// counts (running, waiting, peak running) are kept in the sim's stats.
import type { Call } from './calls.js';
import type { SimStats } from './stats.js';

interface Waiting {
  call: Call;
  start: () => void;
}

export class Batch {
  private running = 0;
  private readonly queue: Waiting[] = [];

  constructor(
    readonly maxNumSeqs: number,
    private readonly stats: SimStats,
  ) {}

  /** Runs `start` for `call` now when a slot is free, else when one frees; the slot is the call's until it ends. */
  admit(call: Call, start: () => void): void {
    if (this.running < this.maxNumSeqs && this.queue.length === 0) {
      this.take(call);
      start();
      return;
    }
    const entry = { call, start };
    this.queue.push(entry);
    this.stats.waiting = this.queue.length;
    call.onEnd(() => this.leave(entry));
  }

  private take(call: Call): void {
    this.running++;
    this.stats.running = this.running;
    if (this.running > this.stats.peakRunning) this.stats.peakRunning = this.running;
    call.onEnd(() => this.free());
  }

  /** A waiting call ended (its client went away, or close()): it leaves the queue. */
  private leave(entry: Waiting): void {
    const i = this.queue.indexOf(entry);
    if (i < 0) return;
    this.queue.splice(i, 1);
    this.stats.waiting = this.queue.length;
  }

  /**
   * A running call ended: the first waiting one takes its slot. It starts on the next turn of
   * the event loop, not inside the ending call's callback (which may be another response's
   * uWS handler).
   */
  private free(): void {
    this.running--;
    this.stats.running = this.running;
    const next = this.queue.shift();
    if (!next) return;
    this.stats.waiting = this.queue.length;
    this.take(next.call);
    setImmediate(() => {
      if (!next.call.ended) next.start();
    });
  }
}
