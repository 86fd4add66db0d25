// What instances hold on this host: GPUs (the allocator) and host ports. Taken at a launch, claimed
// again for an adopted instance, freed when an instance reaches stopped or failed; every change is
// told to the host status's watchers, since the control plane places launches by what is free.
import { gpuLaunchRefusal } from './gpu-support.js';
import type { GpuAllocator } from './gpus.js';
import { HostPorts } from './ports.js';
import type { Runtime } from './runtime.js';
import type { InstanceInfo } from './types.js';

export class InstanceResources {
  private readonly ports: HostPorts;

  constructor(
    readonly gpus: GpuAllocator,
    private readonly runtime: Runtime,
    /** Tells the host's watchers that its status changed (host-status.ts). */
    readonly hostChanged: () => void,
  ) {
    this.ports = new HostPorts(runtime.checkHost);
  }

  /**
   * Why a launch of `gpuCount` real GPUs cannot work here (the engine cannot give containers GPUs),
   * or undefined. Simulated GPUs are never requested from the engine, so they need nothing.
   */
  gpuRefusal(gpuCount: number): string | undefined {
    // Read at each call: the runtime knows what the engine supports only after its init.
    return gpuLaunchRefusal(gpuCount, this.gpus.inventory.source, this.runtime.gpuSupport);
  }

  /** A free host port for each routed port of an instance (routed port -> host port). */
  async allocatePorts(ports: number[]): Promise<Map<number, number>> {
    const hostPorts = new Map<number, number>();
    for (const port of ports) hostPorts.set(port, await this.ports.allocate());
    return hostPorts;
  }

  /** Marks what an instance adopted after a restart holds, so no launch is given it again. */
  claim(info: InstanceInfo): void {
    this.gpus.claim(info.instanceId, info.gpus);
    this.ports.claim(info.endpoints.map((e) => e.hostPort));
  }

  /** Frees the GPUs and ports of an instance that reached stopped or failed. */
  release(info: InstanceInfo): void {
    this.gpus.release(info.instanceId);
    this.ports.release(info.endpoints.map((e) => e.hostPort));
    this.hostChanged();
  }
}
