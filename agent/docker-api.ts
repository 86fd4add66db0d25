// Docker Engine API requests as pure data (method, path, body), so that what the docker runtime
// asks of the engine is unit-tested without an engine. Paths carry no version: the runtime
// prefixes the version it negotiated with the engine (negotiateApiVersion). API reference:
// docs.docker.com/engine/api (v1.41 is the oldest we speak: Debian's docker.io 20.10).
import { createHash } from 'node:crypto';
import { StringDecoder } from 'node:string_decoder';
import type { LaunchSpec } from './types.js';

/** Oldest Engine API we speak (Docker 20.10) and the newest we were written against. */
export const MIN_API_VERSION = '1.41';
export const MAX_API_VERSION = '1.43';

export const LABEL_AGENT = 'rc.agent-id';
export const LABEL_INSTANCE = 'rc.instance-id';
/** Where the persistent volume, the instance files and the platform's tools appear inside the container. */
export const CONTAINER_VOLUME_DIR = '/workspace';
export const CONTAINER_FILES_DIR = '/rc';
export const CONTAINER_TOOLBOX_DIR = '/opt/rc';
/** The name containers use for the host (ExtraHosts host-gateway: the bridge's gateway address). */
export const HOST_GATEWAY_NAME = 'host.docker.internal';

export interface DockerRequest {
  method: 'GET' | 'POST' | 'DELETE';
  path: string;
  body?: unknown;
}

const q = (params: Record<string, string>) => new URLSearchParams(params).toString();
const enc = encodeURIComponent;

function versionParts(v: string): [number, number] {
  const m = /^v?(\d+)\.(\d+)$/.exec(v.trim());
  return m ? [Number(m[1]), Number(m[2])] : [0, 0];
}

function compareVersions(a: string, b: string): number {
  const [a1, a2] = versionParts(a);
  const [b1, b2] = versionParts(b);
  return a1 - b1 || a2 - b2;
}

/**
 * The API version to use with an engine whose /_ping answered `Api-Version: serverVersion`: the
 * newer of what both sides speak. Undefined when the engine is older than MIN_API_VERSION.
 */
export function negotiateApiVersion(serverVersion: string | undefined): string | undefined {
  if (!serverVersion || versionParts(serverVersion)[0] === 0) return MIN_API_VERSION; // engines before 1.25 send none
  if (compareVersions(serverVersion, MIN_API_VERSION) < 0) return undefined;
  return compareVersions(serverVersion, MAX_API_VERSION) > 0 ? MAX_API_VERSION : serverVersion.replace(/^v/, '');
}

/** The first host address of an IPv4 subnet ("172.17.0.0/16" -> "172.17.0.1"). */
export function firstHostAddress(subnet: string): string {
  const [ip, bits] = subnet.split('/');
  const n = ip!.split('.').reduce((a, o) => a * 256 + Number(o), 0);
  const mask = 2 ** 32 - 2 ** (32 - Number(bits ?? 32));
  const v = ((n & mask) >>> 0) + 1;
  return [24, 16, 8, 0].map((s) => Math.floor(v / 2 ** s) % 256).join('.');
}

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

export const PULL_POLICIES = ['if-not-present', 'always', 'never'] as const;
export type PullPolicy = (typeof PULL_POLICIES)[number];

/** Whether to pull before creating the container. `never` with a missing image fails the launch (pull_failed). */
export function shouldPull(policy: PullPolicy, present: boolean): boolean {
  return policy === 'always' || (policy === 'if-not-present' && !present);
}

export const pingRequest = (): DockerRequest => ({ method: 'GET', path: '/_ping' });
export const infoRequest = (): DockerRequest => ({ method: 'GET', path: '/info' });
export const pullRequest = (image: string): DockerRequest => ({ method: 'POST', path: `/images/create?${q(parseImage(image))}` });
export const imageInspectRequest = (image: string): DockerRequest => ({ method: 'GET', path: `/images/${enc(image)}/json` });
/** Removes the name `image` (force: also when a container runs it; the container keeps the image, unnamed). */
export const imageRemoveRequest = (image: string): DockerRequest => ({ method: 'DELETE', path: `/images/${enc(image)}?force=true&noprune=false` });
export const networkInspectRequest = (name: string): DockerRequest => ({ method: 'GET', path: `/networks/${enc(name)}` });
/** Every network of the engine (the subnets in use: a new instance subnet must overlap none). */
export const networkListRequest = (): DockerRequest => ({ method: 'GET', path: '/networks' });
/** This agent's instance networks (orphans are those without a container). */
export const agentNetworksRequest = (agentId: string): DockerRequest => ({
  method: 'GET',
  path: `/networks?${q({ filters: JSON.stringify({ label: [`${LABEL_AGENT}=${agentId}`] }) })}`,
});
export const networkRemoveRequest = (id: string): DockerRequest => ({ method: 'DELETE', path: `/networks/${enc(id)}` });

/** The instance's own network: one bridge per instance, so no container shares a link with another. */
export function networkName(instanceId: string): string {
  return `rc-net-${instanceId}`;
}

/**
 * The bridge interface of an instance network: `<prefix>-` and a hash of agent and instance,
 * 15 characters at most (the kernel's limit). The firewall matches every bridge by the prefix.
 */
export function bridgeName(prefix: string, agentId: string, instanceId: string): string {
  const room = 15 - prefix.length - 1;
  return `${prefix}-${createHash('sha256').update(`${agentId}/${instanceId}`).digest('hex').slice(0, room)}`;
}

export interface NetworkOptions {
  name: string;
  bridge: string;
  subnet: string;
  gateway: string;
  agentId: string;
  instanceId: string;
}

export function networkCreateRequest(o: NetworkOptions): DockerRequest {
  return {
    method: 'POST',
    path: '/networks/create',
    body: {
      Name: o.name,
      CheckDuplicate: true,
      Driver: 'bridge',
      // Not internal: the container keeps the public internet where the host forwards (the
      // firewall refuses private destinations); not attachable: nothing else joins it.
      Internal: false,
      Attachable: false,
      EnableIPv6: false,
      IPAM: { Driver: 'default', Config: [{ Subnet: o.subnet, Gateway: o.gateway }] },
      Options: { 'com.docker.network.bridge.name': o.bridge, 'com.docker.network.bridge.enable_icc': 'false' },
      Labels: { [LABEL_AGENT]: o.agentId, [LABEL_INSTANCE]: o.instanceId },
    },
  };
}

/**
 * Capabilities a container keeps (CapDrop ALL first): what package managers, servers dropping
 * privileges and sshd need. Gone compared with the engine's default set: NET_RAW (raw and packet
 * sockets: spoofing on the link), MKNOD (device nodes), SETFCAP, SETPCAP.
 */
export const CONTAINER_CAPABILITIES = [
  'AUDIT_WRITE',
  'CHOWN',
  'DAC_OVERRIDE',
  'FOWNER',
  'FSETID',
  'KILL',
  'NET_BIND_SERVICE',
  'SETGID',
  'SETUID',
  'SYS_CHROOT',
] as const;

/** Resource limits of one container (already scaled by GPU count). */
export interface ContainerLimits {
  memoryBytes: number;
  nanoCpus: number;
  pids: number;
}

/** Per-GPU limits from the settings, scaled by the instance's GPU count (a CPU-only instance counts as one), CPUs capped at the host's. */
export function scaleLimits(perGpu: { memoryMb: number; cpus: number; pids: number }, gpuCount: number, hostCpus: number): ContainerLimits {
  const n = Math.max(1, gpuCount);
  return {
    memoryBytes: perGpu.memoryMb * n * 1024 * 1024,
    nanoCpus: Math.round(Math.min(perGpu.cpus * n, hostCpus) * 1e9),
    pids: perGpu.pids * n,
  };
}

/** Host directories of the toolbox: its own (node, libraries, scripts) and the project's compiled code and modules. */
export interface ToolboxMounts {
  dir: string;
  dist: string;
  nodeModules: string;
}

export interface CreateOptions {
  spec: LaunchSpec;
  agentId: string;
  /** GPU indexes assigned to the instance (CUDA_VISIBLE_DEVICES is set from them by the agent). */
  gpus: number[];
  /** Device ids (nvidia-smi UUIDs) for the engine's GPU device request; undefined: simulated GPUs, no request. */
  gpuDeviceIds: string[] | undefined;
  /** Routed port -> host port. */
  hostPorts: Map<number, number>;
  /** Host address the ports are published on (never all interfaces unless configured). */
  bindIp: string;
  /** Host directory with the instance files, mounted at /rc. */
  homeDir: string;
  /** Host path of a path volume, or the Docker volume name of a named one; undefined: none. */
  volume: { type: 'bind' | 'volume'; source: string } | undefined;
  /** Host file with the account's SSH key, mounted read-only as root's authorized_keys; undefined: none. */
  authorizedKeysFile: string | undefined;
  /** The platform's tools (rc, rc-tunnel, see toolbox.ts), mounted read-only at /opt/rc; undefined: none. */
  toolbox: ToolboxMounts | undefined;
  /** The image's own PATH (the toolbox is appended to it). */
  imagePath: string | undefined;
  /** Variables set by the agent (override the spec's). */
  agentEnv: Record<string, string>;
  limits: ContainerLimits;
  /** Disk quota for the writable layer (only where the storage driver supports it); undefined: none. */
  diskQuotaGb: number | undefined;
  /** The instance's own network (networkName); the container joins nothing else. */
  network: string;
}

/** Named volumes get a prefix and the agent id, so they never clash with the operator's own or another agent's. */
export function volumeName(agentId: string, name: string): string {
  return `rc-vol-${agentId}-${name}`;
}

export function volumeCreateRequest(name: string, agentId: string): DockerRequest {
  return { method: 'POST', path: '/volumes/create', body: { Name: name, Labels: { [LABEL_AGENT]: agentId } } };
}

const DEFAULT_PATH = '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin';

export function createContainerRequest(o: CreateOptions): DockerRequest {
  const { spec } = o;
  const env: Record<string, string> = { ...spec.env, ...o.agentEnv, RC_INSTANCE_DIR: CONTAINER_FILES_DIR };
  if (spec.ports[0] !== undefined) env.PORT = String(spec.ports[0]);
  if (o.volume) env.RC_VOLUME_DIR = CONTAINER_VOLUME_DIR;
  if (o.toolbox) env.PATH = `${o.imagePath || DEFAULT_PATH}:${CONTAINER_TOOLBOX_DIR}/bin`;
  const exposed: Record<string, object> = {};
  const bindings: Record<string, { HostIp: string; HostPort: string }[]> = {};
  for (const port of spec.ports) {
    exposed[`${port}/tcp`] = {};
    bindings[`${port}/tcp`] = [{ HostIp: o.bindIp, HostPort: String(o.hostPorts.get(port)) }];
  }
  const mounts: { Type: 'bind' | 'volume'; Source: string; Target: string; ReadOnly?: boolean }[] = [
    { Type: 'bind', Source: o.homeDir, Target: CONTAINER_FILES_DIR },
  ];
  if (o.volume) mounts.push({ Type: o.volume.type, Source: o.volume.source, Target: CONTAINER_VOLUME_DIR });
  if (o.toolbox) {
    mounts.push(
      { Type: 'bind', Source: o.toolbox.dir, Target: CONTAINER_TOOLBOX_DIR, ReadOnly: true },
      { Type: 'bind', Source: o.toolbox.dist, Target: `${CONTAINER_TOOLBOX_DIR}/app/dist`, ReadOnly: true },
      { Type: 'bind', Source: o.toolbox.nodeModules, Target: `${CONTAINER_TOOLBOX_DIR}/app/node_modules`, ReadOnly: true },
    );
  }
  if (o.authorizedKeysFile) mounts.push({ Type: 'bind', Source: o.authorizedKeysFile, Target: '/root/.ssh/authorized_keys', ReadOnly: true });
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
      // Only real GPUs (found by nvidia-smi) are requested, by UUID; simulated ones have no driver.
      DeviceRequests: o.gpuDeviceIds?.length ? [{ Driver: 'nvidia', DeviceIDs: o.gpuDeviceIds, Capabilities: [['gpu']] }] : [],
      RestartPolicy: { Name: 'no' },
      // A shell or server as PID 1 ignores SIGTERM unless it installs a handler: the engine's init
      // (tini) forwards signals and reaps, so `docker stop` ends the container within the grace.
      Init: true,
      Privileged: false,
      NetworkMode: o.network,
      CapDrop: ['ALL'],
      CapAdd: [...CONTAINER_CAPABILITIES],
      SecurityOpt: ['no-new-privileges'],
      ExtraHosts: [`${HOST_GATEWAY_NAME}:host-gateway`],
      Memory: o.limits.memoryBytes,
      MemorySwap: o.limits.memoryBytes, // no swap on top of the memory limit
      NanoCpus: o.limits.nanoCpus,
      PidsLimit: o.limits.pids,
      ...(o.diskQuotaGb ? { StorageOpt: { size: `${o.diskQuotaGb}G` } } : {}),
      LogConfig: { Type: 'json-file', Config: { 'max-size': '20m', 'max-file': '2' } },
      // Serving stacks share tensors through /dev/shm; the 64 MB default is far too small.
      ShmSize: o.gpus.length ? 8 * 1024 ** 3 : 256 * 1024 ** 2,
    },
  };
  return { method: 'POST', path: `/containers/create?${q({ name: containerName(spec.instanceId) })}`, body };
}

export const startRequest = (id: string): DockerRequest => ({ method: 'POST', path: `/containers/${enc(id)}/start` });
export const stopRequest = (id: string, graceMs: number): DockerRequest => ({
  method: 'POST',
  path: `/containers/${enc(id)}/stop?${q({ t: String(Math.ceil(graceMs / 1000)) })}`,
});
export const killRequest = (id: string): DockerRequest => ({ method: 'POST', path: `/containers/${enc(id)}/kill?signal=KILL` });
/** Long poll: answers when the container is not running (at once when it is not). */
export const waitRequest = (id: string): DockerRequest => ({ method: 'POST', path: `/containers/${enc(id)}/wait?condition=not-running` });
export const removeRequest = (id: string): DockerRequest => ({
  method: 'DELETE',
  path: `/containers/${enc(id)}?${q({ force: 'true', v: 'false' })}`,
});
export const inspectRequest = (id: string): DockerRequest => ({ method: 'GET', path: `/containers/${enc(id)}/json` });
export const listRequest = (agentId: string): DockerRequest => ({
  method: 'GET',
  path: `/containers/json?${q({ all: 'true', filters: JSON.stringify({ label: [`${LABEL_AGENT}=${agentId}`] }) })}`,
});
/** This agent's running containers, with their networks' addresses (the tunnel relay's identification). */
export const runningListRequest = (agentId: string): DockerRequest => ({
  method: 'GET',
  path: `/containers/json?${q({ filters: JSON.stringify({ label: [`${LABEL_AGENT}=${agentId}`], status: ['running'] }) })}`,
});

/** The part of a /containers/json entry the relay reads. */
export interface ListedContainer {
  Id: string;
  State?: string;
  Labels?: Record<string, string>;
  NetworkSettings?: { Networks?: Record<string, { IPAddress?: string; GlobalIPv6Address?: string }> };
}

/** The container's output since `sinceSec` (0: all of it), then new output as it comes. */
export const logsRequest = (id: string, sinceSec: number): DockerRequest => ({
  method: 'GET',
  path: `/containers/${enc(id)}/logs?${q({ follow: 'true', stdout: 'true', stderr: 'true', since: String(sinceSec) })}`,
});

export interface PullLine {
  status?: string;
  id?: string;
  error?: string;
  errorDetail?: { message?: string };
  progressDetail?: { current?: number; total?: number };
}

interface LayerProgress {
  done: boolean;
  current: number;
  total: number;
}

const DONE_STATUSES = new Set(['Pull complete', 'Already exists', 'Download complete']);

function formatBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)} kB`;
  return `${n} B`;
}

/** Follows the lines of /images/create and renders the pending message: `pulling image: 3/7 layers, 1.2 of 4.8 GB`. */
export class PullProgress {
  private readonly layers = new Map<string, LayerProgress>();

  /** Feeds one line; returns the message to show, or `{ error }` when the engine reports a failure. */
  push(line: PullLine): string | { error: string } {
    if (line.error || line.errorDetail?.message) return { error: line.error ?? line.errorDetail!.message! };
    // Lines about layers have a 12-hex id; the first line's id is the tag.
    if (line.id && line.status && /^[0-9a-f]{12}$/.test(line.id)) {
      const layer = this.layers.get(line.id) ?? { done: false, current: 0, total: 0 };
      if (DONE_STATUSES.has(line.status)) {
        layer.done = true;
        layer.current = layer.total;
      } else if (line.status === 'Downloading' && line.progressDetail) {
        layer.current = line.progressDetail.current ?? layer.current;
        layer.total = line.progressDetail.total ?? layer.total;
      }
      this.layers.set(line.id, layer);
    }
    return this.message();
  }

  message(): string {
    const n = this.layers.size;
    if (!n) return 'pulling image';
    let done = 0;
    let current = 0;
    let total = 0;
    for (const l of this.layers.values()) {
      if (l.done) done++;
      current += l.current;
      total += l.total;
    }
    return `pulling image: ${done}/${n} layers` + (total ? `, ${formatBytes(current)} of ${formatBytes(total)}` : '');
  }
}

/** The non-empty lines of a streamed engine answer (pull and build progress are one JSON object per line). */
export async function* streamLines(body: AsyncIterable<Buffer | string>): AsyncGenerator<string> {
  const decoder = new StringDecoder('utf8');
  let rest = '';
  for await (const chunk of body) {
    rest += typeof chunk === 'string' ? chunk : decoder.write(chunk);
    let nl: number;
    while ((nl = rest.indexOf('\n')) >= 0) {
      const line = rest.slice(0, nl).trim();
      rest = rest.slice(nl + 1);
      if (line) yield line;
    }
  }
  rest += decoder.end();
  if (rest.trim()) yield rest.trim();
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
