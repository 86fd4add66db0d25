// The simulated serving backend: an OpenAI-compatible server that behaves like vLLM where a
// client can see it (routes, bodies, SSE chunks, usage, errors), with configurable pace and
// faults. Runs in-process (startSim) and as `rc sim` (sim/cli.ts). This module is the sim's
// public face; sim/README.md says which module does what behind it.
import { listen, type Server } from '../lib/http.js';
import { SimContext } from './context.js';
import type { Fault } from './faults.js';
import type { SimOptions } from './options.js';
import { simApp } from './routes.js';
import type { SimStats } from './stats.js';

export { simOptionsSchema, type SimOptions } from './options.js';
export type { SimStats } from './stats.js';

export interface SimServer extends Server {
  readonly model: string;
  readonly stats: SimStats;
  /** Sets (or clears) the standing fault; with `count`, it applies to the next `count` requests only. */
  setFault(fault: Fault | undefined): void;
}

export async function startSim(options: SimOptions = {}): Promise<SimServer> {
  const ctx = new SimContext(options);
  const { opts, stats, log } = ctx;
  const server = await listen(simApp(ctx), opts.host, opts.port, () => stats.inFlight === 0);
  log.info('sim listening', { url: server.url, reasoning: opts.reasoning, fast: opts.fast });
  return {
    host: server.host,
    port: server.port,
    url: server.url,
    model: opts.model,
    stats,
    setFault: (fault) => ctx.faults.set(fault),
    async close(graceMs = 0) {
      await server.close(graceMs);
      // Whatever is left (stalled or paced streams) is cut; no timer keeps the process alive.
      ctx.calls.endAll();
    },
  };
}
