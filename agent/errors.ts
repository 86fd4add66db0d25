// Typed errors of the agent, with stable codes. The gRPC server maps each to a gRPC status and
// sends the code in the `rc-error-code` trailer; the client turns it back into an AgentError.
import { status as GrpcStatus, type ServiceError } from '@grpc/grpc-js';
import { RcError } from '../lib/errors.js';
import { ERROR_CODE_METADATA_KEY } from './service.js';

export class AgentError extends RcError {
  /** The gRPC status code this error travels with. */
  readonly grpcCode: GrpcStatus;
  constructor(code: string, message: string, grpcCode: GrpcStatus, options?: { cause?: unknown }) {
    super(code, message, grpcToHttp(grpcCode), options);
    this.grpcCode = grpcCode;
  }
}

/** The call carried no token or a wrong one. */
export class AgentUnauthenticatedError extends AgentError {
  constructor() {
    super('RC_ERR_AGENT_UNAUTHENTICATED', 'Missing or invalid agent token', GrpcStatus.UNAUTHENTICATED);
  }
}

/** A request field is invalid (the message names it). */
export class AgentInvalidArgumentError extends AgentError {
  constructor(message: string) {
    super('RC_ERR_AGENT_INVALID_ARGUMENT', message, GrpcStatus.INVALID_ARGUMENT);
  }
}

/** No instance with this id. */
export class AgentInstanceNotFoundError extends AgentError {
  constructor(id: string) {
    super('RC_ERR_AGENT_NOT_FOUND', `No instance ${id} on this host`, GrpcStatus.NOT_FOUND);
  }
}

/** StartInstance repeated under the same id with a different spec. */
export class AgentSpecMismatchError extends AgentError {
  constructor(id: string) {
    super('RC_ERR_AGENT_SPEC_MISMATCH', `Instance ${id} already exists with a different launch spec`, GrpcStatus.ALREADY_EXISTS);
  }
}

/** The agent is shutting down. */
export class AgentClosingError extends AgentError {
  constructor() {
    super('RC_ERR_AGENT_CLOSING', 'The agent is shutting down', GrpcStatus.UNAVAILABLE);
  }
}

/** Another agent holds this data directory. */
export class AgentDataDirLockedError extends AgentError {
  constructor(dir: string, pid: number) {
    super('RC_ERR_AGENT_DATA_DIR_LOCKED', `Another agent (pid ${pid}) is using ${dir}`, GrpcStatus.FAILED_PRECONDITION);
  }
}

/** A runtime (process spawn, Docker Engine API) call failed. */
export class RuntimeError extends AgentError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('RC_ERR_AGENT_RUNTIME', message, GrpcStatus.INTERNAL, options);
  }
}

/** An error status from the agent (or the transport), as the client sees it: with the agent's stable code when it sent one. */
export class AgentCallError extends AgentError {
  constructor(err: ServiceError) {
    const code = err.metadata?.get(ERROR_CODE_METADATA_KEY)[0];
    super(typeof code === 'string' ? code : `RC_ERR_AGENT_GRPC_${GrpcStatus[err.code] ?? err.code}`, err.details || err.message, err.code, { cause: err });
  }
}

function grpcToHttp(code: GrpcStatus): number {
  switch (code) {
    case GrpcStatus.UNAUTHENTICATED:
      return 401;
    case GrpcStatus.PERMISSION_DENIED:
      return 403;
    case GrpcStatus.INVALID_ARGUMENT:
      return 400;
    case GrpcStatus.NOT_FOUND:
      return 404;
    case GrpcStatus.ALREADY_EXISTS:
    case GrpcStatus.FAILED_PRECONDITION:
      return 409;
    case GrpcStatus.UNAVAILABLE:
      return 503;
    case GrpcStatus.DEADLINE_EXCEEDED:
      return 504;
    default:
      return 500;
  }
}

/** Failure reasons reported with state `failed` (stable codes, documented in agent/README.md). */
export const FailureReason = {
  /** `sh` exit status 127: the command was not found. */
  commandNotFound: 'command_not_found',
  /** `sh` exit status 126: found but not executable. */
  commandNotExecutable: 'command_not_executable',
  /** The instance's process (or container) exited. */
  exited: 'exited',
  /** The routed port did not accept connections (or /health did not answer 200) within the timeout. */
  readyTimeout: 'ready_timeout',
  /** Fewer free GPUs than requested. */
  gpusUnavailable: 'gpus_unavailable',
  /** Real GPUs, and a docker engine that cannot give them to containers (no NVIDIA Container Toolkit). */
  gpuRuntimeMissing: 'gpu_runtime_missing',
  /** The image could not be pulled. */
  pullFailed: 'pull_failed',
  /** The runtime refused to create or start the instance. */
  startFailed: 'start_failed',
  /** The process was gone when the agent came back after a restart. */
  lost: 'lost',
} as const;

/** Reasons reported with state `stopped` when the agent stopped an instance on its own. */
export const StopReason = {
  controlPlaneLost: 'control_plane_lost',
  unwanted: 'unwanted',
} as const;
