// The simulated serving backend: an OpenAI-compatible server that behaves, where a client can
// see it (routes, bodies, SSE chunks, usage, errors, metrics), like the server its `flavour`
// names (current vLLM by default; sim/flavours/), with configurable pace and faults. Runs in-process (startSim) and as `rc sim` (sim/cli.ts). This module is the sim's
// public face; sim/README.md says which module does what behind it.
import { listen, type Server } from '../lib/http.js';
import { SimContext } from './context.js';
import type { Fault } from './faults.js';
import { startNagleRelay } from './nagle-relay.js';
import type { SimFlavour, SimOptions } from './options.js';
import { simApp } from './routes.js';
import type { SimStats } from './stats.js';

export { SIM_FLAVOURS, simOptionsSchema, type SimFlavour, type SimOptions } from './options.js';
export type { SimStats } from './stats.js';

export interface SimServer extends Server {
  readonly model: string;
  /** The server the sim speaks as. */
  readonly flavour: SimFlavour;
  readonly stats: SimStats;
  /** Sets (or clears) the standing fault; with `count`, it applies to the next `count` requests only. */
  setFault(fault: Fault | undefined): void;
}

export async function startSim(options: SimOptions = {}): Promise<SimServer> {
  const ctx = new SimContext(options);
  const { opts, stats, log } = ctx;
  // With Nagle on (noDelay false), uWS listens on loopback behind a relay that owns host:port.
  const server = await listen(simApp(ctx), ctx.noDelay ? opts.host : '127.0.0.1', ctx.noDelay ? opts.port : 0, () => stats.inFlight === 0);
  let relay: Awaited<ReturnType<typeof startNagleRelay>> | undefined;
  try {
    if (!ctx.noDelay) relay = await startNagleRelay(opts.host, opts.port, server.port);
  } catch (err) {
    await server.close();
    throw err;
  }
  const port = relay ? relay.port : server.port;
  const url = relay ? `http://${opts.host.includes(':') ? `[${opts.host}]` : opts.host === '0.0.0.0' ? '127.0.0.1' : opts.host}:${port}` : server.url;
  log.info('sim listening', { url, flavour: opts.flavour, reasoning: opts.reasoning, fast: opts.fast, noDelay: ctx.noDelay });
  return {
    host: opts.host,
    port,
    url,
    model: opts.model,
    flavour: opts.flavour,
    stats,
    setFault: (fault) => ctx.faults.set(fault),
    async close(graceMs = 0) {
      await server.close(graceMs);
      await relay?.close();
      // Whatever is left (stalled or paced streams) is cut; no timer keeps the process alive.
      ctx.calls.endAll();
    },
  };
}
