// The floor of a relay on our runtime, for the benchmarks only (issue 16): uWebSockets.js in front,
// keep-alive net sockets to the backend, and nothing else. No key, no JSON, no catalog, no gate,
// no usage, no hop-by-hop filtering, no timeouts: the body goes to the backend as it came, the
// response comes back with its status, content type and body (de-chunked, written as it
// arrives). What the gateway costs above this row is what its own work costs; what this row
// costs above nginx is what Node, V8 and uWS cost for the same two HTTP exchanges.
//
//   node dist/bench/floor-relay.js <backend URL>     prints {"url": ...} once listening
import * as net from 'node:net';
import { uws } from '../lib/uws.js';
import type { HttpResponse } from '../lib/uws.js';

const backend = new URL(process.argv[2] ?? 'http://127.0.0.1:8000');
const CRLF2 = Buffer.from('\r\n\r\n');
const READ_BUFFER = Buffer.allocUnsafeSlow(64 * 1024);

/** One request in flight on a backend socket: the response's parse state. */
interface Exchange {
  res: HttpResponse;
  aborted: boolean;
  /** The backend's status line and content type, written with the first body bytes (one send). */
  status: string;
  type: string;
  headWritten: boolean;
  /** Bytes of an unfinished head or chunk-size line. */
  pending: Buffer | undefined;
  headDone: boolean;
  /** Content-Length body: bytes left; chunked: -1. */
  left: number;
  /** Chunked: bytes left in the current chunk. */
  chunkLeft: number;
  /** Chunked: bytes of the CRLF after a chunk's data still to skip. */
  skip: number;
}

class BackendSocket {
  readonly socket: net.Socket;
  x: Exchange | undefined;

  constructor() {
    this.socket = net.connect({
      host: backend.hostname,
      port: Number(backend.port),
      onread: {
        buffer: READ_BUFFER,
        callback: (n: number) => {
          const copy = Buffer.allocUnsafe(n);
          READ_BUFFER.copy(copy, 0, 0, n);
          this.onBytes(copy);
          return true;
        },
      },
    });
    this.socket.setNoDelay(true);
    this.socket.on('error', () => {});
  }

  private onBytes(input: Buffer): void {
    const x = this.x;
    if (!x) return;
    let buf = x.pending ? Buffer.concat([x.pending, input]) : input;
    x.pending = undefined;
    let i = 0;
    if (!x.headDone) {
      const end = buf.indexOf(CRLF2);
      if (end < 0) {
        x.pending = buf;
        return;
      }
      const head = buf.toString('latin1', 0, end).toLowerCase();
      const status = head.slice(9, 12);
      const typeAt = head.indexOf('\r\ncontent-type:');
      const type = typeAt < 0 ? 'application/json' : head.slice(typeAt + 15, head.indexOf('\r\n', typeAt + 2) >>> 0).trim();
      const lengthAt = head.indexOf('\r\ncontent-length:');
      x.left = lengthAt < 0 ? -1 : Number.parseInt(head.slice(lengthAt + 17), 10);
      x.headDone = true;
      x.status = status;
      x.type = type;
      i = end + 4;
    }
    if (x.left >= 0) {
      const body = buf.subarray(i, i + x.left);
      x.left -= body.length;
      deliver(x, body, x.left === 0);
      if (x.left === 0) this.done();
      return;
    }
    // Chunked: relay each chunk's data; a zero-size chunk ends the response.
    const parts: Buffer[] = [];
    while (i < buf.length) {
      if (x.skip > 0) {
        const n = Math.min(x.skip, buf.length - i);
        x.skip -= n;
        i += n;
        continue;
      }
      if (x.chunkLeft > 0) {
        const take = Math.min(x.chunkLeft, buf.length - i);
        parts.push(buf.subarray(i, i + take));
        x.chunkLeft -= take;
        i += take;
        if (x.chunkLeft === 0) x.skip = 2; // the CRLF after the data
        continue;
      }
      const lf = buf.indexOf(0x0a, i);
      if (lf < 0) {
        x.pending = buf.subarray(i);
        break;
      }
      const size = Number.parseInt(buf.toString('latin1', i, lf), 16);
      i = lf + 1;
      if (size === 0) {
        deliver(x, parts.length === 1 ? parts[0] : Buffer.concat(parts), true);
        this.done();
        return;
      }
      x.chunkLeft = size;
    }
    buf = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    if (buf.length > 0) deliver(x, buf, false);
  }

  private done(): void {
    this.x = undefined;
    idle.push(this);
  }
}

/** Writes `body` (and the head, the first time) in one cork, so one send; `last` ends the response. */
function deliver(x: Exchange, body: Buffer | undefined, last: boolean): void {
  if (x.aborted) return;
  x.res.cork(() => {
    if (!x.headWritten) {
      x.headWritten = true;
      x.res.writeStatus(x.status).writeHeader('content-type', x.type);
    }
    if (last) x.res.end(body);
    else if (body) x.res.write(body);
  });
}

const idle: BackendSocket[] = [];
const headPrefix = `POST PATH HTTP/1.1\r\nhost: ${backend.host}\r\ncontent-type: application/json\r\ncontent-length: `;

const app = uws().App();
app.post('/*', (res, req) => {
  const path = req.getUrl();
  const x: Exchange = { res, aborted: false, status: '', type: '', headWritten: false, pending: undefined, headDone: false, left: -1, chunkLeft: 0, skip: 0 };
  res.onAborted(() => {
    x.aborted = true;
  });
  const parts: Buffer[] = [];
  res.onData((chunk, last) => {
    parts.push(Buffer.from(chunk.slice(0)));
    if (!last) return;
    const body = parts.length === 1 ? parts[0]! : Buffer.concat(parts);
    const s = idle.pop() ?? new BackendSocket();
    s.x = x;
    s.socket.write(Buffer.concat([Buffer.from(`${headPrefix.replace('PATH', path)}${body.length}\r\n\r\n`, 'latin1'), body]));
  });
});
app.listen('127.0.0.1', 0, (listenSocket) => {
  if (!listenSocket) process.exit(1);
  process.stdout.write(`${JSON.stringify({ url: `http://127.0.0.1:${uws().us_socket_local_port(listenSocket)}` })}\n`);
});
process.on('SIGTERM', () => process.exit(0));
