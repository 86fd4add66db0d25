// rc-tunnel's connection: one WebSocket to the broker, public requests arriving as streams
// (lib/tunnel/protocol.ts) and replayed against the local service with node:http.
// Reconnects with backoff; stops for good when the broker refuses the identity.
import { Agent, request, type ClientRequest, type IncomingMessage } from 'node:http';
import WebSocket from 'ws';
import { RcError } from '../../lib/errors.js';
import {
  CLOSE_INSTANCE_GONE,
  decodeFrame,
  decodeWindow,
  encodeFrame,
  FrameType,
  isHeaderList,
  parseJson,
  type Hello,
  type RequestHead,
  type ResponseHead,
} from '../../lib/tunnel/protocol.js';

export type TunnelState = 'connecting' | 'connected' | 'disconnected' | 'failed' | 'stopped';

export interface TunnelStatus {
  state: TunnelState;
  port: number;
  broker: string;
  tunnelId?: string;
  publicUrl?: string;
  /** Why it failed or disconnected. */
  error?: string;
  /** Epoch ms of the last state change. */
  since: number;
}

export interface TunnelClientOptions {
  /** Broker base URL (http(s):// or ws(s)://). */
  broker: string;
  /** Empty: none sent (the agent's relay adds the instance's own). */
  token: string;
  /** Local port to expose. */
  port: number;
  /** Local host the service listens on. */
  targetHost?: string;
  log(line: string): void;
  onStatus(status: TunnelStatus): void;
  /** Longest wait between reconnect attempts. */
  maxBackoffMs?: number;
}

/** The broker refused this instance's identity (no reconnect). */
export class TunnelRefusedError extends RcError {
  constructor(message: string) {
    super('RC_ERR_TUNNEL_REFUSED', message, 403);
  }
}

/** ws(s)://host/tunnel/connect?port=P from the broker setting. */
export function connectUrl(broker: string, port: number): string {
  const u = new URL(broker);
  if (u.protocol === 'http:') u.protocol = 'ws:';
  else if (u.protocol === 'https:') u.protocol = 'wss:';
  else if (u.protocol !== 'ws:' && u.protocol !== 'wss:')
    throw new RcError('RC_ERR_TUNNEL_BROKER', `The broker setting must be an http(s) or ws(s) URL, got ${broker}`, 400);
  u.pathname = u.pathname.replace(/\/+$/, '') + '/tunnel/connect';
  u.search = `?port=${port}`;
  return u.toString();
}

interface LocalStream {
  req: ClientRequest;
  res?: IncomingMessage;
  headSent: boolean;
  /** Body bytes the broker still takes (its WINDOW grants), when it uses windows. */
  credit: number;
  /** Body read from the service beyond the credit, sent as grants arrive (the service is paused meanwhile). */
  backlog: Buffer[];
  /** The service's response ended: RESPONSE_END follows the backlog. */
  ended: boolean;
}

export class TunnelClient {
  private ws: WebSocket | undefined;
  private stopped = false;
  private backoffMs = 500;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private readonly streams = new Map<number, LocalStream>();
  /** The broker's per-stream window (hello `stream_window`); 0: a broker without windows (PAUSE/RESUME only). */
  private window = 0;
  private readonly agent = new Agent({ keepAlive: true, maxSockets: 64 });
  private status: TunnelStatus;
  private readonly url: string;
  /** Resolves when the client stops for good (stop() or a refusal). */
  readonly finished: Promise<void>;
  private finish!: () => void;

  constructor(private readonly o: TunnelClientOptions) {
    this.url = connectUrl(o.broker, o.port);
    this.status = { state: 'connecting', port: o.port, broker: o.broker, since: Date.now() };
    this.finished = new Promise((r) => (this.finish = r));
  }

  start(): void {
    this.connect();
  }

  stop(): void {
    if (this.stopped) return;
    this.stopped = true;
    if (this.reconnectTimer) clearTimeout(this.reconnectTimer);
    this.ws?.close(1000, 'rc-tunnel stopped');
    this.resetAll();
    this.agent.destroy();
    this.setStatus({ state: 'stopped' });
    this.finish();
  }

  private setStatus(patch: Partial<TunnelStatus>): void {
    this.status = { ...this.status, ...patch, since: Date.now() };
    this.o.onStatus(this.status);
  }

  private connect(): void {
    if (this.stopped) return;
    this.setStatus({ state: 'connecting', error: undefined });
    const ws = new WebSocket(this.url, {
      headers: this.o.token ? { authorization: `Bearer ${this.o.token}` } : {},
      handshakeTimeout: 10_000,
      maxPayload: 8 * 1024 * 1024,
    });
    this.ws = ws;
    let refused: string | undefined;
    /** A 429's Retry-After (a limit of the broker: limits.ts), waited at least before reconnecting. */
    let retryAfterMs = 0;
    ws.on('unexpected-response', (_req, res) => {
      const retryAfter = Number(res.headers['retry-after']);
      if (res.statusCode === 429 && Number.isFinite(retryAfter) && retryAfter > 0) retryAfterMs = Math.min(retryAfter, 3600) * 1000;
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const body = parseJson<{ detail?: unknown }>(Buffer.concat(parts));
        const detail = typeof body?.detail === 'string' ? body.detail : `HTTP ${res.statusCode}`;
        if (res.statusCode === 401 || res.statusCode === 403) refused = `The broker refused this instance's tunnel identity: ${detail}`;
        ws.emit('close', 1006, Buffer.from(detail));
        ws.terminate();
      });
    });
    ws.on('error', (err) => {
      this.o.log(`connection error: ${err.message}`);
    });
    ws.on('message', (data, isBinary) => this.onMessage(data as Buffer, isBinary));
    let closedOnce = false;
    ws.on('close', (code, reason) => {
      if (closedOnce || this.ws !== ws) return;
      closedOnce = true;
      this.resetAll();
      if (this.stopped) return;
      const why = reason.toString() || `code ${code}`;
      if (refused || code === CLOSE_INSTANCE_GONE) {
        const message = refused ?? `The broker closed the tunnel: ${why}`;
        this.o.log(message);
        this.stopped = true;
        this.agent.destroy();
        this.setStatus({ state: 'failed', error: message });
        this.finish();
        return;
      }
      const waitMs = Math.max(this.backoffMs, retryAfterMs);
      this.o.log(`disconnected (${why}); reconnecting in ${waitMs} ms`);
      this.setStatus({ state: 'disconnected', error: why });
      this.reconnectTimer = setTimeout(() => this.connect(), waitMs);
      this.backoffMs = Math.min(this.backoffMs * 2, this.o.maxBackoffMs ?? 30_000);
    });
  }

  private send(type: FrameType, stream: number, payload?: Uint8Array | string): void {
    const ws = this.ws;
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(encodeFrame(type, stream, payload));
  }

  private onMessage(data: Buffer, isBinary: boolean): void {
    if (!isBinary) {
      const hello = parseJson<Hello>(data);
      if (hello?.type === 'hello') {
        this.backoffMs = 500;
        this.window = typeof hello.stream_window === 'number' && hello.stream_window > 0 ? hello.stream_window : 0;
        this.o.log(`connected: ${hello.public_url} -> http://${this.o.targetHost ?? '127.0.0.1'}:${this.o.port}`);
        this.setStatus({ state: 'connected', tunnelId: hello.tunnel_id, publicUrl: hello.public_url, error: undefined });
      }
      return;
    }
    const frame = decodeFrame(data);
    if (!frame) return;
    const s = this.streams.get(frame.stream);
    switch (frame.type) {
      case FrameType.RequestHead: {
        const head = parseJson<RequestHead>(frame.payload);
        if (!head || typeof head.method !== 'string' || typeof head.path !== 'string' || !head.path.startsWith('/') || !isHeaderList(head.headers)) {
          this.send(FrameType.Reset, frame.stream);
          return;
        }
        this.open(frame.stream, head);
        return;
      }
      case FrameType.RequestBody:
        s?.req.write(Buffer.from(frame.payload));
        return;
      case FrameType.RequestEnd:
        s?.req.end();
        return;
      case FrameType.Pause:
        if (!this.window) s?.res?.pause(); // with windows, the credit paces the body
        return;
      case FrameType.Resume:
        if (!this.window) s?.res?.resume();
        return;
      case FrameType.Window:
        if (s) {
          s.credit += decodeWindow(frame.payload);
          this.sendBody(frame.stream, s);
        }
        return;
      case FrameType.Reset:
        if (s) {
          this.streams.delete(frame.stream);
          s.req.destroy();
        }
        return;
    }
  }

  /** Replays one public request against the local service. */
  private open(id: number, head: RequestHead): void {
    const host = this.o.targetHost ?? '127.0.0.1';
    const started = Date.now();
    let req: ClientRequest;
    try {
      req = request({ host, port: this.o.port, method: head.method, path: head.path, headers: head.headers, agent: this.agent });
    } catch (err) {
      this.failStream(id, undefined, `rc-tunnel could not send the request: ${(err as Error).message}`);
      return;
    }
    const s: LocalStream = { req, headSent: false, credit: this.window, backlog: [], ended: false };
    this.streams.set(id, s);
    req.on('response', (res) => {
      s.res = res;
      s.headSent = true;
      const out: ResponseHead = { status: res.statusCode ?? 502, headers: res.rawHeaders };
      this.send(FrameType.ResponseHead, id, JSON.stringify(out));
      res.on('data', (chunk: Buffer) => {
        if (!this.window) this.send(FrameType.ResponseBody, id, chunk);
        else {
          s.backlog.push(chunk);
          this.sendBody(id, s);
        }
      });
      res.on('end', () => {
        if (this.streams.get(id) !== s) return;
        s.ended = true;
        this.sendBody(id, s);
        this.o.log(`${head.method} ${head.path} ${res.statusCode} ${Date.now() - started}ms`);
      });
      res.on('error', () => this.failStream(id, s, 'the local response failed'));
    });
    req.on('error', (err) =>
      this.failStream(id, s, `nothing answers on http://${host}:${this.o.port} (${(err as NodeJS.ErrnoException).code ?? err.message})`),
    );
  }

  /** Sends what the stream's credit allows of its backlog (the service waits while some is left), then its end. */
  private sendBody(id: number, s: LocalStream): void {
    if (this.streams.get(id) !== s) return;
    while (s.backlog.length > 0 && s.credit > 0) {
      let chunk = s.backlog[0]!;
      if (chunk.length > s.credit) {
        s.backlog[0] = chunk.subarray(s.credit);
        chunk = chunk.subarray(0, s.credit);
      } else s.backlog.shift();
      s.credit -= chunk.length;
      this.send(FrameType.ResponseBody, id, chunk);
    }
    if (s.backlog.length > 0) s.res?.pause();
    else if (s.ended) {
      this.streams.delete(id);
      this.send(FrameType.ResponseEnd, id);
    } else s.res?.resume();
  }

  private failStream(id: number, s: LocalStream | undefined, message: string): void {
    if (s && this.streams.get(id) !== s) return; // ended or reset already
    this.streams.delete(id);
    if (s?.headSent) {
      this.send(FrameType.Reset, id);
    } else {
      const body = JSON.stringify({ detail: `rc-tunnel: ${message}` });
      this.send(FrameType.ResponseHead, id, JSON.stringify({ status: 502, headers: ['content-type', 'application/json'] } satisfies ResponseHead));
      this.send(FrameType.ResponseBody, id, body);
      this.send(FrameType.ResponseEnd, id);
    }
    this.o.log(`request failed: ${message}`);
  }

  private resetAll(): void {
    for (const s of this.streams.values()) s.req.destroy();
    this.streams.clear();
  }
}
