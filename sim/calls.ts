// The generation requests in flight (chat completions and responses): each one's response, its
// pending timer and how it ended, counted in the sim's stats. close() ends what is left, so no
// timer keeps the process alive.
import { sendJson, track, type Res } from '../lib/http.js';
import type { HttpResponse } from '../lib/uws.js';
import type { ErrorAnswer } from './flavours/flavour.js';
import { SimRequestError } from './request.js';
import type { SimStats } from './stats.js';

/** How a call ended: the sim answered it (errors included), its client went away, or the sim cut the connection. */
export type Outcome = 'completed' | 'aborted' | 'closed';

/** One generation in progress: its response, its timer and whether it ended. */
export class Call {
  private timer: NodeJS.Timeout | undefined;
  private done = false;
  /** What the call gives back when it ends (its batch slot, its KV cache blocks). */
  private readonly endHooks: (() => void)[] = [];

  constructor(
    readonly res: Res,
    private readonly calls: Calls,
  ) {}

  get ended(): boolean {
    return this.done;
  }

  /** Runs `fn` once when the call ends, however it ends. */
  onEnd(fn: () => void): void {
    this.endHooks.push(fn);
  }

  /** Runs `fn` in `ms` (the call's one pending timer), unless the call ends first. */
  after(ms: number, fn: () => void): void {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      fn();
    }, ms);
  }

  end(outcome: Outcome): void {
    if (this.done) return;
    this.done = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.calls.ended(this, outcome);
    for (const fn of this.endHooks) fn();
  }

  /** The flavour's error answer for a status and message. */
  error(status: number, message: string, param?: string | null): ErrorAnswer {
    return this.calls.error(status, message, param);
  }

  /** Answers with the flavour's error body and ends the call. */
  fail(err: SimRequestError | { status: number; message: string }): void {
    const a = err instanceof SimRequestError ? (err.answer ?? this.calls.error(err.status, err.message, err.param)) : this.calls.error(err.status, err.message);
    sendJson(this.res, a.status, a.body);
    this.end('completed');
  }

  /**
   * Cuts the connection (close-mid-stream). Deferred: inside a uWS callback the response is
   * corked, and closing there would drop the chunks written just before.
   */
  cut(): void {
    setImmediate(() => {
      if (this.done) return;
      this.end('closed');
      this.res.onAbort = undefined;
      this.res.aborted = true;
      this.res.close();
    });
  }
}

/** The calls in flight, and their counts in `stats`. */
export class Calls {
  private readonly open = new Set<Call>();

  constructor(
    private readonly stats: SimStats,
    /** The flavour's error body for a status and message. */
    readonly error: (status: number, message: string, param?: string | null) => ErrorAnswer,
  ) {}

  /** Starts a call on a new request (call first, synchronously, in the handler: it registers the abort). */
  begin(res: HttpResponse): Call {
    const r = track(res);
    const call = new Call(r, this);
    this.stats.requests++;
    this.stats.inFlight++;
    this.open.add(call);
    r.onAbort = () => call.end('aborted');
    return call;
  }

  /** Called by Call.end, once per call. */
  ended(call: Call, outcome: Outcome): void {
    this.open.delete(call);
    this.stats.inFlight--;
    if (outcome === 'completed') this.stats.completed++;
    else if (outcome === 'aborted') this.stats.aborted++;
  }

  /** Ends every call still open (stalled or paced streams) as aborted. */
  endAll(): void {
    for (const call of [...this.open]) call.end('aborted');
  }
}
