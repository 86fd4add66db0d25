// Docker Engine API requests as pure data (method, path, body), so that what the docker runtime
// asks of the engine is unit-tested without an engine. API reference: docs.docker.com/engine/api.
import type { LaunchSpec } from './types.js';

export const DOCKER_API_VERSION = 'v1.43';
export const LABEL_AGENT = 'rc.agent-id';
export const LABEL_INSTANCE = 'rc.instance-id';
/** Where the persistent volume and the instance files appear inside the container. */
export const CONTAINER_VOLUME_DIR = '/workspace';
export const CONTAINER_FILES_DIR = '/rc';

export interface DockerRequest {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: unknown;
}

const api = (path: string) => `/${DOCKER_API_VERSION}${path}`;
const q = (params: Record<string, string>) => new URLSearchParams(params).toString();

export function containerName(instanceId: string): string {
  return `rc-${instanceId}`;
}

/** Splits an image reference into what /images/create wants: fromImage and tag (or digest). */
export function parseImage(image: string): { fromImage: string; tag: string } {
  const at = image.indexOf('@');
  if (at >= 0) return { fromImage: image.slice(0, at), tag: image.slice(at + 1) };
  const colon = image.lastIndexOf(':');
  if (colon > image.lastIndexOf('/')) return { fromImage: image.slice(0, colon), tag: image.slice(colon + 1) };
  return { fromImage: image, tag: 'latest' };
}

export function pullRequest(image: string): DockerRequest {
  return { method: 'POST', path: api(`/images/create?${q(parseImage(image))}`) };
}

export interface CreateOptions {
  spec: LaunchSpec;
  agentId: string;
  gpus: number[];
  /** Routed port -> host port. */
  hostPorts: Map<number, number>;
  /** Host address the ports are published on. */
  bindIp: string;
  /** Host directory with the instance files, mounted at /rc. */
  homeDir: string;
  /** Host path of a path volume; undefined for a named volume or none. */
  volumePath: string | undefined;
  /** Variables set by the agent (override the spec's). */
  agentEnv: Record<string, string>;
}

/** Named volumes get a prefix so they never clash with the operator's own. */
export function volumeName(name: string): string {
  return `rc-vol-${name}`;
}

export function createContainerRequest(o: CreateOptions): DockerRequest {
  const { spec } = o;
  const env: Record<string, string> = { ...spec.env, ...o.agentEnv, RC_INSTANCE_DIR: CONTAINER_FILES_DIR };
  if (spec.ports[0] !== undefined) env.PORT = String(spec.ports[0]);
  if (spec.volume) env.RC_VOLUME_DIR = CONTAINER_VOLUME_DIR;
  const exposed: Record<string, object> = {};
  const bindings: Record<string, { HostIp: string; HostPort: string }[]> = {};
  for (const port of spec.ports) {
    exposed[`${port}/tcp`] = {};
    bindings[`${port}/tcp`] = [{ HostIp: o.bindIp, HostPort: String(o.hostPorts.get(port)) }];
  }
  const mounts: { Type: 'bind' | 'volume'; Source: string; Target: string; ReadOnly?: boolean }[] = [
    { Type: 'bind', Source: o.homeDir, Target: CONTAINER_FILES_DIR },
  ];
  if (spec.volume) {
    mounts.push(spec.volume.startsWith('/')
      ? { Type: 'bind', Source: o.volumePath ?? spec.volume, Target: CONTAINER_VOLUME_DIR }
      : { Type: 'volume', Source: volumeName(spec.volume), Target: CONTAINER_VOLUME_DIR });
  }
  const body = {
    Image: spec.image,
    ...(spec.startCommand ? { Entrypoint: ['/bin/sh', '-c'], Cmd: [spec.startCommand] } : {}),
    Env: Object.entries(env).map(([k, v]) => `${k}=${v}`),
    Labels: {
      [LABEL_AGENT]: o.agentId,
      [LABEL_INSTANCE]: spec.instanceId,
      'rc.instance-type': spec.instanceType,
      'rc.disk-gb': String(spec.diskGb),
    },
    ExposedPorts: exposed,
    HostConfig: {
      PortBindings: bindings,
      Mounts: mounts,
      DeviceRequests: o.gpus.length ? [{ Driver: 'nvidia', DeviceIDs: o.gpus.map(String), Capabilities: [['gpu']] }] : [],
      RestartPolicy: { Name: 'no' },
      // Serving stacks share tensors through /dev/shm; the 64 MB default is far too small.
      ShmSize: o.gpus.length ? 8 * 1024 ** 3 : 256 * 1024 ** 2,
    },
  };
  return { method: 'POST', path: api(`/containers/create?${q({ name: containerName(spec.instanceId) })}`), body };
}

export const startRequest = (id: string): DockerRequest => ({ method: 'POST', path: api(`/containers/${encodeURIComponent(id)}/start`) });
export const stopRequest = (id: string, graceMs: number): DockerRequest => ({
  method: 'POST',
  path: api(`/containers/${encodeURIComponent(id)}/stop?${q({ t: String(Math.ceil(graceMs / 1000)) })}`),
});
export const removeRequest = (id: string): DockerRequest => ({
  method: 'DELETE',
  path: api(`/containers/${encodeURIComponent(id)}?${q({ force: 'true', v: 'false' })}`),
});
export const inspectRequest = (id: string): DockerRequest => ({ method: 'GET', path: api(`/containers/${encodeURIComponent(id)}/json`) });
export const listRequest = (agentId: string): DockerRequest => ({
  method: 'GET',
  path: api(`/containers/json?${q({ all: 'true', filters: JSON.stringify({ label: [`${LABEL_AGENT}=${agentId}`] }) })}`),
});
export const logsRequest = (id: string, sinceSec: number): DockerRequest => ({
  method: 'GET',
  path: api(`/containers/${encodeURIComponent(id)}/logs?${q({ follow: 'true', stdout: 'true', stderr: 'true', since: String(sinceSec) })}`),
});

/** Summarises one line of /images/create progress for the pending message. */
export function pullProgress(line: { status?: string; id?: string; error?: string; progressDetail?: { current?: number; total?: number } }, layers: Map<string, string>): string | { error: string } {
  if (line.error) return { error: line.error };
  if (line.id && line.status) layers.set(line.id, line.status);
  const total = layers.size;
  const done = [...layers.values()].filter((s) => s === 'Pull complete' || s === 'Already exists').length;
  return total ? `pulling image (${done}/${total} layers)` : 'pulling image';
}

/**
 * Splits Docker's multiplexed log stream (8-byte header: stream, 3 zero bytes, big-endian size)
 * into payloads. Feed chunks as they come; partial frames are kept for the next chunk.
 */
export class LogDemuxer {
  private pending: Buffer = Buffer.alloc(0);
  push(chunk: Buffer): Buffer[] {
    this.pending = this.pending.length ? Buffer.concat([this.pending, chunk]) : chunk;
    const out: Buffer[] = [];
    while (this.pending.length >= 8) {
      const size = this.pending.readUInt32BE(4);
      if (this.pending.length < 8 + size) break;
      out.push(this.pending.subarray(8, 8 + size));
      this.pending = this.pending.subarray(8 + size);
    }
    return out;
  }
}
