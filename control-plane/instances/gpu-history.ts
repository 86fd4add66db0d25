// A short history of every GPU's telemetry (issue 41): the last `capacity` samples the host agents
// reported (RC_INSTANCE_GPU_HISTORY_SAMPLES, 720: one hour at the agents' default 5 s), for the
// console's sparklines. Kept in this control-plane process's memory, not in SQLite: it is a view
// of the last hour, worth nothing after a restart, and a table would take a write per GPU every
// few seconds. Memory is bounded by construction: one ring of typed arrays per GPU (13 bytes of
// arrays and a holder reference a sample; measured 24-28 bytes: 1.3-1.6 MB for 80 GPUs at the default), allocated when the GPU is
// first sampled and dropped with its host (removed from the fleet) or when the host no longer
// reports it.
//
// Each sample keeps the instance that held the GPU then, so an instance's history is the part of
// its GPUs' rings it held: the previous tenant's figures are never shown to the next one, and an
// ended instance has none (nothing of it is shown once it ends; its samples age out of the ring).
import type { HostInfo } from '../../agent/types.js';

export interface GpuSample {
  /** The agent's time of the sample (ms). */
  atMs: number;
  utilizationPct: number;
  memoryUsedMb: number;
  /** The instance holding the GPU then; '' when free. */
  instanceId: string;
}

/** One GPU's last samples, oldest overwritten first. */
class SampleRing {
  private readonly at: Float64Array;
  private readonly utilization: Uint8Array;
  private readonly memory: Uint32Array;
  private readonly holder: string[];
  private next = 0;
  private size = 0;

  constructor(readonly capacity: number) {
    this.at = new Float64Array(capacity);
    this.utilization = new Uint8Array(capacity);
    this.memory = new Uint32Array(capacity);
    this.holder = new Array<string>(capacity).fill('');
  }

  push(s: GpuSample): void {
    const i = this.next;
    this.at[i] = s.atMs;
    this.utilization[i] = Math.min(100, Math.max(0, s.utilizationPct));
    this.memory[i] = Math.max(0, s.memoryUsedMb);
    this.holder[i] = s.instanceId;
    this.next = (i + 1) % this.capacity;
    this.size = Math.min(this.size + 1, this.capacity);
  }

  /** The samples oldest first, those of `instanceId` only when given. */
  samples(instanceId?: string): GpuSample[] {
    const out: GpuSample[] = [];
    const first = (this.next + this.capacity - this.size) % this.capacity;
    for (let k = 0; k < this.size; k++) {
      const i = (first + k) % this.capacity;
      if (instanceId !== undefined && this.holder[i] !== instanceId) continue;
      out.push({ atMs: this.at[i]!, utilizationPct: this.utilization[i]!, memoryUsedMb: this.memory[i]!, instanceId: this.holder[i]! });
    }
    return out;
  }
}

interface GpuTrack {
  /** The agent's time of the last sample taken in (kept with capacity 0 too: new samples are still told). */
  lastAtMs: number;
  ring: SampleRing | undefined;
}

export class GpuHistory {
  /** Host name -> GPU index -> its last sample time and ring. */
  private readonly hosts = new Map<string, Map<number, GpuTrack>>();

  constructor(readonly capacity: number) {}

  /**
   * Takes the telemetry of a host status that just arrived; returns the instances whose GPUs got
   * a new sample (a host item that only moved a GPU to another holder repeats the last sample: not
   * counted twice). With capacity 0 nothing is kept, but new samples are still told.
   */
  record(hostName: string, host: HostInfo): Set<string> {
    const fresh = new Set<string>();
    let tracks = this.hosts.get(hostName);
    if (!tracks) this.hosts.set(hostName, (tracks = new Map()));
    const reported = new Set<number>();
    for (const g of host.gpus) {
      reported.add(g.index);
      if (!g.usage) continue; // not sampled now (simulated, sampling off, nvidia-smi failing): a gap
      let track = tracks.get(g.index);
      if (!track) tracks.set(g.index, (track = { lastAtMs: 0, ring: this.capacity > 0 ? new SampleRing(this.capacity) : undefined }));
      if (g.usage.sampledAtMs <= track.lastAtMs) continue;
      track.lastAtMs = g.usage.sampledAtMs;
      track.ring?.push({ atMs: g.usage.sampledAtMs, utilizationPct: g.usage.utilizationPct, memoryUsedMb: g.usage.memoryUsedMb, instanceId: g.instanceId });
      if (g.instanceId) fresh.add(g.instanceId);
    }
    // A GPU the host no longer reports (an agent restarted with another inventory): its history goes.
    for (const index of tracks.keys()) if (!reported.has(index)) tracks.delete(index);
    return fresh;
  }

  /** The samples of GPU `index` of a host, oldest first; of `instanceId`'s time on it only, when given. */
  samples(hostName: string, index: number, instanceId?: string): GpuSample[] {
    return this.hosts.get(hostName)?.get(index)?.ring?.samples(instanceId) ?? [];
  }

  /** Forgets a host (removed from the fleet). */
  forget(hostName: string): void {
    this.hosts.delete(hostName);
  }
}
