// The status object of SPEC ("at least status, message, and on failure reason and detail"),
// with what a client needs besides. Times are ISO strings; credits are numbers.
import type { HostInfo } from '../../agent/types.js';
import { accruedMicros, MICROS_PER_CREDIT } from './billing.js';
import { mainPort, sshMissing } from './launch-spec.js';
import { EndReason } from './lifecycle.js';
import type { TunnelView } from './live-tunnels.js';
import type { PublicUrls } from './settings.js';
import { snapshotOf, type InstanceRow, type TemplateSnapshot } from './store.js';

export interface InstanceStatus {
  instance_id: string;
  status: InstanceRow['state'];
  message: string;
  reason: string | null;
  detail: string | null;
  template_id: number | null;
  template_title: string;
  instance_type: string;
  image: string;
  gpu_count: number;
  disk_gb: number;
  persistent_storage: boolean;
  created_at: string;
  placed_at: string | null;
  ready_at: string | null;
  ended_at: string | null;
  /** Maximum lifetime reached at this time (set once placed on a host). */
  expires_at: string | null;
  /** Destroyed at this time unless activity is seen first (ready instances only). */
  idle_expires_at: string | null;
  base_url: string;
  /** vllm and sglang: the OpenAI-compatible base URL of the dedicated endpoint. */
  dedicated_base_url: string | null;
  /** vllm and sglang: the model name the server answers to, read from the start command (null when it cannot be told). */
  served_model: string | null;
  /** Where SSH answers; null unless the template enables it, the image serves it and a key was saved at launch. */
  ssh: { host: string; port: number } | null;
  /** Why SSH is not offered: `template` (SSH off), `image` (it serves no SSH), `key` (no SSH key saved at launch); null when it is. */
  ssh_missing: 'template' | 'image' | 'key' | null;
  credits_per_hour: number;
  credits_spent: number;
  host: string | null;
  /**
   * The instance's GPUs as its host last sampled them (issue 41: utilization %, memory in use);
   * null unless it holds GPUs on a host that samples them (real GPUs; simulated ones report nothing).
   */
  gpus: InstanceGpuUsage[] | null;
  /**
   * The platform is about to stop this instance (issue 41): the sooner of its idle timeout and its
   * lifetime, once it is within RC_INSTANCE_STOP_WARNING_SEC; null otherwise. Activity clears an
   * idle warning.
   */
  stop_warning: StopWarning | null;
  /** Why it ended, in one word (its `reason` grouped); null while it runs. */
  stopped_by: StoppedBy | null;
  /**
   * How far a pending launch's image step is, from its host's message: `image_build` (docker
   * build's Dockerfile steps, `building image: step k/n`) or `image_pull` (`pulling image: k/n
   * layers`); null otherwise.
   */
  progress: LaunchProgress | null;
  /** Its rc-tunnel tunnels connected now, by port (live-tunnels.ts); [] unless it is pending or ready. */
  tunnels: TunnelView[];
}

export interface LaunchProgress {
  stage: 'image_build' | 'image_pull';
  done: number;
  total: number;
}

/** The progress a pending instance's message tells (the agent's wording: agent/images/build.ts, agent/docker-api.ts). */
export function launchProgress(state: InstanceRow['state'], message: string): LaunchProgress | null {
  if (state !== 'pending') return null;
  const build = /^building image: step (\d+)\/(\d+)/.exec(message);
  if (build) return { stage: 'image_build', done: Number(build[1]), total: Number(build[2]) };
  const pull = /^pulling image: (\d+)\/(\d+) layers/.exec(message);
  return pull ? { stage: 'image_pull', done: Number(pull[1]), total: Number(pull[2]) } : null;
}

export interface StopWarning {
  reason: 'idle' | 'lifetime';
  stops_at: string;
  seconds_left: number;
}

/** Who or what ended an instance: its owner, the idle timeout, the lifetime, the credits, an operator, its host, or a failure. */
export type StoppedBy = 'owner' | 'idle' | 'lifetime' | 'credits' | 'operator' | 'host' | 'failure';

const STOPPED_BY: Readonly<Record<string, StoppedBy>> = {
  [EndReason.idle]: 'idle',
  [EndReason.lifetime]: 'lifetime',
  [EndReason.credits]: 'credits',
  [EndReason.operator]: 'operator',
  [EndReason.accountDisabled]: 'operator',
  [EndReason.hostLost]: 'host',
  [EndReason.hostRemoved]: 'host',
  [EndReason.stoppedByHost]: 'host',
  [EndReason.lost]: 'host',
};

/** `stopped_by` of a row: null while it runs; the owner's destroy has no reason; anything unlisted ended in a failure. */
export function stoppedBy(r: Pick<InstanceRow, 'state' | 'reason'>): StoppedBy | null {
  if (r.state !== 'stopping' && r.state !== 'stopped' && r.state !== 'failed') return null;
  if (r.reason === null) return r.state === 'failed' ? 'failure' : 'owner';
  return STOPPED_BY[r.reason] ?? 'failure';
}

/**
 * The coming stop of a live instance, when it is within `warningMs`: the idle timeout (ready
 * instances, from their last activity) or the lifetime, whichever comes first. undefined otherwise.
 */
export function stopWarning(r: InstanceRow, now: number, idleTimeoutMs: number, warningMs: number): StopWarning | undefined {
  if (warningMs <= 0 || (r.state !== 'ready' && r.state !== 'pending')) return undefined;
  const idleFrom = r.last_activity_at ?? r.ready_at;
  const idleAt = r.state === 'ready' && idleFrom !== null ? idleFrom + idleTimeoutMs : Number.POSITIVE_INFINITY;
  const lifeAt = r.expires_at ?? Number.POSITIVE_INFINITY;
  const at = Math.min(idleAt, lifeAt);
  if (!Number.isFinite(at) || at - now > warningMs) return undefined;
  return { reason: idleAt <= lifeAt ? 'idle' : 'lifetime', stops_at: new Date(at).toISOString(), seconds_left: Math.max(0, Math.ceil((at - now) / 1000)) };
}

export interface InstanceGpuUsage {
  /** The host's GPU index. */
  index: number;
  model: string;
  memory_mb: number;
  utilization_pct: number;
  memory_used_mb: number;
  sampled_at: string;
}

/** The telemetry of the GPUs `instanceId` holds on a host, from the host's last status; null when there is none. */
export function instanceGpuUsage(host: HostInfo | undefined, instanceId: string): InstanceGpuUsage[] | null {
  const out: InstanceGpuUsage[] = [];
  for (const g of host?.gpus ?? []) {
    if (g.instanceId !== instanceId || !g.usage) continue;
    out.push({
      index: g.index,
      model: g.model,
      memory_mb: g.memoryMb,
      utilization_pct: g.usage.utilizationPct,
      memory_used_mb: g.usage.memoryUsedMb,
      sampled_at: new Date(g.usage.sampledAtMs).toISOString(),
    });
  }
  return out.length ? out : null;
}

/**
 * The message of a queued instance: it fits some host but none has the GPUs free now, and where it
 * stands (1 = placed next; first come first served, so the head waits for the GPUs it needs).
 */
export function queuedMessage(position: number): string {
  return `waiting for capacity (position ${position} in the queue)`;
}

const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString());

/**
 * Browser access: the platform API's hand-over route, which (for the owner's browser session)
 * redirects to the app's own origin on the instance proxy with a single-use ticket
 * (control-plane/proxy/open-route.ts). The app's origin itself is `instanceOrigin(urls.proxy, id)`.
 */
export function instanceBaseUrl(urls: PublicUrls, id: string): string {
  return `${urls.api}/api/instances/${id}/open`;
}

/** The OpenAI-compatible base URL of a vllm or sglang instance: instance and routed port in the path. */
export function dedicatedBaseUrl(urls: PublicUrls, id: string, t: TemplateSnapshot): string | null {
  if (t.instance_type !== 'vllm' && t.instance_type !== 'sglang') return null;
  return `${urls.gateway}/dedicated/${id}/${mainPort(t)}/v1`;
}

/**
 * The model name a vllm or sglang start command serves: the first `--served-model-name` (vLLM
 * answers to each of several and reports the first, vllm-project/vllm#2894), else `--model`,
 * `--model-path` (SGLang) or `vllm serve <model>`, which both servers use as the name by default.
 * Read-only and best effort: a command built in a script is not parsed, and gives null.
 */
export function servedModel(t: TemplateSnapshot): string | null {
  if ((t.instance_type !== 'vllm' && t.instance_type !== 'sglang') || !t.start_command) return null;
  const cmd = t.start_command;
  const flag = (name: string) => new RegExp(`(?:^|\\s)--${name}(?:=|\\s+)["']?([^\\s"';&|]+)`).exec(cmd)?.[1];
  return flag('served-model-name') ?? flag('model') ?? flag('model-path') ?? /\bvllm\s+serve\s+["']?([^\s"'-][^\s"';&|]*)/.exec(cmd)?.[1] ?? null;
}

export function toStatus(r: InstanceRow, now: number, urls: PublicUrls, idleTimeoutMs: number, stopWarningMs = 0): InstanceStatus {
  const t = snapshotOf(r);
  const spentMicros = r.ready_at === null ? 0 : accruedMicros(r.micros_per_hour, (r.ended_at ?? now) - r.ready_at);
  const idleFrom = r.last_activity_at ?? r.ready_at;
  return {
    instance_id: r.id,
    status: r.state,
    message: r.message,
    reason: r.reason,
    detail: r.detail,
    template_id: r.template_id,
    template_title: t.title,
    instance_type: t.instance_type,
    image: t.image,
    gpu_count: r.gpu_count,
    disk_gb: r.disk_gb,
    persistent_storage: t.persistent_storage,
    created_at: iso(r.created_at)!,
    placed_at: iso(r.placed_at),
    ready_at: iso(r.ready_at),
    ended_at: iso(r.ended_at),
    expires_at: iso(r.expires_at),
    idle_expires_at: r.state === 'ready' && idleFrom !== null ? iso(idleFrom + idleTimeoutMs) : null,
    base_url: instanceBaseUrl(urls, r.id),
    dedicated_base_url: dedicatedBaseUrl(urls, r.id, t),
    served_model: servedModel(t),
    ssh: sshMissing(t) === null && r.endpoint_host && r.ssh_port ? { host: r.endpoint_host, port: r.ssh_port } : null,
    ssh_missing: sshMissing(t),
    credits_per_hour: r.micros_per_hour / MICROS_PER_CREDIT,
    credits_spent: spentMicros / MICROS_PER_CREDIT,
    host: r.agent_id,
    gpus: null,
    stop_warning: stopWarning(r, now, idleTimeoutMs, stopWarningMs) ?? null,
    stopped_by: stoppedBy(r),
    progress: launchProgress(r.state, r.message),
    tunnels: [],
  };
}
