// One rc-tunnel connection, seen from the broker: its WebSocket, the public requests relayed over
// it as multiplexed streams (lib/tunnel/protocol.ts), their flow control (credit.ts) and the ping
// that tells whether it is still alive.
import type { Upload } from '../../lib/upload-limits.js';
import type { Res } from '../../lib/http.js';
import type { ResponseRelay } from '../../lib/relay/forward.js';
import { encodeFrame, FrameType } from '../../lib/tunnel/protocol.js';
import type { WebSocket } from '../../lib/uws.js';
import { TunnelCredit } from './credit.js';
import type { TunnelSlot } from './limits.js';

/** What the upgrade learned about a connection (the WebSocket's user data). */
export interface ConnData {
  instanceId: string;
  port: number;
  tunnelId: string;
  publicUrl: string;
  /** What the connection holds against the broker's limits (limits.ts), freed when it closes. */
  slot: TunnelSlot;
}

/** One public request relayed over a tunnel. */
export class Stream {
  /** The broker sent PAUSE (the public client is full) and no RESUME since. */
  paused = false;
  /** The public request body is paused (the tunnel's socket is backed up). */
  uploadPaused = false;
  /** Response bytes held for the public client when last counted (part of the tunnel's total). */
  held = 0;
  /** Body bytes received while the public client was full: credit returned (WINDOW) when it drains. */
  owed = 0;
  /** The public request body's place in the gateway's upload counts while it arrives (public-side.ts). */
  upload: Upload | undefined;

  constructor(
    readonly id: number,
    readonly relay: ResponseRelay,
    readonly res: Res,
  ) {}
}

export class Tunnel {
  closed = false;
  private nextStream = 0;
  readonly streams = new Map<number, Stream>();
  readonly credit: TunnelCredit;
  private probe: { token: string; done: (alive: boolean) => void; result: Promise<boolean> } | undefined;
  private probes = 0;

  constructor(
    readonly ws: WebSocket<ConnData>,
    readonly data: ConnData,
    streamLimit: number,
    tunnelLimit: number,
  ) {
    this.credit = new TunnelCredit(this, streamLimit, tunnelLimit);
  }

  send(type: FrameType, stream: number, payload?: Uint8Array | string): void {
    if (this.closed) return;
    try {
      this.ws.send(encodeFrame(type, stream, payload), true);
    } catch {
      // closed under us (backpressure limit): the close handler fails the streams
    }
  }

  /** Closes the socket; the close handler then fails the streams still open. */
  end(code: number, reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.settleProbe(false);
    try {
      this.ws.end(code, reason);
    } catch {
      // closed already
    }
  }

  open(relay: ResponseRelay, res: Res): Stream {
    do this.nextStream = (this.nextStream + 1) >>> 0 || 1;
    while (this.streams.has(this.nextStream));
    const s = new Stream(this.nextStream, relay, res);
    this.streams.set(s.id, s);
    return s;
  }

  /** The stream has ended, failed or was abandoned: its bytes no longer count. */
  forget(s: Stream): void {
    if (this.streams.get(s.id) !== s) return;
    this.streams.delete(s.id);
    this.credit.release(s);
  }

  /** Resets a stream both ways: RESET to the tunnel client; `status` with `{detail}`, or a cut connection once the response started, to the public client. */
  reset(s: Stream, detail: string, status = 502, headers?: Record<string, string>): void {
    this.forget(s);
    this.send(FrameType.Reset, s.id);
    s.relay.fail(status, detail, headers);
  }

  /** The socket closed (any reason): nothing more is sent, a pending probe fails, the streams still open fail. */
  onClosed(): void {
    this.closed = true;
    this.settleProbe(false);
    const open = [...this.streams.values()];
    this.streams.clear();
    this.credit.held = 0;
    for (const s of open) s.relay.fail(502, 'The tunnel disconnected');
  }

  /** True when the connection answers a ping within `timeoutMs` (one probe at a time, shared). */
  isAlive(timeoutMs: number): Promise<boolean> {
    if (this.closed) return Promise.resolve(false);
    if (this.probe) return this.probe.result;
    const token = `rc-probe-${++this.probes}`;
    let done!: (alive: boolean) => void;
    const result = new Promise<boolean>((r) => (done = r));
    const timer = setTimeout(() => this.settleProbe(false), timeoutMs);
    timer.unref();
    this.probe = {
      token,
      result,
      done: (alive) => {
        clearTimeout(timer);
        done(alive);
      },
    };
    try {
      this.ws.ping(token);
    } catch {
      this.settleProbe(false);
    }
    return result;
  }

  /** A pong arrived: settles the probe it answers. */
  onPong(message: ArrayBuffer): void {
    if (this.probe && Buffer.from(message).toString() === this.probe.token) this.settleProbe(true);
  }

  private settleProbe(alive: boolean): void {
    const p = this.probe;
    if (!p) return;
    this.probe = undefined;
    p.done(alive);
  }
}
