// The typed agent client for the control plane: plain objects in and out, async iterables for the
// streams (leaving a `for await` loop cancels the call), AgentError with the agent's stable code.
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import * as pb from '../proto/gen/rc/agent/v1/agent_pb.js';
import { hostFromPb, infoFromPb, normalizeSpec, specToPb, watchItemFromPb } from './convert.js';
import { AgentError } from './errors.js';
import { agentServiceDefinition as def, AUTH_METADATA_KEY, ERROR_CODE_METADATA_KEY } from './service.js';
import type { HostInfo, InstanceInfo, LaunchSpecInput, ReconcileResult, WatchItem } from './types.js';

export interface AgentClientOptions {
  /** host:port of the agent. */
  address: string;
  token: string;
  /** TLS: the CA (PEM) that signed the agent's certificate; plaintext when absent. */
  tlsCa?: Buffer;
  /** Deadline of unary calls; default 30 s. */
  timeoutMs?: number;
}

export interface AgentClient {
  start(spec: LaunchSpecInput): Promise<{ instance: InstanceInfo; created: boolean }>;
  stop(instanceId: string, graceMs?: number): Promise<InstanceInfo>;
  /** False when there was no such instance. */
  remove(instanceId: string, graceMs?: number): Promise<boolean>;
  list(): Promise<InstanceInfo[]>;
  reconcile(wantedInstanceIds: string[]): Promise<ReconcileResult>;
  getHost(): Promise<HostInfo>;
  /** Host inventory, then events (after `afterSeq` when still buffered, else a snapshot), then live events and heartbeats. */
  watch(options?: { afterSeq?: number; signal?: AbortSignal }): AsyncIterable<WatchItem>;
  /** The last `tail` lines, then (with `follow`) new lines until the instance ends or the loop is left. */
  logs(instanceId: string, options?: { tail?: number; follow?: boolean; signal?: AbortSignal }): AsyncIterable<string>;
  close(): void;
}

/** An error status from the agent (or the transport), with the agent's stable code when it sent one. */
export class AgentCallError extends AgentError {
  constructor(err: grpc.ServiceError) {
    const code = err.metadata?.get(ERROR_CODE_METADATA_KEY)[0];
    super(typeof code === 'string' ? code : `RC_ERR_AGENT_GRPC_${grpc.status[err.code] ?? err.code}`, err.details || err.message, err.code, { cause: err });
  }
}

export function createAgentClient(options: AgentClientOptions): AgentClient {
  const credentials = options.tlsCa ? grpc.credentials.createSsl(options.tlsCa) : grpc.credentials.createInsecure();
  const client = new grpc.Client(options.address, credentials, {
    // A cut link sends no reset: keepalive pings find a dead connection within ~8 s, and a host
    // that comes back is redialled within 2 s (grpc-js would otherwise back off up to 120 s).
    'grpc.keepalive_time_ms': 4_000,
    'grpc.keepalive_timeout_ms': 4_000,
    'grpc.initial_reconnect_backoff_ms': 250,
    'grpc.max_reconnect_backoff_ms': 2_000,
  });
  const timeoutMs = options.timeoutMs ?? 30_000;
  const metadata = () => {
    const m = new grpc.Metadata();
    m.set(AUTH_METADATA_KEY, `Bearer ${options.token}`);
    return m;
  };

  function unary<Req, Res>(m: grpc.MethodDefinition<Req, Res>, req: Req): Promise<Res> {
    return new Promise((resolve, reject) => {
      client.makeUnaryRequest(m.path, m.requestSerialize, m.responseDeserialize, req, metadata(), { deadline: Date.now() + timeoutMs }, (err, res) =>
        err ? reject(new AgentCallError(err)) : resolve(res!),
      );
    });
  }

  async function* stream<Req, Res, Out>(
    m: grpc.MethodDefinition<Req, Res>,
    req: Req,
    signal: AbortSignal | undefined,
    map: (r: Res) => Iterable<Out>,
  ): AsyncGenerator<Out> {
    const call = client.makeServerStreamRequest(m.path, m.requestSerialize, m.responseDeserialize, req, metadata());
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

  return {
    async start(spec) {
      const res = await unary(def.startInstance, create(pb.StartInstanceRequestSchema, { spec: specToPb(normalizeSpec(spec)) }));
      return { instance: infoFromPb(res.instance!), created: res.created };
    },
    async stop(instanceId, graceMs = 0) {
      const res = await unary(def.stopInstance, create(pb.StopInstanceRequestSchema, { instanceId, graceMs }));
      return infoFromPb(res.instance!);
    },
    async remove(instanceId, graceMs = 0) {
      return (await unary(def.removeInstance, create(pb.RemoveInstanceRequestSchema, { instanceId, graceMs }))).removed;
    },
    async list() {
      return (await unary(def.listInstances, create(pb.ListInstancesRequestSchema))).instances.map(infoFromPb);
    },
    async reconcile(wantedInstanceIds) {
      const res = await unary(def.reconcile, create(pb.ReconcileRequestSchema, { wantedInstanceIds }));
      return { removedInstanceIds: res.removedInstanceIds, unknownInstanceIds: res.unknownInstanceIds };
    },
    async getHost() {
      return hostFromPb((await unary(def.getHost, create(pb.GetHostRequestSchema))).host!);
    },
    watch({ afterSeq = 0, signal } = {}) {
      return stream(def.watchEvents, create(pb.WatchEventsRequestSchema, { afterSeq: BigInt(afterSeq) }), signal, (r) => {
        const item = watchItemFromPb(r);
        return item ? [item] : [];
      });
    },
    logs(instanceId, { tail = 100, follow = false, signal } = {}) {
      return stream(def.streamLogs, create(pb.StreamLogsRequestSchema, { instanceId, tailLines: tail, follow }), signal, (r) => r.lines);
    },
    close() {
      client.close();
    },
  };
}
