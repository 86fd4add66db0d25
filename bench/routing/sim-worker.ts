// The routing benchmark's sims, on a thread of their own (worker-host.ts): starts `count` sims of
// the model with the engine's options, sends their URLs, then answers `stats` with each sim's
// counters and `close` by closing them.
import { parentPort, workerData } from 'node:worker_threads';
import { createLogger } from '../../lib/log.js';
import { startSim, type SimServer } from '../../sim/server.js';
import type { Engine } from './stack.js';
import { MODEL } from './traffic.js';
import type { WorkerAsk } from './worker-host.js';

/** What the benchmark reads of one sim. */
export interface SimCounters {
  requests: number;
  prefixCacheQueries: number;
  prefixCacheHits: number;
  /** Engine times to first token of the generations so far (sim stats.firstTokenMs). */
  firstTokenMs: number[];
}

const { sims: count, ...engine } = workerData as Engine;
const logger = createLogger('silent');
const sims: SimServer[] = [];
for (let i = 0; i < count; i++) sims.push(await startSim({ model: MODEL, logger, instanceName: `sim-${i}`, recordFirstTokens: true, ...engine }));
parentPort!.postMessage(sims.map((s) => s.url));
parentPort!.on('message', async ({ id, ask }: WorkerAsk) => {
  if (ask === 'stats') {
    const value: SimCounters[] = sims.map(({ stats: s }) => ({
      requests: s.requests,
      prefixCacheQueries: s.prefixCacheQueries,
      prefixCacheHits: s.prefixCacheHits,
      firstTokenMs: s.firstTokenMs ?? [],
    }));
    parentPort!.postMessage({ id, value });
    return;
  }
  for (const s of sims) await s.close();
  parentPort!.postMessage({ id, value: null });
});
