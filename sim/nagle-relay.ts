// A TCP relay that keeps Nagle's algorithm on towards the clients: the sim's `noDelay: false`
// (`rc sim --no-tcp-nodelay`). uWS sets TCP_NODELAY on every socket it accepts and offers no way
// to turn it off, so a backend that leaves Nagle on (Python's http.server, a cpp-httplib build
// without CPPHTTPLIB_TCP_NODELAY) is modelled by a node:net listener in front of the uWS one:
// each client connection gets its own connection to uWS (loopback, TCP_NODELAY on, so uWS's
// writes reach the relay at once), and every chunk uWS sends is written to the client as its own
// write on a socket with `setNoDelay(false)`. A small write that follows another unacknowledged
// one then waits in the kernel for the client's (delayed) ACK, up to ~40 ms on Linux, exactly as
// with a server that writes its head and its first token separately with Nagle on.
import { createConnection, createServer, type Server, type Socket } from 'node:net';

export interface NagleRelay {
  readonly host: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Listens on host:port and relays every connection to 127.0.0.1:targetPort. */
export function startNagleRelay(host: string, port: number, targetPort: number): Promise<NagleRelay> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    client.setNoDelay(false);
    const upstream = createConnection({ host: '127.0.0.1', port: targetPort, noDelay: true });
    sockets.add(client);
    sockets.add(upstream);
    pipe(upstream, client);
    pipe(client, upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    client.on('close', end).on('error', end);
    upstream.on('close', end).on('error', end);
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      const addr = server.address();
      const actual = typeof addr === 'object' && addr ? addr.port : port;
      resolve({
        host,
        port: actual,
        close: () =>
          new Promise<void>((done) => {
            server.close(() => done());
            for (const s of sockets) s.destroy();
          }),
      });
    });
  });
}

/** Copies `from` to `to`, one write per chunk read (not coalesced), pausing on backpressure. */
function pipe(from: Socket, to: Socket): void {
  from.on('data', (chunk: Buffer) => {
    if (!to.write(chunk)) {
      from.pause();
      to.once('drain', () => from.resume());
    }
  });
  from.on('end', () => to.end());
}
