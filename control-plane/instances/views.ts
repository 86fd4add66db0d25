// The status object of SPEC ("at least status, message, and on failure reason and detail"),
// with what a client needs besides. Times are ISO strings; credits are numbers.
import { accruedMicros, MICROS_PER_CREDIT } from './billing.js';
import { mainPort } from './launch-spec.js';
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
  ssh: { host: string; port: number } | null;
  credits_per_hour: number;
  credits_spent: number;
  host: string | null;
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

export function toStatus(r: InstanceRow, now: number, urls: PublicUrls, idleTimeoutMs: number): InstanceStatus {
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
    ssh: t.ssh_enabled && r.endpoint_host && r.ssh_port ? { host: r.endpoint_host, port: r.ssh_port } : null,
    credits_per_hour: r.micros_per_hour / MICROS_PER_CREDIT,
    credits_spent: spentMicros / MICROS_PER_CREDIT,
    host: r.agent_id,
  };
}
