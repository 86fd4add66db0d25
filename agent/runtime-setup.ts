// The runtime an agent runs its instances with, built from its settings: containers through the
// Docker Engine API, or host processes (one trusted user on their own machine).
import { isIP } from 'node:net';
import { join } from 'node:path';
import type { Logger } from '../lib/log.js';
import { isLoopbackHost } from './broker-relay.js';
import type { AgentDirs } from './data-dir.js';
import type { PullPolicy } from './docker-api.js';
import { DockerRuntime, ISOLATION_DEFAULTS, type DockerRuntimeOptions, type IsolationSettings } from './docker-runtime.js';
import { lookupUser, ProcessRuntime } from './process-runtime.js';
import type { Runtime } from './runtime.js';
import { prepareToolbox } from './toolbox.js';
import type { RuntimeKind } from './types.js';

/** What the docker runtime takes from the settings. */
export interface DockerSettings {
  pullPolicy: PullPolicy;
  /** Address published ports bind; empty: the advertise address when it is an IP address, else 127.0.0.1. */
  publishHost: string;
  limitsPerGpu: { memoryMb: number; cpus: number; pids: number };
  diskQuota: 'auto' | 'off';
  /** Mount the toolbox (rc, rc-tunnel) at /opt/rc. */
  toolbox: boolean;
  buildLocalImage?: DockerRuntimeOptions['buildLocalImage'];
  /** Per-instance networks and the firewall (defaults: ISOLATION_DEFAULTS). */
  isolation: IsolationSettings;
  /** Connections one container may hold open through the tunnel relay (broker-relay.ts RELAY_PER_INSTANCE). */
  relayPerInstance?: number;
}

export const DOCKER_DEFAULTS: DockerSettings = {
  pullPolicy: 'if-not-present',
  publishHost: '',
  limitsPerGpu: { memoryMb: 65_536, cpus: 8, pids: 4096 },
  diskQuota: 'auto',
  toolbox: true,
  isolation: ISOLATION_DEFAULTS,
};

/** The agent's settings of each runtime (part of AgentOptions). */
export interface RuntimeSettings {
  /** Docker Engine API socket (docker runtime). */
  dockerSocket?: string;
  /** Process runtime, agent running as root: the user instances run as (must exist); default nobody. */
  processUser?: string;
  /**
   * Process runtime: `refuse` (default) starts nothing while the agent listens on a non-loopback
   * address (tenants would run as host processes); `allow` is the operator's explicit choice.
   */
  processUntrusted?: 'refuse' | 'allow';
  /** Docker runtime settings (defaults: DOCKER_DEFAULTS). */
  docker?: Partial<DockerSettings>;
}

/** Where the runtime's agent is: its id, its addresses and its directories. */
export interface RuntimeContext {
  agentId: string;
  /** The address the agent binds. */
  host: string;
  /** Where instance host ports are reachable. */
  advertiseHost: string;
  dirs: AgentDirs;
  logger: Logger;
}

/** Published ports bind the advertise address when it is an IP address, else loopback: never all interfaces unless configured. */
export function publishHostFor(configured: string, advertiseHost: string): string {
  if (configured) return configured;
  return isIP(advertiseHost) && advertiseHost !== '0.0.0.0' && advertiseHost !== '::' ? advertiseHost : '127.0.0.1';
}

export function createRuntime(kind: RuntimeKind, settings: RuntimeSettings, context: RuntimeContext): Runtime {
  return kind === 'docker' ? dockerRuntime(settings, context) : processRuntime(settings, context);
}

function dockerRuntime(settings: RuntimeSettings, { agentId, host, advertiseHost, dirs, logger }: RuntimeContext): DockerRuntime {
  const d = { ...DOCKER_DEFAULTS, ...settings.docker };
  return new DockerRuntime({
    agentId,
    socketPath: settings.dockerSocket ?? '/var/run/docker.sock',
    logger,
    publishHost: publishHostFor(d.publishHost, advertiseHost),
    pullPolicy: d.pullPolicy,
    limitsPerGpu: d.limitsPerGpu,
    diskQuota: d.diskQuota,
    toolbox: d.toolbox ? prepareToolbox(join(dirs.dataDir, 'toolbox')) : undefined,
    buildLocalImage: d.buildLocalImage,
    isolation: { ...ISOLATION_DEFAULTS, ...d.isolation },
    loopbackOnly: isLoopbackHost(host),
    relayPerInstance: d.relayPerInstance,
  });
}

/** Host processes; an agent other machines reach refuses to start any unless the operator allows it. */
function processRuntime(settings: RuntimeSettings, { agentId, host, dirs, logger }: RuntimeContext): ProcessRuntime {
  const loopback = isLoopbackHost(host);
  const refusal =
    !loopback && settings.processUntrusted !== 'allow'
      ? `The process runtime runs instances as host processes (no isolation from the host network or each other) and this agent listens on ${host}, reachable from other machines: it starts nothing. Use the docker runtime, or set RC_AGENT_PROCESS_UNTRUSTED=allow if every account is trusted.`
      : undefined;
  if (refusal) logger.warn(refusal);
  return new ProcessRuntime({
    agentId,
    refusal,
    binDir: join(dirs.instancesRoot, 'bin'),
    user: process.getuid?.() === 0 ? lookupUser(settings.processUser ?? 'nobody') : undefined,
  });
}
