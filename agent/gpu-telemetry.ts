// GPU telemetry: each GPU's utilization and memory in use, sampled with ONE nvidia-smi call for
// all GPUs every `intervalMs` (RC_AGENT_GPU_SAMPLE_MS), reported with the host status. Measured on
// an H200 (issue 41): a call takes 21-27 ms; it reads 0 % idle, 100 % under a dense matmul, and
// 0-5 % while a Python-bound decode loop keeps the GPU mostly waiting.
//
// Only GPUs found by nvidia-smi are sampled: simulated GPUs report nothing rather than made-up
// numbers. A failed call (driver gone, nvidia-smi hung past the timeout) drops the figures until
// the next good one, so a stale reading is never shown as current.
import { execFile } from 'node:child_process';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/log.js';
import type { GpuUsage } from './types.js';

export const USAGE_QUERY = ['--query-gpu=index,utilization.gpu,memory.used', '--format=csv,noheader,nounits'];

/** Parses `nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits`; `[N/A]` values are left out. */
export function parseUsage(output: string): Map<number, { utilizationPct: number; memoryUsedMb: number }> {
  const out = new Map<number, { utilizationPct: number; memoryUsedMb: number }>();
  for (const line of output.split('\n')) {
    const parts = line.split(',').map((p) => p.trim());
    if (parts.length !== 3 || !parts.every((p) => /^\d+(\.\d+)?$/.test(p))) continue;
    const [index, utilization, memory] = parts.map(Number) as [number, number, number];
    if (!Number.isInteger(index) || utilization > 100) continue;
    out.set(index, { utilizationPct: Math.round(utilization), memoryUsedMb: Math.round(memory) });
  }
  return out;
}

export interface GpuSamplerOptions {
  /** The nvidia-smi to run. */
  command: string;
  intervalMs: number;
  clock: Clock;
  logger: Logger;
  /** Called after every sample that has figures, and once when they are dropped. */
  onChange: () => void;
}

/** A call must finish well within the interval; nvidia-smi can hang when the driver is wedged. */
const CALL_TIMEOUT_MS = 10_000;

export class GpuSampler {
  private latest = new Map<number, GpuUsage>();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private failing = false;

  constructor(private readonly opts: GpuSamplerOptions) {}

  /** Samples now, then every interval (the next call starts once the previous one ended: never two at once). */
  start(): void {
    void this.sampleLoop();
  }

  private async sampleLoop(): Promise<void> {
    if (this.stopped) return;
    await this.sample();
    if (!this.stopped) this.timer = setTimeout(() => void this.sampleLoop(), this.opts.intervalMs);
  }

  /** One nvidia-smi call for every GPU. */
  async sample(): Promise<void> {
    const result = await new Promise<{ out: string } | { error: string }>((resolve) => {
      execFile(this.opts.command, USAGE_QUERY, { timeout: CALL_TIMEOUT_MS, encoding: 'utf8' }, (err, stdout, stderr) =>
        resolve(err ? { error: `${err.message} ${String(stderr).trim()}`.trim() } : { out: stdout }),
      );
    });
    if (this.stopped) return;
    const now = this.opts.clock.now();
    const next = new Map<number, GpuUsage>();
    if ('out' in result) {
      for (const [index, u] of parseUsage(result.out)) next.set(index, { ...u, sampledAtMs: now });
      if (this.failing) this.opts.logger.info('GPU telemetry is back');
      this.failing = false;
    } else if (!this.failing) {
      this.failing = true;
      this.opts.logger.warn('GPU telemetry: nvidia-smi failed; no figures until it answers', { detail: result.error });
    }
    // Every sample goes out, unchanged figures too: the control plane's idle rule averages the
    // utilization over a window of samples (a GPU steady at 100 % must keep counting as busy).
    const changed = next.size > 0 || this.latest.size > 0;
    this.latest = next;
    if (changed) this.opts.onChange();
  }

  /** The last sample of GPU `index`; undefined when there is none (not sampled yet, or the last call failed). */
  usage(index: number): GpuUsage | undefined {
    return this.latest.get(index);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }
}
