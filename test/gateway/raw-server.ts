// A scripted raw HTTP/1.1 backend for the gateway's tests: a TCP server that parses each request
// (head + Content-Length body) and hands it to the test, which writes exactly the bytes the case
// needs (split heads, chunk extensions, trailers, early closes, garbage).
import { createServer, type Server, type Socket } from 'node:net';

export interface ReceivedRequest {
  head: string;
  body: Buffer;
  socket: Socket;
  index: number;
}

/** A TCP server that parses requests (head + Content-Length body) and hands each to `onRequest`. */
export async function rawServer(
  onRequest: (r: ReceivedRequest) => void,
): Promise<{ port: number; url: string; connections: () => number; requests: ReceivedRequest[]; close(): Promise<void> }> {
  let connections = 0;
  const requests: ReceivedRequest[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    connections++;
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
    socket.on('error', () => {});
    let pending = Buffer.alloc(0);
    socket.on('data', (d: Buffer) => {
      pending = Buffer.concat([pending, d]);
      for (;;) {
        const end = pending.indexOf('\r\n\r\n');
        if (end < 0) return;
        const head = pending.subarray(0, end).toString('latin1');
        const length = Number(/content-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (pending.length < end + 4 + length) return;
        const body = Buffer.from(pending.subarray(end + 4, end + 4 + length));
        pending = pending.subarray(end + 4 + length);
        const r = { head, body, socket, index: requests.length };
        requests.push(r);
        onRequest(r);
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    connections: () => connections,
    requests,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
