// One sim's options and state, shared by its routes: the calls in flight and the stats, the
// standing fault, the prefix cache and the pace. Engine-like state a later model adds (a bounded
// KV cache, a batch) belongs here, next to the prefix cache.
import { createLogger, type Logger } from '../lib/log.js';
import { Calls } from './calls.js';
import { FaultState } from './faults.js';
import { simOptionsSchema, type SimConfig, type SimOptions } from './options.js';
import { Pace } from './pace.js';
import { PrefixCache } from './prefix-cache.js';
import { unknownModel } from './request.js';
import { newSimStats, type SimStats } from './stats.js';

export class SimContext {
  readonly opts: SimConfig;
  readonly log: Logger;
  readonly stats: SimStats = newSimStats();
  readonly calls = new Calls(this.stats);
  readonly faults = new FaultState();
  /** vLLM's automatic prefix caching; undefined when turned off. */
  readonly prefixCache: PrefixCache | undefined;
  readonly pace: Pace;
  /** The served name as JSON, spliced into every stream chunk. */
  readonly modelJson: string;

  constructor(options: SimOptions) {
    this.opts = simOptionsSchema.parse(options);
    this.log = (options.logger ?? createLogger()).child({ part: 'sim', model: this.opts.model });
    this.faults.set(options.fault);
    this.prefixCache = this.opts.prefixCaching ? new PrefixCache(this.opts.blockSize) : undefined;
    this.pace = new Pace(this.opts);
    this.modelJson = JSON.stringify(this.opts.model);
  }

  /** Throws vLLM's 404 when `name` is another model than the served one. */
  checkModel(name: string | null | undefined): void {
    const notFound = unknownModel(this.opts.model, name);
    if (notFound) throw notFound;
  }
}
