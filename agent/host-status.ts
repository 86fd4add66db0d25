// The host's status as the control plane sees it (GetHost, and the `host` items of WatchEvents):
// who the agent is, its GPUs with their holders and their telemetry, and the listeners told when
// any of it changes (a GPU taken or freed, a new telemetry sample).
import { hostname } from 'node:os';
import type { GpuAllocator } from './gpus.js';
import type { GpuUsage, HostInfo, RuntimeKind } from './types.js';

export interface HostStatusOptions {
  agentId: () => string;
  runtime: RuntimeKind;
  advertiseHost: string;
  gpus: GpuAllocator;
  /** The last telemetry sample of a GPU (gpu-telemetry.ts); absent: none is sampled (simulated GPUs, sampling off). */
  usage?: (index: number) => GpuUsage | undefined;
}

export class HostStatus {
  private readonly listeners = new Set<() => void>();

  constructor(private readonly opts: HostStatusOptions) {}

  info(): HostInfo {
    const { gpus, usage } = this.opts;
    return {
      agentId: this.opts.agentId(),
      hostname: hostname(),
      runtime: this.opts.runtime,
      advertiseHost: this.opts.advertiseHost,
      gpus: gpus.snapshot().map((g) => {
        const u = usage?.(g.index);
        return u ? { ...g, usage: u } : g;
      }),
      freeGpus: gpus.free,
      gpuSource: gpus.inventory.source,
    };
  }

  /** Calls `listener` on every change; returns the unsubscribe function. */
  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  changed(): void {
    for (const l of this.listeners) l();
  }
}
