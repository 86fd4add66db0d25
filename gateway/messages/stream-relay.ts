// A streaming /v1/messages exchange: the backend's chat-completions SSE in, the messages
// protocol's SSE out, chunk by chunk as it arrives. Backpressure both ways (a slow client pauses
// the backend), pings while the backend is silent, and a client that goes away aborts the
// backend request. The gate is settled exactly once, with the usage the backend reported.
import type { Res } from '../../lib/http.js';
import type { ModelState } from '../catalog.js';
import type { GatewayContext } from '../context.js';
import type { GateUsage } from '../gate.js';
import type { UpstreamError } from '../upstreams.js';
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
  const t = new StreamTranslator({ model: o.model.name, signer: o.signer, thinking: o.thinking, inputTokens: o.inputTokensEstimate });
  let out = '';
  const parser = new SseParser((data) => { out += t.pushData(data); });
  let status = 0;
  let errorParts: Buffer[] | undefined;
  let retryAfter: string | undefined;
  let errorSize = 0;
  let headWritten = false;
  let ended = false;
  let finished = false;
  let paused = false;
  let lastWrite = 0;
  let pinger: NodeJS.Timeout | undefined;

  const write = (text: string): boolean => {
    if (res.aborted || ended) return true;
    let ok = true;
    res.cork(() => { ok = res.write(text); });
    lastWrite = Date.now();
    return ok;
  };
  const endResponse = (text: string) => {
    if (ended) return;
    ended = true;
    if (pinger) clearInterval(pinger);
    if (res.aborted) return;
    res.aborted = true; // nothing may touch the response after end
    res.cork(() => res.end(text));
  };
  const finish = () => {
    if (finished) return;
    finished = true;
    if (pinger) clearInterval(pinger);
    res.onAbort = undefined;
    if (headWritten) ctx.metrics.request(o.route, o.model.name, 200);
    o.settle(t.reportedUsage);
  };
  const ping = () => {
    if (ended || res.aborted || Date.now() - lastWrite < o.pingIntervalMs) return;
    // Before message_start an SSE comment (ignored by every parser); after it, the protocol's ping.
    write(t.started ? PING_EVENT : KEEPALIVE_COMMENT);
  };

  const call = ctx.upstreams.send(o.model, o.stickyKey, o.body, {
    onHead(s, raw) {
      status = s;
      if (s !== 200) {
        errorParts = [];
        retryAfter = rawHeader(raw, 'retry-after');
        return;
      }
      if (res.aborted) return;
      res.cork(() => {
        res.writeStatus('200 OK');
        res.writeHeader('content-type', 'text/event-stream; charset=utf-8');
        res.writeHeader('cache-control', 'no-cache');
        res.writeHeader('x-accel-buffering', 'no');
        for (const k in o.headers) res.writeHeader(k, o.headers[k]!);
      });
      headWritten = true;
      lastWrite = Date.now();
      pinger = setInterval(ping, Math.max(10, o.pingIntervalMs >> 1));
      pinger.unref();
    },
    onData(chunk) {
      if (errorParts) {
        if (errorSize < MAX_ERROR_BYTES) {
          errorParts.push(chunk);
          errorSize += chunk.length;
        }
        return true;
      }
      if (ended || res.aborted) return true;
      parser.push(chunk);
      if (out === '') return true;
      const text = out;
      out = '';
      if (t.done) {
        // message_stop or an error event: the client's stream is complete.
        endResponse(text);
        if (!t.finished) call.abort(); // an error: nothing more is wanted from the backend
        return true;
      }
      if (write(text)) return true;
      paused = true;
      return false;
    },
    onEnd() {
      if (errorParts) {
        sendError(res, ctx, o.route, o.model.name, backendError(status, Buffer.concat(errorParts).toString('utf8'), retryAfter));
        finish();
        return;
      }
      parser.end();
      // A stream that stops after its finish reason is complete, even without [DONE].
      if (!t.done) out += t.finished ? t.end() : t.fail('api_error', 'The model backend ended the stream early');
      endResponse(out);
      out = '';
      finish();
    },
    onError(err: UpstreamError) {
      if (err.kind !== 'aborted') {
        if (!headWritten) sendError(res, ctx, o.route, o.model.name, new MessagesError(502, 'Model gateway is unavailable'));
        else {
          const message = err.kind === 'idle' ? 'The model backend stopped responding' : 'The connection to the model backend was lost';
          endResponse(out + t.fail('api_error', message));
        }
      }
      finish();
    },
  });

  res.onAbort = () => call.abort(); // the exchange then reports 'aborted' and finish() runs
  res.onWritable(() => {
    if (paused) {
      paused = false;
      call.resume();
    }
    return true;
  });
}
