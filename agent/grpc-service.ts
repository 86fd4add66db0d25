// The handlers of rc.agent.v1.AgentService (service.ts), in front of the supervisor. Every call
// must carry the shared token and counts as contact with the control plane; agent errors travel
// as gRPC statuses with their stable code in the `rc-error-code` trailer.
import { create } from '@bufbuild/protobuf';
import * as grpc from '@grpc/grpc-js';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import * as pb from '../proto/gen/rc/agent/v1/agent_pb.js';
import type { ControlPlaneWatchdog } from './control-plane-watchdog.js';
import { eventToPb, hostToPb, infoToPb, specFromPb } from './convert.js';
import { AgentError, AgentInvalidArgumentError } from './errors.js';
import { ERROR_CODE_METADATA_KEY } from './service.js';
import type { Supervisor } from './supervisor.js';
import type { TokenAuth } from './token-auth.js';

const MAX_TAIL_LINES = 10_000;

export interface AgentGrpcServiceOptions {
  supervisor: Supervisor;
  auth: TokenAuth;
  watchdog: ControlPlaneWatchdog;
  clock: Clock;
  /** Interval of the heartbeats on watch streams. */
  heartbeatMs: number;
  logger: Logger;
}

type OpenStream = grpc.ServerWritableStream<unknown, unknown>;

function toServiceError(err: unknown, log: Logger): Partial<grpc.StatusObject> {
  const metadata = new grpc.Metadata();
  if (err instanceof AgentError) {
    metadata.set(ERROR_CODE_METADATA_KEY, err.code);
    return { code: err.grpcCode, details: err.message, metadata };
  }
  log.error('agent call failed', { err });
  metadata.set(ERROR_CODE_METADATA_KEY, 'RC_ERR_AGENT_INTERNAL');
  return { code: grpc.status.INTERNAL, details: `Internal agent error: ${(err as Error)?.message ?? String(err)}`, metadata };
}

export class AgentGrpcService {
  /** Watch and follow-logs streams still open: ended when the agent closes. */
  private readonly streams = new Set<OpenStream>();

  constructor(private readonly o: AgentGrpcServiceOptions) {}

  /** The implementation grpc-js serves, by the method names of agentServiceDefinition. */
  handlers(): grpc.UntypedServiceImplementation {
    const { supervisor } = this.o;
    const unary = this.unary.bind(this);
    return {
      startInstance: unary<pb.StartInstanceRequest, pb.StartInstanceResponse>((req) => {
        if (!req.spec) throw new AgentInvalidArgumentError('spec is required');
        const { info, created } = supervisor.start(specFromPb(req.spec));
        return create(pb.StartInstanceResponseSchema, { instance: infoToPb(info), created });
      }),
      stopInstance: unary<pb.StopInstanceRequest, pb.StopInstanceResponse>(async (req) => {
        const info = await supervisor.stop(req.instanceId, req.graceMs || undefined);
        return create(pb.StopInstanceResponseSchema, { instance: infoToPb(info) });
      }),
      removeInstance: unary<pb.RemoveInstanceRequest, pb.RemoveInstanceResponse>(async (req) =>
        create(pb.RemoveInstanceResponseSchema, { removed: await supervisor.remove(req.instanceId, req.graceMs || undefined) }),
      ),
      listInstances: unary<pb.ListInstancesRequest, pb.ListInstancesResponse>(() =>
        create(pb.ListInstancesResponseSchema, { instances: supervisor.list().map(infoToPb) }),
      ),
      reconcile: unary<pb.ReconcileRequest, pb.ReconcileResponse>(async (req) =>
        create(pb.ReconcileResponseSchema, await supervisor.reconcile(req.wantedInstanceIds)),
      ),
      getHost: unary<pb.GetHostRequest, pb.GetHostResponse>(() => create(pb.GetHostResponseSchema, { host: hostToPb(supervisor.host()) })),
      watchEvents: (call: grpc.ServerWritableStream<pb.WatchEventsRequest, pb.WatchEventsResponse>) => this.watchEvents(call),
      streamLogs: (call: grpc.ServerWritableStream<pb.StreamLogsRequest, pb.StreamLogsResponse>) => this.streamLogs(call),
    };
  }

  /** Ends every open stream (the agent is closing). */
  endStreams(): void {
    for (const s of this.streams) s.end();
    this.streams.clear();
  }

  private authorize(metadata: grpc.Metadata): void {
    this.o.auth.check(metadata);
    this.o.watchdog.contact();
  }

  /** A unary handler with auth and error mapping. */
  private unary<Req, Res>(handle: (req: Req) => Promise<Res> | Res): grpc.handleUnaryCall<Req, Res> {
    return (call, callback) => {
      (async () => {
        this.authorize(call.metadata);
        return handle(call.request);
      })().then(
        (res) => callback(null, res),
        (err: unknown) => callback(toServiceError(err, this.o.logger)),
      );
    };
  }

  /** The host inventory, the backlog (or a snapshot), then live events, host changes and heartbeats. */
  private watchEvents(call: grpc.ServerWritableStream<pb.WatchEventsRequest, pb.WatchEventsResponse>): void {
    const { supervisor, watchdog, clock } = this.o;
    try {
      this.authorize(call.metadata);
    } catch (err) {
      call.emit('error', toServiceError(err, this.o.logger));
      return;
    }
    const send = (kind: pb.WatchEventsResponse['kind']) => {
      if (!call.cancelled && call.writable) call.write(create(pb.WatchEventsResponseSchema, { kind }));
    };
    const sendHost = () => send({ case: 'host', value: hostToPb(supervisor.host()) });
    watchdog.watchOpened();
    this.streams.add(call as OpenStream);
    sendHost();
    const { backlog, unsubscribe } = supervisor.watchEvents(Number(call.request.afterSeq), (e) => send({ case: 'event', value: eventToPb(e) }));
    for (const e of backlog) send({ case: 'event', value: eventToPb(e) });
    const offHost = supervisor.onHostChange(sendHost);
    const beat = setInterval(() => {
      watchdog.contact();
      send({ case: 'heartbeat', value: create(pb.HeartbeatSchema, { timeMs: BigInt(clock.now()), seq: BigInt(supervisor.seq) }) });
    }, this.o.heartbeatMs);
    let done = false;
    const cleanup = () => {
      if (done) return;
      done = true;
      watchdog.watchClosed();
      clearInterval(beat);
      unsubscribe();
      offHost();
      this.streams.delete(call as OpenStream);
    };
    call.on('cancelled', cleanup);
    call.on('close', cleanup);
    call.on('finish', cleanup);
    call.on('error', cleanup);
  }

  /** The last lines, then (following) new lines until the instance ends or the call is cancelled. */
  private streamLogs(call: grpc.ServerWritableStream<pb.StreamLogsRequest, pb.StreamLogsResponse>): void {
    let result: ReturnType<Supervisor['logs']>;
    try {
      this.authorize(call.metadata);
      const tail = Math.min(call.request.tailLines, MAX_TAIL_LINES);
      const follower = call.request.follow
        ? {
            onLines: (lines: string[]) => {
              if (!call.cancelled) call.write(create(pb.StreamLogsResponseSchema, { lines }));
            },
            onEnd: () => {
              this.streams.delete(call as OpenStream);
              call.end();
            },
          }
        : undefined;
      result = this.o.supervisor.logs(call.request.instanceId, tail, follower);
    } catch (err) {
      call.emit('error', toServiceError(err, this.o.logger));
      return;
    }
    if (result.lines.length) call.write(create(pb.StreamLogsResponseSchema, { lines: result.lines }));
    if (!result.following) {
      call.end();
      return;
    }
    this.streams.add(call as OpenStream);
    const cleanup = () => {
      result.unsubscribe();
      this.streams.delete(call as OpenStream);
    };
    call.on('cancelled', cleanup);
    call.on('close', cleanup);
    call.on('error', cleanup);
  }
}
