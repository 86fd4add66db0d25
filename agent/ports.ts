// Host ports for instances. The process runtime cannot remap ports, so each routed port of an
// instance gets a free host port, which the instance receives in PORT and the agent reports.
import { createServer } from 'node:net';

export class HostPorts {
  private readonly held = new Set<number>();

  constructor(private readonly bindHost = '127.0.0.1') {}

  /** A port free on the host right now and not held by another instance of this agent. */
  async allocate(): Promise<number> {
    for (let attempt = 0; attempt < 50; attempt++) {
      const port = await new Promise<number>((resolve, reject) => {
        const server = createServer();
        server.once('error', reject);
        server.listen(0, this.bindHost, () => {
          const address = server.address();
          const p = typeof address === 'object' && address ? address.port : 0;
          server.close(() => resolve(p));
        });
      });
      if (port && !this.held.has(port)) {
        this.held.add(port);
        return port;
      }
    }
    throw new Error('No free host port found');
  }

  /** Marks ports as held (instances adopted after a restart). */
  claim(ports: number[]): void {
    for (const p of ports) this.held.add(p);
  }

  release(ports: number[]): void {
    for (const p of ports) this.held.delete(p);
  }
}
