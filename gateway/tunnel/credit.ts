// Flow control of a tunnel (one rc-tunnel connection): response bodies flow against per-stream
// credit (WINDOW, `stream_window` in the hello) returned as the public client takes the bytes; a
// public client that does not read also makes the broker send PAUSE (for clients without
// windows). Whatever the tunnel client does, a full stream holding more than `streamBufferBytes`
// is reset, and while a tunnel's streams hold more than `tunnelBufferBytes` the largest are reset.
// Public request bodies pause while the tunnel's socket has more than UPLOAD_PAUSE_BYTES queued.
import { encodeWindow, FrameType } from '../../lib/tunnel/protocol.js';
import type { Stream, Tunnel } from './connection.js';

/** Response body bytes a stream may send ahead of the broker's WINDOW grants (rc-tunnel with windows keeps to it). */
export const STREAM_WINDOW_BYTES = 1024 * 1024;
/**
 * Bytes one stream may hold once its public client stops reading (after PAUSE); past it the
 * stream is reset. A client that keeps to its window holds at most the window and the bytes
 * granted just before the public client filled up (one frame), well below it.
 */
export const STREAM_BUFFER_BYTES = 2 * 1024 * 1024;
/** Bytes all streams of one tunnel may hold; past it the largest streams are reset. */
export const TUNNEL_BUFFER_BYTES = 16 * 1024 * 1024;
/** Bytes queued toward rc-tunnel beyond which public request bodies pause until the socket drains. */
export const UPLOAD_PAUSE_BYTES = 1024 * 1024;

/** The credit and the bounds of one tunnel's streams. */
export class TunnelCredit {
  /** Sum of the streams' `held`. */
  held = 0;
  /** Streams reset because their public client did not read (per-stream or per-tunnel bound). */
  overflowResets = 0;

  constructor(
    private readonly tunnel: Tunnel,
    private readonly streamLimit: number,
    private readonly tunnelLimit: number,
  ) {}

  /** A response body chunk of `s` from the tunnel, relayed to its public client. */
  body(s: Stream, payload: Buffer): void {
    // The message buffer is only valid during this callback: copy the chunk. Taken while the
    // public client keeps up: its credit goes straight back; otherwise it is owed until the
    // client drains.
    if (s.relay.data(Buffer.from(payload))) this.tunnel.send(FrameType.Window, s.id, encodeWindow(payload.length));
    else {
      s.owed += payload.length;
      if (!s.paused) {
        s.paused = true;
        this.tunnel.send(FrameType.Pause, s.id);
      }
    }
    this.account(s);
  }

  /** The public client of `s` took what it was given: the owed credit goes back, then RESUME. */
  drained(s: Stream): void {
    s.paused = false;
    if (s.owed > 0) this.tunnel.send(FrameType.Window, s.id, encodeWindow(s.owed));
    s.owed = 0;
    this.tunnel.send(FrameType.Resume, s.id);
    this.account(s);
  }

  /** The stream has ended, failed or was abandoned: its bytes no longer count. */
  release(s: Stream): void {
    this.held -= s.held;
    s.held = 0;
  }

  /**
   * Recounts what a stream holds after it took a chunk or drained, and enforces the bounds:
   * a paused stream past `streamLimit` is reset; while the tunnel's total is past `tunnelLimit`
   * its largest stream is reset.
   */
  account(s: Stream): void {
    const streams = this.tunnel.streams;
    if (streams.get(s.id) !== s) return;
    const now = s.relay.heldBytes;
    this.held += now - s.held;
    s.held = now;
    if (s.paused && now > this.streamLimit) {
      this.overflowResets++;
      this.tunnel.reset(s, `The public client is not reading and the tunnel sent more than ${this.streamLimit} bytes ahead of it`);
    }
    while (this.held > this.tunnelLimit) {
      let largest: Stream | undefined;
      for (const x of streams.values()) if (!largest || x.held > largest.held) largest = x;
      if (!largest) break;
      this.overflowResets++;
      this.tunnel.reset(largest, `The tunnel holds more than ${this.tunnelLimit} bytes for clients that are not reading`);
    }
  }

  /** A public request body chunk of `s` went to the tunnel: its body pauses while the socket is backed up. */
  uploaded(s: Stream): void {
    const t = this.tunnel;
    if (!t.closed && !s.uploadPaused && t.ws.getBufferedAmount() > UPLOAD_PAUSE_BYTES) {
      s.uploadPaused = true;
      s.res.pause();
    }
  }

  /** The socket to the tunnel client drained: public request bodies that paused flow again. */
  resumeUploads(): void {
    if (this.tunnel.ws.getBufferedAmount() >= UPLOAD_PAUSE_BYTES) return;
    for (const s of this.tunnel.streams.values()) {
      if (!s.uploadPaused) continue;
      s.uploadPaused = false;
      if (!s.res.aborted && !s.relay.finished) s.res.resume();
    }
  }
}
