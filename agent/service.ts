// The grpc-js service definition of rc.agent.v1.AgentService, written by hand: protoc-gen-es
// generates the messages only. Each method (de)serializes with toBinary/fromBinary and the
// generated schemas.
import { fromBinary, toBinary, type DescMessage, type MessageShape } from '@bufbuild/protobuf';
import type { MethodDefinition } from '@grpc/grpc-js';
import * as pb from '../proto/gen/rc/agent/v1/agent_pb.js';

export const SERVICE_NAME = 'rc.agent.v1.AgentService';

function method<I extends DescMessage, O extends DescMessage>(
  name: string,
  input: I,
  output: O,
  responseStream: boolean,
): MethodDefinition<MessageShape<I>, MessageShape<O>> {
  return {
    path: `/${SERVICE_NAME}/${name}`,
    originalName: name,
    requestStream: false,
    responseStream,
    requestSerialize: (m) => Buffer.from(toBinary(input, m)),
    requestDeserialize: (b) => fromBinary(input, b),
    responseSerialize: (m) => Buffer.from(toBinary(output, m)),
    responseDeserialize: (b) => fromBinary(output, b),
  };
}

export const agentServiceDefinition = {
  startInstance: method('StartInstance', pb.StartInstanceRequestSchema, pb.StartInstanceResponseSchema, false),
  stopInstance: method('StopInstance', pb.StopInstanceRequestSchema, pb.StopInstanceResponseSchema, false),
  removeInstance: method('RemoveInstance', pb.RemoveInstanceRequestSchema, pb.RemoveInstanceResponseSchema, false),
  listInstances: method('ListInstances', pb.ListInstancesRequestSchema, pb.ListInstancesResponseSchema, false),
  reconcile: method('Reconcile', pb.ReconcileRequestSchema, pb.ReconcileResponseSchema, false),
  watchEvents: method('WatchEvents', pb.WatchEventsRequestSchema, pb.WatchEventsResponseSchema, true),
  streamLogs: method('StreamLogs', pb.StreamLogsRequestSchema, pb.StreamLogsResponseSchema, true),
  getHost: method('GetHost', pb.GetHostRequestSchema, pb.GetHostResponseSchema, false),
} as const;

export type AgentServiceDefinition = typeof agentServiceDefinition;

/** Metadata key of the shared token: `authorization: Bearer <token>`. */
export const AUTH_METADATA_KEY = 'authorization';
/** Trailer metadata key carrying the agent's stable error code (RC_ERR_AGENT_...). */
export const ERROR_CODE_METADATA_KEY = 'rc-error-code';
