// GPU inventory (nvidia-smi when present, else configured) and the allocator that never assigns a
// GPU twice. Allocation is synchronous, so concurrent StartInstance calls cannot race.
import { execFileSync } from 'node:child_process';
import type { Gpu } from './types.js';

export interface GpuDevice {
  index: number;
  model: string;
  memoryMb: number;
  /** nvidia-smi's GPU UUID (what container device requests name); absent for simulated GPUs. */
  uuid?: string;
}

export interface GpuConfig {
  /** 'auto': nvidia-smi when it answers, else the configured ones; 'configured': never ask nvidia-smi. */
  detect: 'auto' | 'configured';
  count: number;
  model: string;
  memoryMb: number;
  /** The nvidia-smi to run (default `nvidia-smi`, looked up on PATH). */
  command?: string;
}

export interface GpuInventory {
  devices: GpuDevice[];
  source: 'nvidia-smi' | 'configured';
}

/** Parses `nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits`. */
export function parseNvidiaSmi(output: string): GpuDevice[] {
  const devices: GpuDevice[] = [];
  for (const line of output.split('\n')) {
    const parts = line.split(',').map((p) => p.trim());
    if (parts.length < 4) continue;
    const index = Number(parts[0]);
    const uuid = parts[1]!;
    const memoryMb = Number(parts[parts.length - 1]);
    const model = parts.slice(2, -1).join(',');
    if (!Number.isInteger(index) || index < 0 || !model || !/^GPU-[0-9a-fA-F-]+$/.test(uuid)) continue;
    devices.push({ index, uuid, model, memoryMb: Number.isFinite(memoryMb) ? Math.round(memoryMb) : 0 });
  }
  return devices;
}

export function detectGpus(config: GpuConfig): GpuInventory {
  if (config.detect === 'auto') {
    try {
      const out = execFileSync(config.command ?? 'nvidia-smi', ['--query-gpu=index,uuid,name,memory.total', '--format=csv,noheader,nounits'], {
        encoding: 'utf8',
        timeout: 10_000,
        stdio: ['ignore', 'pipe', 'ignore'],
      });
      const devices = parseNvidiaSmi(out);
      if (devices.length) return { devices, source: 'nvidia-smi' };
    } catch {
      // No nvidia-smi (or no driver): fall back to the configured inventory.
    }
  }
  const devices = Array.from({ length: config.count }, (_, index) => ({ index, model: config.model, memoryMb: config.memoryMb }));
  return { devices, source: 'configured' };
}

/**
 * The GPU variables of an instance's environment (they override the spec's).
 *
 * Process runtime: the host's indexes. The instance shares the host's numbering (it sees every
 * GPU of the host), so CUDA_VISIBLE_DEVICES is what confines it to its own.
 *
 * Docker runtime: the engine's device request (by UUID) puts only the assigned GPUs into the
 * container, where CUDA numbers them from 0. A host index there is wrong: on a host with GPUs
 * 0-3, an instance on GPUs 2 and 3 sees two devices, 0 and 1, and `CUDA_VISIBLE_DEVICES=2,3`
 * leaves it none (PyTorch saw 0 devices with `CUDA_VISIBLE_DEVICES=1`, issue 41). So
 * CUDA_VISIBLE_DEVICES is left unset: every GPU the container has is its own, and setting 0..n-1
 * would only repeat that while claiming devices that may not be there (simulated GPUs have
 * none). NVIDIA_VISIBLE_DEVICES is set to what the engine's request names (the UUIDs; the engine
 * appends the same value, daemon/nvidia_linux.go in moby/moby), or `void` without a request: it
 * replaces an image's own `ENV NVIDIA_VISIBLE_DEVICES=all` (the nvidia/cuda images have one) and
 * a template's value, which on a host whose default runtime is nvidia would hand the container
 * every GPU of the host.
 */
export function instanceGpuEnv(runtime: 'process' | 'docker', indexes: number[], deviceIds: string[] | undefined): Record<string, string> {
  if (runtime === 'docker') return { NVIDIA_VISIBLE_DEVICES: deviceIds?.length ? deviceIds.join(',') : 'void' };
  const list = indexes.join(',');
  return { CUDA_VISIBLE_DEVICES: list, NVIDIA_VISIBLE_DEVICES: list || 'void' };
}

export class GpuAllocator {
  /** GPU index -> instance id holding it. */
  private readonly owners = new Map<number, string>();

  constructor(readonly inventory: GpuInventory) {}

  get total(): number {
    return this.inventory.devices.length;
  }

  get free(): number {
    return this.total - this.owners.size;
  }

  /** Assigns `count` free GPUs to `instanceId` (lowest indexes first), or returns undefined when too few are free. */
  allocate(instanceId: string, count: number): number[] | undefined {
    if (count === 0) return [];
    const free = this.inventory.devices.filter((d) => !this.owners.has(d.index)).map((d) => d.index);
    if (free.length < count) return undefined;
    const picked = free.slice(0, count);
    for (const i of picked) this.owners.set(i, instanceId);
    return picked;
  }

  /** Marks GPUs as held (when re-adopting instances after a restart). GPUs not in the inventory are ignored. */
  claim(instanceId: string, indexes: number[]): void {
    for (const i of indexes) if (this.inventory.devices.some((d) => d.index === i)) this.owners.set(i, instanceId);
  }

  release(instanceId: string): void {
    for (const [i, owner] of this.owners) if (owner === instanceId) this.owners.delete(i);
  }

  /** UUIDs of the given GPUs for container device requests; undefined unless the inventory came from nvidia-smi. */
  deviceIds(indexes: number[]): string[] | undefined {
    if (this.inventory.source !== 'nvidia-smi') return undefined;
    return indexes.map((i) => this.inventory.devices.find((d) => d.index === i)?.uuid ?? String(i));
  }

  snapshot(): Gpu[] {
    return this.inventory.devices.map((d) => ({
      index: d.index,
      model: d.model,
      memoryMb: d.memoryMb,
      instanceId: this.owners.get(d.index) ?? '',
      ...(d.uuid ? { uuid: d.uuid } : {}),
    }));
  }
}
