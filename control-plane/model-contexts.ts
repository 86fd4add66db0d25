// The context window Model APIs shows for each shared model (issue 42: a number, never blank):
// the catalog's maxContext, else what the model's upstreams report in GET /v1/models (vLLM's and
// SGLang's max_model_len, llama.cpp's n_ctx: the figure the gateway fits max_tokens into, read the
// same way, lib/model-list.ts), the smallest over its upstreams; else unknown, said as such.
//
// Asked from the control plane, once per upstream and served name, then kept for KEEP_MS (a
// failure is asked again after RETRY_MS). GET /api/models waits for the asking at most WAIT_MS
// and says "unknown" meanwhile; the next load has the figure.
import type { ModelEntry } from '../lib/config.js';
import { readListing } from './model-server.js';

const KEEP_MS = 5 * 60_000;
const RETRY_MS = 30_000;
const PROBE_TIMEOUT_MS = 3_000;
const WAIT_MS = 1_500;
/** Upstream and served-name pairs kept (the catalog's; a bound against a catalog that keeps changing). */
const MAX_ENTRIES = 1_000;

export interface ModelContext {
  /** Tokens (prompt and output); null when neither the catalog nor the backend says. */
  context: number | null;
  /** Where the figure comes from. */
  source: 'catalog' | 'backend' | 'unknown';
}

interface Learned {
  context: number | undefined;
  at: number;
  failed: boolean;
  pending: Promise<void> | undefined;
}

export class ModelContexts {
  private readonly learned = new Map<string, Learned>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The context of every entry, asking the upstreams not known yet (waiting at most WAIT_MS for them). */
  async of(models: readonly ModelEntry[]): Promise<ModelContext[]> {
    const waits = models.flatMap((m) => (m.maxContext === undefined ? m.upstreams.map((u) => this.ask(u, m.servedName ?? m.name)) : []));
    if (waits.length) await Promise.race([Promise.all(waits), new Promise((r) => setTimeout(r, WAIT_MS).unref())]);
    return models.map((m) => this.known(m));
  }

  private known(m: ModelEntry): ModelContext {
    if (m.maxContext !== undefined) return { context: m.maxContext, source: 'catalog' };
    const served = m.servedName ?? m.name;
    const figures = m.upstreams.map((u) => this.learned.get(key(u, served))?.context).filter((c): c is number => c !== undefined);
    return figures.length ? { context: Math.min(...figures), source: 'backend' } : { context: null, source: 'unknown' };
  }

  /** Asks `upstream` when it is due; resolves when the asking under way (if any) ends. */
  private ask(upstream: string, served: string): Promise<void> {
    const k = key(upstream, served);
    let l = this.learned.get(k);
    const now = this.now();
    if (l?.pending) return l.pending;
    if (l && now - l.at < (l.failed ? RETRY_MS : KEEP_MS)) return Promise.resolve();
    if (!l) {
      if (this.learned.size >= MAX_ENTRIES) this.learned.clear();
      l = { context: undefined, at: 0, failed: false, pending: undefined };
      this.learned.set(k, l);
    }
    const entry = l;
    entry.pending = readListing(upstream, served, PROBE_TIMEOUT_MS)
      .then((r) => {
        entry.failed = r.kind !== 'listed';
        // A failure keeps the last figure: a backend restarting is still the same backend.
        if (r.kind === 'listed') entry.context = r.context;
      })
      .finally(() => {
        entry.at = this.now();
        entry.pending = undefined;
      });
    return entry.pending;
  }
}

const key = (upstream: string, served: string) => `${upstream}\0${served}`;
