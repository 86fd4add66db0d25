// The GPU side of the idle rule (issue 41): an instance is active while one of its GPUs is busy,
// i.e. averages at least `instanceGpuBusyPct` utilization over the last `instanceGpuBusyWindowSec`,
// so a notebook training overnight with its browser closed is not destroyed as idle. The samples
// come from the agents' telemetry (agent/gpu-telemetry.ts) in their host status; each one that
// leaves a GPU busy counts as activity, like proxy or SSH traffic. Simulated GPUs report no
// samples, so only traffic counts for them.
//
// The defaults come from a real H200: 0 % idle, 100 % under a dense matmul, but only 0-5 % while a
// Python-bound decode loop generates one token at a time (the GPU mostly waits). 1 % averaged over
// 5 minutes counts that loop as work and an idle GPU (0 %) as idle.
import type { HostInfo } from '../../agent/types.js';

interface GpuSamples {
  instanceId: string;
  /** Control-plane time of arrival and utilization, oldest first, within the window. */
  samples: { atMs: number; utilizationPct: number }[];
  /** The agent's sample time of the last one (a host item repeats it when only an assignment changed). */
  lastSampledAtMs: number;
}

export class GpuActivity {
  /** `<host>/<gpu index>` -> the samples of the instance holding that GPU. */
  private readonly gpus = new Map<string, GpuSamples>();

  constructor(
    private readonly settings: { busyPct: number; windowMs: number },
    /** Marks the instance active at `atMs` (the idle timer restarts). */
    private readonly active: (instanceId: string, atMs: number) => void,
  ) {}

  /** Takes the telemetry of a host status that just arrived. */
  record(hostName: string, host: HostInfo, nowMs: number): void {
    if (this.settings.busyPct <= 0) return;
    const seen = new Set<string>();
    for (const g of host.gpus) {
      if (!g.instanceId || !g.usage) continue;
      const key = `${hostName}/${g.index}`;
      seen.add(key);
      let entry = this.gpus.get(key);
      if (!entry || entry.instanceId !== g.instanceId) {
        entry = { instanceId: g.instanceId, samples: [], lastSampledAtMs: 0 };
        this.gpus.set(key, entry);
      }
      if (g.usage.sampledAtMs === entry.lastSampledAtMs) continue;
      entry.lastSampledAtMs = g.usage.sampledAtMs;
      entry.samples.push({ atMs: nowMs, utilizationPct: g.usage.utilizationPct });
      while (entry.samples.length && entry.samples[0]!.atMs <= nowMs - this.settings.windowMs) entry.samples.shift();
      const mean = entry.samples.reduce((sum, s) => sum + s.utilizationPct, 0) / entry.samples.length;
      if (mean >= this.settings.busyPct) this.active(g.instanceId, nowMs);
    }
    // GPUs of this host that are free now, or no longer sampled: their history goes.
    for (const key of this.gpus.keys()) if (key.startsWith(`${hostName}/`) && !seen.has(key)) this.gpus.delete(key);
  }

  /** Forgets a host (removed from the fleet). */
  forget(hostName: string): void {
    for (const key of this.gpus.keys()) if (key.startsWith(`${hostName}/`)) this.gpus.delete(key);
  }
}
