// The launch spec the control plane sends to an agent, built only from the instance's snapshot
// (so a resend after a crash is byte-identical and the agent's StartInstance stays idempotent).
import type { LaunchSpecInput } from '../../agent/types.js';
import type { InstanceRow, TemplateSnapshot } from './store.js';

/** The port SSH is routed to inside an instance. */
export const SSH_PORT = 22;
/** Main port of a template without app_port (a notebook UI). */
export const DEFAULT_PORTS: Record<string, number> = { jupyter: 8888, gradio: 7860, streamlit: 8501, comfyui: 8188, vllm: 8000, sglang: 30000 };

/** Name of the account's persistent volume (agent: a directory under its data dir, or a Docker volume). */
export const volumeName = (accountId: number) => `rc-account-${accountId}`;

/** Runs before the template's command when storage is persistent: a fixed path to the volume in the working directory. */
const PERSISTENT_PRELUDE = 'export RC_PERSISTENT_DIR="$RC_VOLUME_DIR"; ln -sfn "$RC_VOLUME_DIR" persistent 2>/dev/null; ';

export function mainPort(t: TemplateSnapshot): number | undefined {
  return t.app_port ?? DEFAULT_PORTS[t.instance_type];
}

/**
 * Why an instance is offered no SSH: its template has SSH off, its image serves none (the image
 * catalog's `ssh`), or no SSH key was saved when it launched; null when SSH is offered. A snapshot
 * from before the catalog said (no `image_ssh`) is offered SSH whenever its template enables it,
 * as it was then, so a spec resent after an upgrade stays the same.
 */
export function sshMissing(t: TemplateSnapshot): 'template' | 'image' | 'key' | null {
  if (!t.ssh_enabled) return 'template';
  if (t.image_ssh === undefined) return null;
  if (!t.image_ssh) return 'image';
  return t.ssh_public_key ? null : 'key';
}

export function buildSpec(row: InstanceRow, t: TemplateSnapshot): LaunchSpecInput & { instanceId: string } {
  const env: Record<string, string> = { RC_GPU_COUNT: String(row.gpu_count), RC_INSTANCE_TYPE: t.instance_type, RC_BRANCH: t.branch };
  if (t.repo_url) env.RC_REPO_URL = t.repo_url;
  if (t.notebook_path) env.RC_NOTEBOOK_PATH = t.notebook_path;
  if (t.id) env.RC_TEMPLATE_ID = String(t.id);
  const port = mainPort(t);
  const ports = port !== undefined ? [port] : [];
  // Port 22 only where something can log in: an image with an SSH server and a saved key.
  const ssh = sshMissing(t) === null;
  if (ssh && !ports.includes(SSH_PORT)) ports.push(SSH_PORT);
  const command = t.start_command ?? '';
  return {
    instanceId: row.id,
    image: t.image,
    instanceType: t.instance_type,
    startCommand: t.persistent_storage && command.trim() ? PERSISTENT_PRELUDE + command : command,
    env,
    ports,
    gpuCount: row.gpu_count,
    diskGb: row.disk_gb,
    sshPublicKey: ssh ? (t.ssh_public_key ?? '') : '',
    volume: t.persistent_storage ? volumeName(row.account_id) : '',
    readyTimeoutMs: 0,
  };
}
