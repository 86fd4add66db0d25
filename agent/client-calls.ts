// The calls under the agent client: one grpc-js channel to the agent, the token on every call,
// a deadline on unary calls, server streams as async generators (leaving the loop or aborting
// the signal cancels the call), and every error status as an AgentCallError.
import * as grpc from '@grpc/grpc-js';
import { AgentCallError } from './errors.js';
import { AUTH_METADATA_KEY } from './service.js';

export interface AgentCallsOptions {
  /** host:port of the agent. */
  address: string;
  token: string;
  /** TLS: the CA (PEM) that signed the agent's certificate; plaintext when absent. */
  tlsCa?: Buffer;
  /** Deadline of unary calls; default 30 s. */
  timeoutMs?: number;
}

export class AgentCalls {
  private readonly client: grpc.Client;
  private readonly timeoutMs: number;

  constructor(private readonly options: AgentCallsOptions) {
    const credentials = options.tlsCa ? grpc.credentials.createSsl(options.tlsCa) : grpc.credentials.createInsecure();
    this.client = new grpc.Client(options.address, credentials, {
      // A cut link sends no reset: keepalive pings find a dead connection within ~8 s, and a host
      // that comes back is redialled within 2 s (grpc-js would otherwise back off up to 120 s).
      'grpc.keepalive_time_ms': 4_000,
      'grpc.keepalive_timeout_ms': 4_000,
      'grpc.initial_reconnect_backoff_ms': 250,
      'grpc.max_reconnect_backoff_ms': 2_000,
    });
    this.timeoutMs = options.timeoutMs ?? 30_000;
  }

  unary<Req, Res>(m: grpc.MethodDefinition<Req, Res>, req: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      this.client.makeUnaryRequest(
        m.path,
        m.requestSerialize,
        m.responseDeserialize,
        req,
        this.metadata(),
        { deadline: Date.now() + this.timeoutMs },
        (err, res) => (err ? reject(new AgentCallError(err)) : resolve(res!)),
      );
    });
  }

  /** The responses of a server stream, each mapped to the items it carries. */
  async *stream<Req, Res, Out>(
    m: grpc.MethodDefinition<Req, Res>,
    req: Req,
    signal: AbortSignal | undefined,
    map: (r: Res) => Iterable<Out>,
  ): AsyncGenerator<Out> {
    const call = this.client.makeServerStreamRequest(m.path, m.requestSerialize, m.responseDeserialize, req, this.metadata());
    const onAbort = () => call.cancel();
    signal?.addEventListener('abort', onAbort, { once: true });
    try {
      for await (const res of call as AsyncIterable<Res>) yield* map(res);
    } catch (err) {
      const e = err as grpc.ServiceError;
      if (e.code === grpc.status.CANCELLED && (signal?.aborted ?? false)) return;
      throw typeof e.code === 'number' ? new AgentCallError(e) : err;
    } finally {
      signal?.removeEventListener('abort', onAbort);
      call.on('error', () => {}); // the CANCELLED status of our own cancel
      call.cancel();
    }
  }

  close(): void {
    this.client.close();
  }

  private metadata(): grpc.Metadata {
    const m = new grpc.Metadata();
    m.set(AUTH_METADATA_KEY, `Bearer ${this.options.token}`);
    return m;
  }
}
