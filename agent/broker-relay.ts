// The tunnel broker as seen from containers. rc-tunnel inside a container dials RC_TUNNEL_BROKER;
// when that URL names the host's loopback (the embedded gateway listens on 127.0.0.1), the
// container would dial itself. The docker runtime then relays one port on the bridge's gateway
// address (host.docker.internal inside containers) to that loopback address, and rewrites the
// URL. The relay reaches nothing but the gateway, which is public anyway: the agent's gRPC port,
// Redis and the platform API stay unreachable from containers.
import { createServer, connect, type Server, type Socket } from 'node:net';
import { isIP } from 'node:net';

export function isLoopbackHost(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || (isIP(h) === 4 && h.startsWith('127.'));
}

export class BrokerRelays {
  /** "targetHost:targetPort" -> relay listening on the bridge address. */
  private readonly relays = new Map<string, { server: Server; port: number }>();
  private readonly sockets = new Set<Socket>();

  /** Relays `listenIp`:(the target's port, else any free one) to target; returns the relay's port. */
  async ensure(listenIp: string, targetHost: string, targetPort: number): Promise<number> {
    const key = `${targetHost}:${targetPort}`;
    const existing = this.relays.get(key);
    if (existing) return existing.port;
    const server = createServer((client) => {
      const upstream = connect({ host: targetHost.replace(/^\[|\]$/g, ''), port: targetPort });
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on('close', () => this.sockets.delete(s));
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
      client.pipe(upstream);
      upstream.pipe(client);
    });
    const listen = (port: number) =>
      new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        server.listen(port, listenIp, () => {
          server.off('error', reject);
          const a = server.address();
          resolve(typeof a === 'object' && a ? a.port : port);
        });
      });
    // The same port as the target when free, so the URL stays the same across agent restarts.
    const port = await listen(targetPort).catch(() => listen(0));
    this.relays.set(key, { server, port });
    return port;
  }

  close(): void {
    for (const { server } of this.relays.values()) server.close();
    for (const s of this.sockets) s.destroy();
    this.relays.clear();
  }
}
