// A streaming /v1/messages exchange: the backend's chat-completions SSE in, the messages
// protocol's SSE out, chunk by chunk as it arrives. Backpressure both ways (a slow client pauses
// the backend), pings while the backend is silent, and a client that goes away aborts the
// backend request. The request finishes exactly once (request/lifecycle.ts: the gate settled
// with the usage the backend reported, the slot released, the metrics counted).
//
// Writes go through the response writer (lib/relay/response-writer.ts), which batches the events
// of one backend read into one corked write, so one socket send per backend read, not one per
// chunk. The response head waits for that same write (it goes out with the first events when
// they came in the same read as the backend's head, else alone right after that read).
import { relayedUsage } from '../usage.js';
import { MAX_ERROR_BODY_BYTES } from '../backends/backend-error.js';
import type { Res } from '../../lib/http.js';
import type { GateUsage } from '../gates/gate.js';
import { ResponseWriter, type WriterHooks } from '../../lib/relay/response-writer.js';
import type { UpstreamCall, UpstreamError, UpstreamHandler } from '../backends/upstreams.js';
import type { HeaderLines } from '../../lib/relay/http-pool.js';
import { CLIENT_CLOSED } from '../metrics.js';
import type { ModelRequest } from '../request/lifecycle.js';
import { backendError, type MessagesError } from './errors.js';
import { sendError, upstreamUnavailable } from './reply.js';
import type { ThinkingSigner } from './signature.js';
import { SseParser } from './sse.js';
import { KEEPALIVE_COMMENT, PING_EVENT, StreamTranslator } from './stream.js';

/** The backend's Retry-After, kept on a relayed 429 or 503. */
const RETRY_AFTER = Buffer.from('retry-after');

/**
 * Relays the admitted request `r` as a messages stream. `body`: the chat-completions request,
 * serialized, with stream and stream_options set; `thinking`: false when the client turned
 * thinking off; `pingIntervalMs`: backend silence before a ping.
 */
export function relayStream(r: ModelRequest<MessagesError>, body: string, signer: ThinkingSigner, thinking: boolean, pingIntervalMs: number): void {
  const relay = new MessagesStreamRelay(r, signer, thinking, pingIntervalMs);
  relay.call = r.ctx.upstreams.send(r.model!, r.routeHint, body, relay);
}

/**
 * The response head of a messages stream (the gate's headers are added by the writer), as Buffers
 * made once: uWS converts a string argument to UTF-8 on every call (about 1.5k instructions each
 * under callgrind, six per stream), a Buffer's bytes it takes as they are. Its three lines are one
 * name and one value: uWS writes `name: value\r\n` as given, so the lines after the first ride in
 * the first one's value, the same bytes on the wire in one writeHeader call instead of three
 * (about 1k instructions each).
 */
const SSE_HEAD: readonly Buffer[] = ['content-type', 'text/event-stream; charset=utf-8\r\ncache-control: no-cache\r\nx-accel-buffering: no'].map((s) =>
  Buffer.from(s),
);

/** The messages body transform: chat-completions SSE in, messages events out, through the response writer. */
class MessagesStreamRelay implements UpstreamHandler, WriterHooks<GateUsage> {
  call: UpstreamCall | undefined;
  readonly res: Res;
  private readonly w: ResponseWriter<GateUsage>;
  private readonly t: StreamTranslator;
  private readonly parser: SseParser;
  /** Events produced from the current backend chunk, not yet handed to the writer. */
  private out = '';
  private status = 0;
  private errorParts: Buffer[] | undefined;
  private retryAfter: string | undefined;
  private errorSize = 0;
  /** Backend events relayed (translated) so far. */
  private events = 0;
  /** The backend answered 200 while the client was there: this is an SSE response. */
  private streaming = false;
  /**
   * Pings: the timer ticks every half interval; a tick that finds something written since the one
   * before starts the count of quiet ticks again, and the second quiet tick in a row pings (after
   * one to one and a half intervals of silence). A flag set per write, where a clock read per
   * backend read cost some 350 instructions under callgrind.
   */
  private wrote = false;
  private quietTicks = 0;
  private pinger: NodeJS.Timeout | undefined;

  constructor(
    private readonly r: ModelRequest<MessagesError>,
    signer: ThinkingSigner,
    thinking: boolean,
    private readonly pingIntervalMs: number,
  ) {
    this.res = r.res;
    this.w = new ResponseWriter(r.res, this, { metrics: r.ctx.metrics });
    // input_tokens for message_start if the backend puts no usage on its first chunk.
    // The text tokens of one backend read in one text_delta event (taken at the read's end).
    const t = new StreamTranslator({ model: r.model!.name, signer, thinking, inputTokens: r.inputTokens, mergeText: true });
    this.t = t;
    this.parser = new SseParser(
      (data, notPlain) => {
        this.events++;
        this.out += notPlain ? t.pushOther(data) : t.pushData(data);
      },
      (c, plain) => {
        this.events++;
        this.out += t.pushChunk(c, plain);
      },
    );
  }

  // WriterHooks

  onAbort(): void {
    this.call?.abort(); // the exchange then reports 'aborted' and onError finishes
  }

  onDrain(): void {
    this.call?.resume();
  }

  /**
   * The request ends (request/lifecycle.ts): a stream that started counts as 200 however it
   * ended (its client got a 200 head); else `status` is what the client was answered, or
   * CLIENT_CLOSED.
   */
  onFinish(status: number): void {
    if (this.pinger) clearInterval(this.pinger);
    // The backend's running count (continuous usage) when it reports one; else, for a stream
    // that was relayed, the input estimate plus one output token per relayed backend event.
    const reported = this.t.reportedUsage;
    const r = this.r;
    r.finish(this.streaming ? 200 : status, reported ?? (this.streaming ? relayedUsage(r.inputTokens, this.events) : undefined));
  }

  // UpstreamHandler

  onHead(s: number, headers: HeaderLines): void {
    this.status = s;
    if (s !== 200) {
      this.errorParts = [];
      this.retryAfter = headers.get(RETRY_AFTER);
      return;
    }
    if (this.res.aborted) return;
    this.streaming = true;
    this.wrote = true;
    this.pinger = setInterval(() => this.ping(), pingTick(this.pingIntervalMs));
    this.pinger.unref();
    this.w.head(200, SSE_HEAD, this.r.decision!.headers);
    queueMicrotask(() => this.w.flush()); // the head goes out with the events of this read, or alone after it
  }

  onData(chunk: Buffer): boolean {
    if (this.errorParts) {
      if (this.errorSize < MAX_ERROR_BODY_BYTES) {
        this.errorParts.push(chunk);
        this.errorSize += chunk.length;
      }
      return true;
    }
    const w = this.w;
    if (w.isClosed) return true;
    this.parser.push(chunk);
    const t = this.t;
    if (t.done) {
      // message_stop or an error event: the client's stream is complete.
      this.endResponse('');
      if (!t.finished) this.call!.abort(); // an error: nothing more is wanted from the backend
      return true;
    }
    this.out += t.takeText();
    if (this.out !== '') {
      this.wrote = true;
      w.write(this.out);
      this.out = '';
    }
    return w.isFull ? w.pauseSource() : true;
  }

  onEnd(): void {
    if (this.errorParts) {
      const e = backendError(this.status, Buffer.concat(this.errorParts).toString('utf8'), this.retryAfter);
      sendError(this.res, e);
      this.w.finish(e.status, undefined);
      return;
    }
    this.parser.end();
    const t = this.t;
    // A stream that stops after its finish reason is complete, even without [DONE].
    if (!t.done) this.out += t.finished ? t.end() : t.fail('api_error', 'The model backend ended the stream early');
    this.endResponse('');
    // Not streaming: the client left before the backend's head.
    this.w.finish(this.streaming ? 200 : CLIENT_CLOSED, undefined);
  }

  onError(err: UpstreamError): void {
    if (err.kind === 'aborted') {
      this.w.finish(CLIENT_CLOSED, undefined);
      return;
    }
    if (this.streaming) {
      const message = err.kind === 'idle' ? 'The model backend stopped responding' : 'The connection to the model backend was lost';
      this.endResponse(this.t.fail('api_error', message));
      this.w.finish(200, undefined);
      return;
    }
    const e = upstreamUnavailable();
    sendError(this.res, e);
    this.w.finish(e.status, undefined);
  }

  /** Ends the response with the pending events and `text`, head first if it is still due. */
  private endResponse(text: string): void {
    if (this.pinger) clearInterval(this.pinger);
    const all = this.out + text;
    this.out = '';
    this.w.end(all);
  }

  private ping(): void {
    const w = this.w;
    if (w.isClosed) return;
    if (this.wrote) {
      this.wrote = false;
      this.quietTicks = 0;
      return;
    }
    if (++this.quietTicks < quietTicksToPing(this.pingIntervalMs)) return;
    this.quietTicks = 0;
    // Before message_start an SSE comment (ignored by every parser); after it, the protocol's ping.
    w.write(this.t.started ? PING_EVENT : KEEPALIVE_COMMENT);
  }
}

/** The ping timer's period for a ping interval: half of it, 10 ms at least. */
function pingTick(intervalMs: number): number {
  return Math.max(10, intervalMs >> 1);
}

/** Quiet ticks in a row that make a silence of at least `intervalMs` (2, or 1 below 20 ms). */
function quietTicksToPing(intervalMs: number): number {
  return Math.max(1, Math.ceil(intervalMs / pingTick(intervalMs)));
}
