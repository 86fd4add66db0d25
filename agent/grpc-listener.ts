// The agent's gRPC server on its address: plaintext, or TLS with a certificate and key; a
// graceful shutdown that is forced after 2 s.
import * as grpc from '@grpc/grpc-js';
import { ListenError } from '../lib/errors.js';
import { agentServiceDefinition } from './service.js';

export interface GrpcListenOptions {
  host: string;
  /** 0 picks a free port. */
  port: number;
  /** PEM certificate chain and key; plaintext when absent. */
  tls: { cert: Buffer; key: Buffer } | undefined;
}

export class GrpcListener {
  private constructor(
    private readonly server: grpc.Server,
    /** host:port to dial (an IPv6 host in brackets). */
    readonly address: string,
    readonly port: number,
  ) {}

  /** Serves `handlers` as rc.agent.v1.AgentService; a port that cannot be bound throws ListenError. */
  static async listen(handlers: grpc.UntypedServiceImplementation, { host, port, tls }: GrpcListenOptions): Promise<GrpcListener> {
    const server = new grpc.Server({ 'grpc.max_receive_message_length': 4 * 1024 * 1024 });
    server.addService(agentServiceDefinition, handlers);
    const credentials = tls
      ? grpc.ServerCredentials.createSsl(null, [{ cert_chain: tls.cert, private_key: tls.key }], false)
      : grpc.ServerCredentials.createInsecure();
    const bindHost = host.includes(':') ? `[${host}]` : host;
    try {
      const bound = await new Promise<number>((resolve, reject) =>
        server.bindAsync(`${bindHost}:${port}`, credentials, (err, p) => (err ? reject(err) : resolve(p))),
      );
      return new GrpcListener(server, `${bindHost}:${bound}`, bound);
    } catch (err) {
      // grpc-js binds exclusively; its message buries the errno: say it as every server of ours does.
      const errno = /\b(EADDRINUSE|EACCES|EADDRNOTAVAIL)\b/.exec(String((err as Error).message))?.[1];
      throw errno ? new ListenError(host, port, errno) : err;
    }
  }

  /** Stops serving: waits for calls in flight, at most 2 s. */
  close(): Promise<void> {
    return new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        this.server.forceShutdown();
        resolve();
      }, 2000);
      this.server.tryShutdown(() => {
        clearTimeout(force);
        resolve();
      });
    });
  }
}
