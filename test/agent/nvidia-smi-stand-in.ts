// An `nvidia-smi` stand-in for tests: a small shell script whose answers the test sets (the GPU
// inventory, per-GPU utilization and memory, or a failure). It answers the two queries the agent
// makes (agent/gpus.ts), in nvidia-smi's `--format=csv,noheader,nounits` shape, from files next to
// it, so a test can change an answer while the agent runs.
import { chmodSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface StandInGpu {
  index: number;
  uuid: string;
  name: string;
  memoryMb: number;
}

/** Four GPUs as an H100 host's nvidia-smi names them. */
export const FOUR_H100: StandInGpu[] = [0, 1, 2, 3].map((index) => ({
  index,
  uuid: `GPU-4f1c${index}a7e-2b9d-4c1e-8f3a-0d6e5b7c9a1${index}`,
  name: 'NVIDIA H100 80GB HBM3',
  memoryMb: 81559,
}));

export class NvidiaSmiStandIn {
  /** The script's path (give it as the GPU detection's command, or put `dir` first on PATH). */
  readonly command: string;

  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true });
    this.command = join(dir, 'nvidia-smi');
    writeFileSync(
      this.command,
      `#!/bin/sh
d=$(dirname "$0")
# Logged only while the log exists: a test's cleanup removing the dir while the agent still
# samples must not see a file appear again (ENOTEMPTY).
if [ -f "$d/calls" ]; then echo "$*" >> "$d/calls"; fi
if [ -f "$d/fail" ]; then cat "$d/fail" >&2; exit 9; fi
case "$*" in
  *--query-gpu=index,uuid,name,memory.total*) cat "$d/inventory.csv" ;;
  *--query-gpu=index,utilization.gpu,memory.used*) cat "$d/usage.csv" ;;
  *) echo "stand-in: unexpected arguments: $*" >&2; exit 2 ;;
esac
`,
    );
    chmodSync(this.command, 0o755);
    writeFileSync(join(dir, 'calls'), '');
    this.setGpus([]);
    this.setUsage([]);
  }

  setGpus(gpus: StandInGpu[]): void {
    writeFileSync(join(this.dir, 'inventory.csv'), gpus.map((g) => `${g.index}, ${g.uuid}, ${g.name}, ${g.memoryMb}\n`).join(''));
  }

  /** Utilization (%) and memory used (MiB) per GPU index. */
  setUsage(usage: { index: number; utilization: number; memoryUsedMb: number }[]): void {
    writeFileSync(join(this.dir, 'usage.csv'), usage.map((u) => `${u.index}, ${u.utilization}, ${u.memoryUsedMb}\n`).join(''));
  }

  /** The arguments of every call so far, one string per call. */
  calls(): string[] {
    return existsSync(join(this.dir, 'calls')) ? readFileSync(join(this.dir, 'calls'), 'utf8').split('\n').filter(Boolean) : [];
  }

  /** Every call fails (exit 9, `message` on stderr) until `fail(undefined)`. */
  fail(message: string | undefined): void {
    if (message === undefined) rmSync(join(this.dir, 'fail'), { force: true });
    else writeFileSync(join(this.dir, 'fail'), `${message}\n`);
  }
}
