// `npm run bench`: micro-benchmarks (tinybench), then load scenarios (wrk or autocannon against
// targets in their own processes). Prints tables and writes one JSON file under bench/results/.
//
// Environment: RC_BENCH_ONLY=micro|load, RC_BENCH_FILTER=<substring of a suite/scenario name>,
// RC_BENCH_MICRO_TIME_MS (default 300 per task), RC_BENCH_DURATION_S (default 3),
// RC_BENCH_WARMUP_S (default 1), RC_BENCH_ROUNDS (default 1; gateway-vs-nginx), RC_BENCH_CONNECTIONS (default 32), RC_BENCH_TOOL=wrk|autocannon,
// RC_BENCH_RESULTS_DIR (default ./bench/results).
import { mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import { Bench } from 'tinybench';
import { MICRO_SUITES } from './micro/index.js';
import { LOAD_SCENARIOS } from './scenarios/index.js';
import { hasWrk, printComparisons, type Comparison } from './load.js';

const only = process.env.RC_BENCH_ONLY;
const filter = process.env.RC_BENCH_FILTER ?? '';
const microTimeMs = Number(process.env.RC_BENCH_MICRO_TIME_MS) || 300;
const selected = <T extends { name: string }>(items: T[]) => items.filter((i) => i.name.includes(filter));

interface MicroRow {
  suite: string;
  task: string;
  opsPerSec: number;
  meanNs: number;
  p99Ns: number;
  samples: number;
}

async function runMicro(): Promise<MicroRow[]> {
  const rows: MicroRow[] = [];
  for (const suite of selected(MICRO_SUITES)) {
    const bench = new Bench({ name: suite.name, time: microTimeMs });
    suite.add(bench);
    await bench.run();
    process.stdout.write(`\nmicro: ${suite.name}\n`);
    console.table(bench.table());
    for (const task of bench.tasks) {
      const r = task.result;
      if (r.state !== 'completed') {
        process.stdout.write(`  ${task.name}: ${r.state}${'error' in r ? ` (${String(r.error)})` : ''}\n`);
        continue;
      }
      rows.push({
        suite: suite.name,
        task: task.name,
        opsPerSec: r.throughput.mean,
        meanNs: r.latency.mean * 1e6,
        p99Ns: r.latency.p99 * 1e6,
        samples: r.latency.samplesCount,
      });
    }
  }
  return rows;
}

async function runLoadScenarios(): Promise<Comparison[]> {
  const all: Comparison[] = [];
  for (const scenario of selected(LOAD_SCENARIOS)) {
    process.stdout.write(`\nload: ${scenario.name} ...\n`);
    all.push(...(await scenario.run({})));
  }
  if (all.length) {
    process.stdout.write(`\nload (${all[0]!.results[0]!.tool}, ${all[0]!.results[0]!.connections} connections, ${cpus().length} CPUs)\n`);
    printComparisons(all);
  }
  return all;
}

const micro = only === 'load' ? [] : await runMicro();
const load = only === 'micro' ? [] : await runLoadScenarios();

const dir = resolve(process.env.RC_BENCH_RESULTS_DIR ?? 'bench/results');
mkdirSync(dir, { recursive: true });
const file = join(dir, `bench-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
writeFileSync(
  file,
  JSON.stringify(
    {
      date: new Date().toISOString(),
      node: process.version,
      cpus: cpus().length,
      cpuModel: cpus()[0]?.model,
      wrk: hasWrk(),
      micro,
      load,
    },
    null,
    2,
  ) + '\n',
);
process.stdout.write(`\nresults: ${file}\n`);
