// Exactly N requests over C keep-alive connections, each connection sending its next request when
// the previous response has ended: a load whose size is known, so that an instruction count can be
// divided by it (wrk runs for a time, not a count). Responses are framed by Content-Length or by
// the chunked terminator; anything else is not something our targets send.
import * as net from 'node:net';
import type { LoadRequest } from '../load.js';

export interface ExactRun {
  /** Responses read in all. */
  done: number;
  /** Responses whose status was not 2xx. */
  failed: number;
  /** The first non-2xx response's head and start of body, to say what went wrong. */
  firstFailure: string | undefined;
}

const CRLF2 = Buffer.from('\r\n\r\n');
const LAST_CHUNK = Buffer.from('\r\n0\r\n\r\n');

/** The request as raw HTTP/1.1 bytes, for `url`'s host. */
export function rawRequest(url: URL, request: LoadRequest): Buffer {
  const body = request.body ?? '';
  let head = `${request.method} ${request.path} HTTP/1.1\r\nhost: ${url.host}\r\n`;
  for (const [k, v] of Object.entries(request.headers ?? {})) head += `${k}: ${v}\r\n`;
  if (request.method === 'POST') head += `content-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n`;
  return Buffer.from(`${head}\r\n${body}`);
}

/** The length of the first whole response in `buf`, or -1 while it is incomplete. */
export function responseLength(buf: Buffer): number {
  const headEnd = buf.indexOf(CRLF2);
  if (headEnd < 0) return -1;
  const head = buf.toString('latin1', 0, headEnd);
  const length = /\r\ncontent-length:[ \t]*(\d+)/i.exec(head);
  if (length) {
    const end = headEnd + 4 + Number(length[1]);
    return buf.length >= end ? end : -1;
  }
  if (!/\r\ntransfer-encoding:[ \t]*chunked/i.test(head)) throw new Error(`A response neither sized nor chunked: ${head}`);
  const last = buf.indexOf(LAST_CHUNK, headEnd + 2);
  return last < 0 ? -1 : last + LAST_CHUNK.length;
}

/** Sends `total` requests over `connections` connections to `url`; resolves when every response has ended. */
export function sendExactly(url: string, request: LoadRequest, total: number, connections: number): Promise<ExactRun> {
  const u = new URL(url);
  const bytes = rawRequest(u, request);
  const run: ExactRun = { done: 0, failed: 0, firstFailure: undefined };
  let sent = 0;
  return new Promise((resolve, reject) => {
    const open = Math.max(1, Math.min(connections, total));
    let closed = 0;
    for (let i = 0; i < open; i++) {
      const socket = net.connect(Number(u.port), u.hostname);
      socket.setNoDelay(true);
      let pending: Buffer = Buffer.alloc(0);
      const next = (): void => {
        if (sent < total) {
          sent++;
          socket.write(bytes);
        } else socket.end();
      };
      socket.on('connect', next);
      socket.on('data', (data: Buffer) => {
        pending = pending.length ? Buffer.concat([pending, data]) : data;
        for (;;) {
          const n = responseLength(pending);
          if (n < 0) return;
          if (pending[9] !== 0x32) {
            run.failed++;
            run.firstFailure ??= pending.toString('latin1', 0, Math.min(n, 400));
          }
          pending = pending.subarray(n);
          run.done++;
          next();
        }
      });
      socket.on('error', reject);
      socket.on('close', () => {
        if (++closed < open) return;
        if (run.done === total) resolve(run);
        else reject(new Error(`Connections closed after ${run.done} of ${total} responses`));
      });
    }
  });
}
