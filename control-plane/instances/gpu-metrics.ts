// The GPU gauges on the control plane's Prometheus listener (issue 41; RC_CONTROL_METRICS_PORT):
// per GPU of every host whose GPUs nvidia-smi found, its utilization and memory in use from the
// host's last telemetry sample, and its memory size. Labels: host (the fleet's name), index (the
// host's GPU index), uuid, model, and instance_id while an instance holds it (not `instance`:
// Prometheus gives every scraped series an `instance` label of its own, the target).
//
// Simulated GPUs have no series at all (their figures would be made up); a GPU of a host that is
// not reachable, or whose nvidia-smi failed, has its memory size only: the last sample is not
// current any more, and Prometheus marks a series gone stale when it disappears from a scrape.
import { labelValue } from '../../lib/prometheus.js';
import type { AgentConnection } from './agents.js';

const MIB = 1024 * 1024;

const FAMILIES = [
  ['rc_gpu_utilization_percent', 'Percent of the last sample period a kernel ran on the GPU (nvidia-smi utilization.gpu).'],
  ['rc_gpu_memory_used_bytes', 'GPU memory in use (nvidia-smi memory.used).'],
  ['rc_gpu_memory_total_bytes', 'GPU memory size (nvidia-smi memory.total).'],
] as const;

/** The GPU gauges of every host, in the Prometheus text format. */
export function gpuMetrics(agents: ReadonlyMap<string, AgentConnection>): string {
  const lines: string[][] = FAMILIES.map(() => []);
  for (const name of [...agents.keys()].sort()) {
    const conn = agents.get(name)!;
    const host = conn.host;
    if (!host || host.gpuSource !== 'nvidia-smi') continue;
    for (const g of host.gpus) {
      const held = g.instanceId ? `,instance_id="${labelValue(g.instanceId)}"` : '';
      const labels = `{host="${labelValue(name)}",index="${g.index}",uuid="${labelValue(g.uuid ?? '')}",model="${labelValue(g.model)}"${held}}`;
      lines[2]!.push(`rc_gpu_memory_total_bytes${labels} ${g.memoryMb * MIB}`);
      if (!conn.connected || !g.usage) continue;
      lines[0]!.push(`rc_gpu_utilization_percent${labels} ${g.usage.utilizationPct}`);
      lines[1]!.push(`rc_gpu_memory_used_bytes${labels} ${g.usage.memoryUsedMb * MIB}`);
    }
  }
  return FAMILIES.map(([name, help], i) => `# HELP ${name} ${help}\n# TYPE ${name} gauge\n${lines[i]!.map((l) => `${l}\n`).join('')}`).join('');
}
