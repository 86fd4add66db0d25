// One sim's options and state, shared by its routes: the calls in flight and the stats, the
// standing fault, the engine (KV cache with its prefix cache, the running batch) and the pace.
import { createLogger, type Logger } from '../lib/log.js';
import { Batch } from './batch.js';
import { Calls } from './calls.js';
import { FaultState } from './faults.js';
import { flavourOf, type Flavour } from './flavours/index.js';
import { KvCache } from './kv-cache.js';
import { simOptionsSchema, type SimConfig, type SimOptions } from './options.js';
import { Pace } from './pace.js';
import { unknownModel } from './request.js';
import { newSimStats, type SimStats } from './stats.js';

export class SimContext {
  readonly opts: SimConfig;
  readonly log: Logger;
  readonly stats: SimStats = newSimStats();
  readonly calls: Calls;
  /** The server the sim speaks as: its bodies, chunks and errors. */
  readonly flavour: Flavour;
  /** GET /metrics answers (the option, else the flavour's default). */
  readonly metricsOn: boolean;
  /** TCP_NODELAY on the client sockets (the option, else the flavour's default). */
  readonly noDelay: boolean;
  readonly faults = new FaultState();
  /** The KV cache in blocks, and vLLM's automatic prefix caching in it (kv.prefix, unless turned off). */
  readonly kv: KvCache;
  /** At most maxNumSeqs generations run at once; the others wait. */
  readonly batch: Batch;
  readonly pace: Pace;
  /** The served name as JSON, spliced into every stream chunk. */
  readonly modelJson: string;
  /** When the sim started, in s since the epoch (the counters' `_created` in /metrics). */
  readonly startedAt = Date.now() / 1000;

  constructor(options: SimOptions) {
    this.opts = simOptionsSchema.parse(options);
    this.flavour = flavourOf(this.opts.flavour);
    this.metricsOn = this.opts.metrics ?? this.flavour.metricsByDefault;
    this.noDelay = this.opts.noDelay ?? this.flavour.noDelay;
    this.calls = new Calls(this.stats, this.flavour.error);
    this.log = (options.logger ?? createLogger()).child({ part: 'sim', model: this.opts.model });
    this.faults.set(options.fault);
    if (this.opts.recordFirstTokens) this.stats.firstTokenMs = [];
    this.kv = new KvCache(this.opts.kvCacheBlocks, this.opts.blockSize, this.opts.prefixCaching);
    this.batch = new Batch(this.opts.maxNumSeqs, this.stats);
    this.pace = new Pace(this.opts);
    this.modelJson = JSON.stringify(this.opts.model);
  }

  /** Throws the 404 when `name` is another model than the served one (on servers that check it). */
  checkModel(name: string | null | undefined): void {
    if (!this.flavour.checksModel) return;
    const notFound = unknownModel(this.opts.model, name);
    if (notFound) throw notFound;
  }
}
