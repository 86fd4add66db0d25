// A micro-benchmark suite: a name and the tinybench tasks it adds. Register new suites in
// bench/micro/index.ts (one import, one line).
import type { Bench } from 'tinybench';

export interface MicroSuite {
  name: string;
  /** Adds this suite's tasks to `bench` (tinybench `bench.add(name, fn)`). */
  add(bench: Bench): void;
}
