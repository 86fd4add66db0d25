// Conversions between the protobuf messages (proto/gen) and the plain types (types.ts), used by
// both the gRPC server and the typed client. int64 fields travel as bigint and are numbers here.
import { create } from '@bufbuild/protobuf';
import * as pb from '../proto/gen/rc/agent/v1/agent_pb.js';
import type * as t from './types.js';

const STATE_TO_PB: Record<t.InstanceState, pb.InstanceState> = {
  pending: pb.InstanceState.PENDING,
  ready: pb.InstanceState.READY,
  failed: pb.InstanceState.FAILED,
  stopping: pb.InstanceState.STOPPING,
  stopped: pb.InstanceState.STOPPED,
  removed: pb.InstanceState.REMOVED,
};
const STATE_FROM_PB = new Map<pb.InstanceState, t.InstanceState>(Object.entries(STATE_TO_PB).map(([k, v]) => [v, k as t.InstanceState]));

export const stateToPb = (s: t.InstanceState): pb.InstanceState => STATE_TO_PB[s];
export const stateFromPb = (s: pb.InstanceState): t.InstanceState => STATE_FROM_PB.get(s) ?? 'failed';

const encoder = new TextEncoder();

/** Fills in the defaults of a LaunchSpecInput (strings in `files` become UTF-8 bytes). */
export function normalizeSpec(input: t.LaunchSpecInput): t.LaunchSpec {
  const files: Record<string, Uint8Array> = {};
  for (const [path, content] of Object.entries(input.files ?? {})) files[path] = typeof content === 'string' ? encoder.encode(content) : content;
  return {
    instanceId: input.instanceId,
    image: input.image ?? '',
    instanceType: input.instanceType ?? 'custom',
    startCommand: input.startCommand ?? '',
    env: { ...(input.env ?? {}) },
    ports: [...(input.ports ?? [])],
    gpuCount: input.gpuCount ?? 0,
    diskGb: input.diskGb ?? 0,
    sshPublicKey: input.sshPublicKey ?? '',
    volume: input.volume ?? '',
    files,
    readyTimeoutMs: input.readyTimeoutMs ?? 0,
  };
}

export function specToPb(s: t.LaunchSpec): pb.LaunchSpec {
  return create(pb.LaunchSpecSchema, { ...s, env: { ...s.env }, ports: [...s.ports], files: { ...s.files } });
}

export function specFromPb(m: pb.LaunchSpec): t.LaunchSpec {
  return {
    instanceId: m.instanceId,
    image: m.image,
    instanceType: m.instanceType,
    startCommand: m.startCommand,
    env: { ...m.env },
    ports: [...m.ports],
    gpuCount: m.gpuCount,
    diskGb: m.diskGb,
    sshPublicKey: m.sshPublicKey,
    volume: m.volume,
    files: { ...m.files },
    readyTimeoutMs: m.readyTimeoutMs,
  };
}

export function infoToPb(i: t.InstanceInfo): pb.InstanceInfo {
  return create(pb.InstanceInfoSchema, {
    instanceId: i.instanceId,
    state: stateToPb(i.state),
    message: i.message,
    reason: i.reason,
    detail: i.detail,
    seq: BigInt(i.seq),
    createdAtMs: BigInt(i.createdAtMs),
    updatedAtMs: BigInt(i.updatedAtMs),
    runtime: i.runtime,
    gpus: i.gpus,
    endpoints: i.endpoints.map((e) => create(pb.EndpointSchema, e)),
    spec: specToPb(i.spec),
    runtimeId: i.runtimeId,
  });
}

export function infoFromPb(m: pb.InstanceInfo): t.InstanceInfo {
  return {
    instanceId: m.instanceId,
    state: stateFromPb(m.state),
    message: m.message,
    reason: m.reason,
    detail: m.detail,
    seq: Number(m.seq),
    createdAtMs: Number(m.createdAtMs),
    updatedAtMs: Number(m.updatedAtMs),
    runtime: m.runtime === 'docker' ? 'docker' : 'process',
    gpus: [...m.gpus],
    endpoints: m.endpoints.map((e) => ({ port: e.port, host: e.host, hostPort: e.hostPort })),
    spec: m.spec ? specFromPb(m.spec) : specFromPb(create(pb.LaunchSpecSchema, { instanceId: m.instanceId })),
    runtimeId: m.runtimeId,
  };
}

export function eventToPb(e: t.InstanceEvent): pb.InstanceEvent {
  return create(pb.InstanceEventSchema, { ...e, state: stateToPb(e.state), seq: BigInt(e.seq), timeMs: BigInt(e.timeMs) });
}

export function eventFromPb(m: pb.InstanceEvent): t.InstanceEvent {
  return {
    instanceId: m.instanceId,
    state: stateFromPb(m.state),
    message: m.message,
    reason: m.reason,
    detail: m.detail,
    seq: Number(m.seq),
    timeMs: Number(m.timeMs),
  };
}

export function hostToPb(h: t.HostInfo): pb.HostInfo {
  return create(pb.HostInfoSchema, {
    ...h,
    gpus: h.gpus.map((g) =>
      create(pb.GpuSchema, {
        ...g,
        usage: g.usage ? create(pb.GpuUsageSchema, { ...g.usage, sampledAtMs: BigInt(g.usage.sampledAtMs) }) : undefined,
      }),
    ),
  });
}

export function hostFromPb(m: pb.HostInfo): t.HostInfo {
  return {
    agentId: m.agentId,
    hostname: m.hostname,
    runtime: m.runtime === 'docker' ? 'docker' : 'process',
    advertiseHost: m.advertiseHost,
    gpus: m.gpus.map((g) => ({
      index: g.index,
      model: g.model,
      memoryMb: g.memoryMb,
      instanceId: g.instanceId,
      ...(g.uuid ? { uuid: g.uuid } : {}),
      ...(g.usage ? { usage: { utilizationPct: g.usage.utilizationPct, memoryUsedMb: g.usage.memoryUsedMb, sampledAtMs: Number(g.usage.sampledAtMs) } } : {}),
    })),
    freeGpus: m.freeGpus,
    gpuSource: m.gpuSource === 'nvidia-smi' ? 'nvidia-smi' : 'configured',
  };
}

export function watchItemFromPb(m: pb.WatchEventsResponse): t.WatchItem | undefined {
  switch (m.kind.case) {
    case 'event':
      return { kind: 'event', event: eventFromPb(m.kind.value) };
    case 'heartbeat':
      return { kind: 'heartbeat', heartbeat: { timeMs: Number(m.kind.value.timeMs), seq: Number(m.kind.value.seq) } };
    case 'host':
      return { kind: 'host', host: hostFromPb(m.kind.value) };
    default:
      return undefined;
  }
}
