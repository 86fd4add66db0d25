// The tunnel wire protocol, spoken over one WebSocket between rc-tunnel (in the instance) and the
// broker (on the gateway). Public requests are multiplexed as streams:
//
//   binary frame = type (1 byte) | stream id (uint32 BE) | payload
//
//   broker -> rc-tunnel: REQUEST_HEAD (JSON RequestHead), REQUEST_BODY (bytes), REQUEST_END,
//                        PAUSE / RESUME (the public client is slow: stop / restart the body), RESET,
//                        WINDOW (uint32 BE: more response body bytes the stream may send)
//   rc-tunnel -> broker: RESPONSE_HEAD (JSON ResponseHead), RESPONSE_BODY (bytes), RESPONSE_END, RESET
//
// Flow control of response bodies: a broker that announces `stream_window` in its hello gives
// each stream that many bytes of credit; rc-tunnel sends no more body than it has credit for,
// and the broker returns credit (WINDOW) as the public client takes the bytes. PAUSE and RESUME
// remain for clients without windows; they cannot bound what is already in flight, so the
// broker resets a stream that runs more than its buffer bound ahead of its public client.
//
// Text frames carry control messages as JSON: the broker's `hello` after the upgrade.

/** WebSocket close codes the broker closes a tunnel with (rc-tunnel stops reconnecting on 4003). */
export const CLOSE_REPLACED = 4000;
export const CLOSE_INSTANCE_GONE = 4003;
export const CLOSE_SHUTDOWN = 1001;

export const FrameType = {
  RequestHead: 1,
  RequestBody: 2,
  RequestEnd: 3,
  ResponseHead: 4,
  ResponseBody: 5,
  ResponseEnd: 6,
  Reset: 7,
  Pause: 8,
  Resume: 9,
  Window: 10,
} as const;
export type FrameType = (typeof FrameType)[keyof typeof FrameType];

const HEADER = 5;

export interface Frame {
  type: number;
  stream: number;
  payload: Buffer;
}

export interface RequestHead {
  method: string;
  /** Path (below the tunnel prefix) and query. */
  path: string;
  /** Flat name, value list. */
  headers: string[];
}

export interface ResponseHead {
  status: number;
  headers: string[];
}

/** Sent by the broker once the tunnel is up. */
export interface Hello {
  type: 'hello';
  tunnel_id: string;
  public_url: string;
  instance_id: string;
  port: number;
  /** Response body bytes a stream may send ahead of the broker's WINDOW grants (absent: no windows, PAUSE/RESUME only). */
  stream_window?: number;
}

/** One frame in a fresh buffer (the payload is copied in). */
export function encodeFrame(type: FrameType, stream: number, payload?: Uint8Array | string): Buffer {
  const body = typeof payload === 'string' ? Buffer.from(payload) : payload;
  const buf = Buffer.allocUnsafe(HEADER + (body ? body.byteLength : 0));
  buf[0] = type;
  buf.writeUInt32BE(stream >>> 0, 1);
  if (body) buf.set(body, HEADER);
  return buf;
}

/** Parses a frame; the payload is a view of `data` (copy it to keep it). Undefined when malformed. */
export function decodeFrame(data: Uint8Array): Frame | undefined {
  if (data.byteLength < HEADER) return undefined;
  const buf = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  return { type: buf[0]!, stream: buf.readUInt32BE(1), payload: buf.subarray(HEADER) };
}

/** Parses a JSON payload; undefined when it is not an object. */
export function parseJson<T>(payload: Buffer): T | undefined {
  try {
    const v: unknown = JSON.parse(payload.toString('utf8'));
    return v !== null && typeof v === 'object' ? (v as T) : undefined;
  } catch {
    return undefined;
  }
}

/** True when `h` is a flat list of strings of even length. */
export function isHeaderList(h: unknown): h is string[] {
  return Array.isArray(h) && h.length % 2 === 0 && h.length <= 512 && h.every((x) => typeof x === 'string');
}

/** The payload of a WINDOW frame: `bytes` more of credit. */
export function encodeWindow(bytes: number): Buffer {
  const b = Buffer.allocUnsafe(4);
  b.writeUInt32BE(bytes >>> 0, 0);
  return b;
}

/** The credit a WINDOW frame's payload grants (0 when malformed). */
export function decodeWindow(payload: Buffer): number {
  return payload.length === 4 ? payload.readUInt32BE(0) : 0;
}
