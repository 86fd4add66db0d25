// The typed agent client for the control plane: plain objects in and out, async iterables for the
// streams (leaving a `for await` loop cancels the call), AgentCallError (from errors.ts) with the
// agent's stable code. The channel, token, deadlines and cancellation are client-calls.ts.
import { create } from '@bufbuild/protobuf';
import * as pb from '../proto/gen/rc/agent/v1/agent_pb.js';
import { AgentCalls, type AgentCallsOptions } from './client-calls.js';
import { hostFromPb, infoFromPb, normalizeSpec, specToPb, watchItemFromPb } from './convert.js';
import { agentServiceDefinition as def } from './service.js';
import type { HostInfo, InstanceInfo, LaunchSpecInput, ReconcileResult, WatchItem } from './types.js';

// Part of the client's published API: the control plane imports the agent's client.ts and types.ts only.
export { AgentCallError } from './errors.js';

export type AgentClientOptions = AgentCallsOptions;

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

export function createAgentClient(options: AgentClientOptions): AgentClient {
  const calls = new AgentCalls(options);
  return {
    async start(spec) {
      const res = await calls.unary(def.startInstance, create(pb.StartInstanceRequestSchema, { spec: specToPb(normalizeSpec(spec)) }));
      return { instance: infoFromPb(res.instance!), created: res.created };
    },
    async stop(instanceId, graceMs = 0) {
      const res = await calls.unary(def.stopInstance, create(pb.StopInstanceRequestSchema, { instanceId, graceMs }));
      return infoFromPb(res.instance!);
    },
    async remove(instanceId, graceMs = 0) {
      return (await calls.unary(def.removeInstance, create(pb.RemoveInstanceRequestSchema, { instanceId, graceMs }))).removed;
    },
    async list() {
      return (await calls.unary(def.listInstances, create(pb.ListInstancesRequestSchema))).instances.map(infoFromPb);
    },
    async reconcile(wantedInstanceIds) {
      const res = await calls.unary(def.reconcile, create(pb.ReconcileRequestSchema, { wantedInstanceIds }));
      return { removedInstanceIds: res.removedInstanceIds, unknownInstanceIds: res.unknownInstanceIds };
    },
    async getHost() {
      return hostFromPb((await calls.unary(def.getHost, create(pb.GetHostRequestSchema))).host!);
    },
    watch({ afterSeq = 0, signal } = {}) {
      return calls.stream(def.watchEvents, create(pb.WatchEventsRequestSchema, { afterSeq: BigInt(afterSeq) }), signal, (r) => {
        const item = watchItemFromPb(r);
        return item ? [item] : [];
      });
    },
    logs(instanceId, { tail = 100, follow = false, signal } = {}) {
      return calls.stream(def.streamLogs, create(pb.StreamLogsRequestSchema, { instanceId, tailLines: tail, follow }), signal, (r) => r.lines);
    },
    close() {
      calls.close();
    },
  };
}
