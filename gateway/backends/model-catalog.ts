// The shared model catalog as the request path sees it: name -> ModelState (entry, upstreams,
// metrics series, router). Replaced as a whole on change, so a request that already holds its
// ModelState keeps using it (and its pools) until it ends: a catalog change drops no stream. A
// model's router (what it learned of its backends' prefixes) is kept across changes that leave
// its policy and upstream list as they were (a control-plane resync every 30 s is such a change).
import type { ModelEntry } from '../../lib/config.js';
import type { GatewayMetrics, ModelSeries } from '../metrics.js';
import type { Upstream, UpstreamRegistry } from './upstreams.js';
import { createRouter, type ModelRouter } from './router.js';

/**
 * What the request path reads of a model's backends, kept on its ModelState (`backend`) and
 * recomputed by backend-kind.ts only after a fact changed anywhere (its `generation`): a request
 * asks whether they are learned, their context and whether they can count several times, and each
 * read of the facts themselves is a WeakMap and a Map per upstream (and a clock reading).
 */
export interface BackendSummary {
  /** The `generation` it was computed at; -1: never. */
  generation: number;
  /** Every upstream probed, none failed, none being probed: learned for good (until a change). */
  settled: boolean;
  /** backendContext's answer. */
  context: number | undefined;
  /** canCount's answer. */
  canCount: boolean;
}

export interface ModelState {
  readonly name: string;
  readonly entry: ModelEntry;
  /** The name the backend knows, when different from `name` (the request body is rewritten). */
  readonly servedName: string | undefined;
  readonly upstreams: readonly Upstream[];
  readonly series: ModelSeries;
  /** How an upstream is chosen ('prefix', 'round-robin'); undefined: 'least-loaded', or a single upstream. */
  readonly router: ModelRouter | undefined;
  /** Route choices per upstream (metrics.ts RouteSeries, by reason); undefined with a single upstream. */
  readonly choices: readonly Float64Array[] | undefined;
  /** What its backends reported, summarized for the request path (backend-kind.ts). */
  readonly backend: BackendSummary;
}

export class Catalog {
  private models = new Map<string, ModelState>();
  private listJson = '{"object":"list","data":[]}';
  /** First time each name was seen: the `created` of /v1/models stays stable across reloads. */
  private readonly created = new Map<string, number>();

  constructor(
    private readonly registry: UpstreamRegistry,
    private readonly metrics: GatewayMetrics,
  ) {}

  /** The model state for a client-supplied name, or undefined when not in the catalog. */
  get(name: string): ModelState | undefined {
    return this.models.get(name);
  }

  names(): string[] {
    return [...this.models.keys()];
  }

  /** GET /v1/models body, serialized once per catalog change. */
  listBody(): string {
    return this.listJson;
  }

  /**
   * Replaces the catalog. Upstreams no longer used by any model are closed gracefully: their
   * requests in flight complete first.
   */
  set(entries: readonly ModelEntry[]): void {
    const next = new Map<string, ModelState>();
    const now = Math.floor(Date.now() / 1000);
    for (const entry of entries) {
      const upstreams = entry.upstreams.map((u) => this.registry.get(u));
      const series = this.metrics.model(entry.name);
      const several = upstreams.length > 1;
      next.set(entry.name, {
        name: entry.name,
        entry,
        servedName: entry.servedName && entry.servedName !== entry.name ? entry.servedName : undefined,
        upstreams,
        series,
        router: several ? this.router(entry, upstreams) : undefined,
        choices: several ? upstreams.map((u) => series.routes.upstream(u.url)) : undefined,
        backend: { generation: -1, settled: false, context: undefined, canCount: true },
      });
      if (!this.created.has(entry.name)) this.created.set(entry.name, now);
    }
    this.models = next;
    this.listJson = JSON.stringify({
      object: 'list',
      data: entries.map((e) => ({ id: e.name, object: 'model', created: this.created.get(e.name), owned_by: e.ownedBy })),
    });
    this.registry.retain(new Set(entries.flatMap((e) => e.upstreams.map(normalizeUrl))));
    this.registry.readLoadOf([...next.values()].filter((m) => m.router?.policy === 'prefix').flatMap((m) => m.upstreams));
  }

  /** The model's router: the one it has when its policy and upstreams are unchanged, else a new one. */
  private router(entry: ModelEntry, upstreams: readonly Upstream[]): ModelRouter | undefined {
    const prev = this.models.get(entry.name);
    if (prev && prev.entry.routing === entry.routing && sameList(prev.upstreams, upstreams)) return prev.router;
    return createRouter(
      entry.routing ?? 'prefix',
      upstreams.map((u) => u.url),
      this.registry.opts,
      this.metrics.model(entry.name).routes,
    );
  }
}

/** The registry key of an upstream URL (no trailing slash). */
export function normalizeUrl(url: string): string {
  return url.endsWith('/') ? url.slice(0, -1) : url;
}

function sameList<T>(a: readonly T[], b: readonly T[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}
