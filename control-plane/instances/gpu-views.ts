// What the API shows of GPUs and their short history (issue 41): an instance's own GPUs to its
// owner (GET /api/notebook/gpus, and the `gpus` events of its status stream), a host's every GPU
// to operators (GET /api/operator/hosts/:name/gpus). Figures come from the host's last status
// (agent telemetry), the history from GpuHistory; simulated GPUs report nothing, and the view
// says why there are no figures rather than showing made-up ones.
import type { Gpu, HostInfo } from '../../agent/types.js';
import type { AgentConnection } from './agents.js';
import type { GpuHistory, GpuSample } from './gpu-history.js';

/**
 * Why figures are there or not: `sampled` (nvidia-smi figures), `simulated` (the host's GPUs are
 * configured ones: nothing to sample), `unavailable` (real GPUs but no current sample: sampling
 * off, nvidia-smi failing, not sampled yet, or the host not reachable), `none` (no GPU held: the
 * instance is queued, ended, or its host has not reported).
 */
export type Telemetry = 'sampled' | 'simulated' | 'unavailable' | 'none';

/** A history as columns, oldest first (a compact shape: 720 samples are about 16 kB of JSON). */
export interface GpuSeries {
  sampled_at_ms: number[];
  utilization_pct: number[];
  memory_used_mb: number[];
}

export interface GpuView {
  /** The host's GPU index. */
  index: number;
  /** nvidia-smi's GPU UUID; null for simulated GPUs. */
  uuid: string | null;
  model: string;
  memory_mb: number;
  utilization_pct: number | null;
  memory_used_mb: number | null;
  sampled_at: string | null;
  /** Absent where only the latest figures are sent (the status stream's `gpus` events). */
  history?: GpuSeries;
}

export interface HostGpuHistoryView {
  host: string;
  telemetry: Telemetry;
  gpus: (GpuView & { instance_id: string | null })[];
}

export interface InstanceGpusView {
  instance_id: string;
  telemetry: Telemetry;
  gpus: GpuView[];
}

function series(samples: GpuSample[]): GpuSeries {
  return {
    sampled_at_ms: samples.map((s) => s.atMs),
    utilization_pct: samples.map((s) => s.utilizationPct),
    memory_used_mb: samples.map((s) => s.memoryUsedMb),
  };
}

/** The telemetry state of a host's `gpus` (the ones shown). */
function telemetryOf(conn: AgentConnection, host: HostInfo, gpus: Gpu[]): Telemetry {
  if (gpus.length === 0) return 'none';
  if (host.gpuSource === 'configured') return 'simulated';
  return conn.connected && gpus.some((g) => g.usage) ? 'sampled' : 'unavailable';
}

function gpuView(g: Gpu, live: boolean, history: GpuSample[] | undefined): GpuView {
  const usage = live ? g.usage : undefined;
  return {
    index: g.index,
    uuid: g.uuid ?? null,
    model: g.model,
    memory_mb: g.memoryMb,
    utilization_pct: usage?.utilizationPct ?? null,
    memory_used_mb: usage?.memoryUsedMb ?? null,
    sampled_at: usage ? new Date(usage.sampledAtMs).toISOString() : null,
    ...(history ? { history: series(history) } : {}),
  };
}

/**
 * The GPUs `instanceId` holds on `conn`'s host, each with its figures and (with `history`) the
 * samples taken while the instance held it. `conn` undefined: not placed.
 */
export function instanceGpusView(instanceId: string, conn: AgentConnection | undefined, history: GpuHistory | undefined): InstanceGpusView {
  const host = conn?.host;
  if (!conn || !host) return { instance_id: instanceId, telemetry: 'none', gpus: [] };
  const held = host.gpus.filter((g) => g.instanceId === instanceId);
  return {
    instance_id: instanceId,
    telemetry: telemetryOf(conn, host, held),
    gpus: held.map((g) => gpuView(g, conn.connected, history?.samples(conn.id, g.index, instanceId))),
  };
}

/** Every GPU of a host with its holder, figures and history (operators only). */
export function hostGpusView(conn: AgentConnection, history: GpuHistory): HostGpuHistoryView {
  const host = conn.host;
  if (!host) return { host: conn.id, telemetry: 'none', gpus: [] };
  return {
    host: conn.id,
    telemetry: telemetryOf(conn, host, host.gpus),
    gpus: host.gpus.map((g) => ({ ...gpuView(g, conn.connected, history.samples(conn.id, g.index)), instance_id: g.instanceId || null })),
  };
}
