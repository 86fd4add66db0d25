// A streaming /v1/messages exchange: the backend's chat-completions SSE in, the messages
// protocol's SSE out, chunk by chunk as it arrives. Backpressure both ways (a slow client pauses
// the backend), pings while the backend is silent, and a client that goes away aborts the
// backend request. The gate is settled exactly once, with the usage the backend reported.
//
// Writes go through the response writer (lib/relay/response-writer.ts), which batches the events
// of one backend read into one corked write, so one socket send per backend read, not one per
// chunk. The response head waits for that same write (it goes out with the first events when
// they came in the same read as the backend's head, else alone right after that read).
import { relayedUsage } from '../usage.js';
import { MAX_ERROR_BODY_BYTES } from '../backends/backend-error.js';
import type { Res } from '../../lib/http.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { GatewayContext } from '../context.js';
import type { GateUsage } from '../gates/gate.js';
import { ResponseWriter, type WriterHooks } from '../../lib/relay/response-writer.js';
import type { UpstreamCall, UpstreamError, UpstreamHandler } from '../backends/upstreams.js';
import type { HeaderLines } from '../../lib/relay/http-pool.js';
import { backendError, MessagesError } from './errors.js';
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

/** The backend's Retry-After, kept on a relayed 429 or 503. */
const RETRY_AFTER = Buffer.from('retry-after');

export function relayStream(res: Res, ctx: GatewayContext, o: RelayOptions): void {
  const relay = new MessagesStreamRelay(res, ctx, o);
  relay.call = ctx.upstreams.send(o.model, o.stickyKey, o.body, relay);
}

/** The response head of a messages stream (the gate's headers are added by the writer). */
const SSE_HEAD: readonly string[] = ['content-type', 'text/event-stream; charset=utf-8', 'cache-control', 'no-cache', 'x-accel-buffering', 'no'];

/** The messages body transform: chat-completions SSE in, messages events out, through the response writer. */
class MessagesStreamRelay implements UpstreamHandler, WriterHooks<GateUsage> {
  call: UpstreamCall | undefined;
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
  private lastWrite = 0;
  private pinger: NodeJS.Timeout | undefined;

  constructor(
    readonly res: Res,
    private readonly ctx: GatewayContext,
    private readonly o: RelayOptions,
  ) {
    this.w = new ResponseWriter(res, this, { metrics: ctx.metrics });
    const t = new StreamTranslator({ model: o.model.name, signer: o.signer, thinking: o.thinking, inputTokens: o.inputTokensEstimate });
    this.t = t;
    this.parser = new SseParser((data) => {
      this.events++;
      this.out += t.pushData(data);
    });
  }

  // WriterHooks

  onAbort(): void {
    this.call?.abort(); // the exchange then reports 'aborted' and onError finishes
  }

  onDrain(): void {
    this.call?.resume();
  }

  onFinish(): void {
    if (this.pinger) clearInterval(this.pinger);
    if (this.streaming) this.ctx.metrics.request(this.o.route, this.o.model.name, 200);
    // The backend's running count (continuous usage) when it reports one; else, for a stream
    // that was relayed, the input estimate plus one output token per relayed backend event.
    const reported = this.t.reportedUsage;
    this.o.settle(reported ?? (this.streaming ? relayedUsage(this.o.inputTokensEstimate, this.events) : undefined));
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
    this.lastWrite = Date.now();
    const every = this.o.pingIntervalMs;
    this.pinger = setInterval(() => this.ping(), Math.max(10, every >> 1));
    this.pinger.unref();
    this.w.head(200, SSE_HEAD, this.o.headers);
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
    if (this.out !== '') {
      this.lastWrite = Date.now();
      w.write(this.out);
      this.out = '';
    }
    return w.isFull ? w.pauseSource() : true;
  }

  onEnd(): void {
    if (this.errorParts) {
      sendError(
        this.res,
        this.ctx,
        this.o.route,
        this.o.model.name,
        backendError(this.status, Buffer.concat(this.errorParts).toString('utf8'), this.retryAfter),
      );
      this.w.finish(this.status, undefined);
      return;
    }
    this.parser.end();
    const t = this.t;
    // A stream that stops after its finish reason is complete, even without [DONE].
    if (!t.done) this.out += t.finished ? t.end() : t.fail('api_error', 'The model backend ended the stream early');
    this.endResponse('');
    this.w.finish(this.status, undefined);
  }

  onError(err: UpstreamError): void {
    if (err.kind !== 'aborted') {
      if (!this.streaming) sendError(this.res, this.ctx, this.o.route, this.o.model.name, new MessagesError(502, 'Model gateway is unavailable'));
      else {
        const message = err.kind === 'idle' ? 'The model backend stopped responding' : 'The connection to the model backend was lost';
        this.endResponse(this.t.fail('api_error', message));
      }
    }
    this.w.finish(this.status, undefined);
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
    if (w.isClosed || Date.now() - this.lastWrite < this.o.pingIntervalMs) return;
    // Before message_start an SSE comment (ignored by every parser); after it, the protocol's ping.
    this.lastWrite = Date.now();
    w.write(this.t.started ? PING_EVENT : KEEPALIVE_COMMENT);
  }
}
