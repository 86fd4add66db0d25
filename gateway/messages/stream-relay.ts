// A streaming /v1/messages exchange: the backend's chat-completions SSE in, the messages
// protocol's SSE out, chunk by chunk as it arrives. Backpressure both ways (a slow client pauses
// the backend), pings while the backend is silent, and a client that goes away aborts the
// backend request. The gate is settled exactly once, with the usage the backend reported.
//
// Writes are batched like the chat relay's (gateway/relay.ts): the pool hands the chunks of one
// backend read over synchronously, one by one; their events are collected and written in one
// corked write from a microtask that runs once that read has been handled, so one socket send
// per backend read, not one per chunk. The response head waits for that same write (it goes out
// with the first events when they came in the same read as the backend's head, else alone right
// after that read). Nothing waits for more data.
import type { Res } from '../../lib/http.js';
import type { ModelState } from '../catalog.js';
import type { GatewayContext } from '../context.js';
import type { GateUsage } from '../gate.js';
import type { UpstreamCall, UpstreamError, UpstreamHandler } from '../upstreams.js';
import { backendError, MessagesError, rawHeader } from './errors.js';
import { sendError } from './reply.js';
import type { ThinkingSigner } from './signature.js';
import { SseParser } from './sse.js';
import { KEEPALIVE_COMMENT, PING_EVENT, StreamTranslator } from './stream.js';

export interface RelayOptions {
  route: string;
  model: ModelState;
  stickyKey: string | undefined;
  /** The chat-completions request, serialized, with stream and stream_options set. */
  body: string;
  signer: ThinkingSigner;
  thinking: boolean;
  /** input_tokens for message_start if the backend puts no usage on its first chunk. */
  inputTokensEstimate: number;
  pingIntervalMs: number;
  /** Headers from the gate (x-ratelimit-*). */
  headers: Record<string, string>;
  /** Called exactly once when the exchange is over, however it ended. */
  settle(usage: GateUsage | undefined): void;
}

/** Largest backend error body we read to relay its message. */
const MAX_ERROR_BYTES = 64 * 1024;

export function relayStream(res: Res, ctx: GatewayContext, o: RelayOptions): void {
  const relay = new MessagesStreamRelay(res, ctx, o);
  relay.call = ctx.upstreams.send(o.model, o.stickyKey, o.body, relay);
  res.onAbort = relay.abortTask; // the exchange then reports 'aborted' and finish() runs
}

// res.cork takes a callback; these module-level ones read the relay from `corking` (set just
// around the synchronous cork call) so that no closure is made per write.
let corking: MessagesStreamRelay | undefined;
let endText = '';
function corkedWrite(): void { corking!.writePending(); }
function corkedEnd(): void { corking!.writeEnd(endText); }

class MessagesStreamRelay implements UpstreamHandler {
  call: UpstreamCall | undefined;
  private readonly t: StreamTranslator;
  private readonly parser: SseParser;
  /** Events produced and not yet written. */
  private out = '';
  private status = 0;
  private errorParts: Buffer[] | undefined;
  private retryAfter: string | undefined;
  private errorSize = 0;
  /** Backend events relayed (translated) so far. */
  private events = 0;
  /** The backend answered 200 while the client was there: this is an SSE response. */
  private streaming = false;
  /** The 200 head has been handed to uWS. */
  private headOut = false;
  private ended = false;
  private finished = false;
  private flushScheduled = false;
  /** uWS buffered our last write: the client is not reading fast enough. */
  private clientFull = false;
  private upstreamPaused = false;
  private lastWrite = 0;
  private pinger: NodeJS.Timeout | undefined;
  private writableTask: (() => boolean) | undefined;
  readonly abortTask = (): void => this.call?.abort();
  private readonly flushTask = (): void => {
    this.flushScheduled = false;
    this.flush();
  };

  constructor(readonly res: Res, private readonly ctx: GatewayContext, private readonly o: RelayOptions) {
    const t = new StreamTranslator({ model: o.model.name, signer: o.signer, thinking: o.thinking, inputTokens: o.inputTokensEstimate });
    this.t = t;
    this.parser = new SseParser((data) => {
      this.events++;
      this.out += t.pushData(data);
    });
  }

  onHead(s: number, raw: Buffer[]): void {
    this.status = s;
    if (s !== 200) {
      this.errorParts = [];
      this.retryAfter = rawHeader(raw, 'retry-after');
      return;
    }
    if (this.res.aborted) return;
    this.streaming = true;
    this.lastWrite = Date.now();
    const every = this.o.pingIntervalMs;
    this.pinger = setInterval(() => this.ping(), Math.max(10, every >> 1));
    this.pinger.unref();
    this.scheduleFlush(); // the head goes out with the events of this read, or alone after it
  }

  onData(chunk: Buffer): boolean {
    if (this.errorParts) {
      if (this.errorSize < MAX_ERROR_BYTES) {
        this.errorParts.push(chunk);
        this.errorSize += chunk.length;
      }
      return true;
    }
    if (this.ended || this.res.aborted) return true;
    this.parser.push(chunk);
    const t = this.t;
    if (t.done) {
      // message_stop or an error event: the client's stream is complete.
      this.endResponse('');
      if (!t.finished) this.call!.abort(); // an error: nothing more is wanted from the backend
      return true;
    }
    if (this.out !== '') this.scheduleFlush();
    if (!this.clientFull) return true;
    this.upstreamPaused = true;
    return false;
  }

  onEnd(): void {
    if (this.errorParts) {
      sendError(this.res, this.ctx, this.o.route, this.o.model.name, backendError(this.status, Buffer.concat(this.errorParts).toString('utf8'), this.retryAfter));
      this.finish();
      return;
    }
    this.parser.end();
    const t = this.t;
    // A stream that stops after its finish reason is complete, even without [DONE].
    if (!t.done) this.out += t.finished ? t.end() : t.fail('api_error', 'The model backend ended the stream early');
    this.endResponse('');
    this.finish();
  }

  onError(err: UpstreamError): void {
    if (err.kind !== 'aborted') {
      if (!this.streaming) sendError(this.res, this.ctx, this.o.route, this.o.model.name, new MessagesError(502, 'Model gateway is unavailable'));
      else {
        const message = err.kind === 'idle' ? 'The model backend stopped responding' : 'The connection to the model backend was lost';
        this.endResponse(this.t.fail('api_error', message));
      }
    }
    this.finish();
  }

  private scheduleFlush(): void {
    if (this.flushScheduled) return;
    this.flushScheduled = true;
    queueMicrotask(this.flushTask);
  }

  /** Writes the head (first time) and the pending events, in one corked write. */
  private flush(): void {
    if (this.ended || this.res.aborted) return;
    if (this.headOut && this.out === '') return;
    corking = this;
    this.res.cork(corkedWrite);
    corking = undefined;
  }

  /** Inside res.cork: the head (first time), then the pending events. */
  writePending(): void {
    const res = this.res;
    if (!this.headOut) this.writeHead();
    const text = this.out;
    if (text === '') return;
    this.out = '';
    this.lastWrite = Date.now();
    if (res.write(text) || this.clientFull) return;
    this.clientFull = true;
    res.onWritable((this.writableTask ??= () => this.onWritable()));
  }

  /** Inside res.cork: the head if still due, then the pending events and `text` as the end. */
  writeEnd(text: string): void {
    if (!this.headOut) this.writeHead();
    const all = this.out + text;
    this.out = '';
    this.res.end(all);
  }

  private writeHead(): void {
    const res = this.res;
    this.headOut = true;
    res.writeStatus('200 OK');
    res.writeHeader('content-type', 'text/event-stream; charset=utf-8');
    res.writeHeader('cache-control', 'no-cache');
    res.writeHeader('x-accel-buffering', 'no');
    const headers = this.o.headers;
    for (const k in headers) res.writeHeader(k, headers[k]!);
  }

  private onWritable(): boolean {
    this.clientFull = false;
    if (this.upstreamPaused && !this.ended && !this.res.aborted) {
      this.upstreamPaused = false;
      this.call!.resume();
    }
    return true;
  }

  /** Ends the response with the pending events and `text`, head first if it is still due. */
  private endResponse(text: string): void {
    if (this.ended) return;
    this.ended = true;
    if (this.pinger) clearInterval(this.pinger);
    const res = this.res;
    if (res.aborted) return;
    res.aborted = true; // nothing may touch the response after end
    corking = this;
    endText = text;
    res.cork(corkedEnd);
    corking = undefined;
    endText = '';
  }

  private finish(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.pinger) clearInterval(this.pinger);
    this.res.onAbort = undefined;
    if (this.streaming) this.ctx.metrics.request(this.o.route, this.o.model.name, 200);
    // The backend's running count (continuous usage) when it reports one; else, for a stream
    // that was relayed, the input estimate plus one output token per relayed backend event.
    const reported = this.t.reportedUsage;
    this.o.settle(reported ?? (this.streaming ? { inputTokens: this.o.inputTokensEstimate, outputTokens: this.events } : undefined));
  }

  private ping(): void {
    if (this.ended || this.res.aborted || Date.now() - this.lastWrite < this.o.pingIntervalMs) return;
    // Before message_start an SSE comment (ignored by every parser); after it, the protocol's ping.
    this.out += this.t.started ? PING_EVENT : KEEPALIVE_COMMENT;
    this.flush();
  }
}
