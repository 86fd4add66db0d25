// The shared model catalog as the request path sees it: name -> ModelState (entry, upstreams,
// metrics series). Replaced as a whole on change, so a request that already holds its
// ModelState keeps using it (and its pools) until it ends: a catalog change drops no stream.
import type { ModelEntry } from '../../lib/config.js';
import type { GatewayMetrics, ModelSeries } from '../metrics.js';
import type { Upstream, UpstreamRegistry } from './upstreams.js';

export interface ModelState {
  readonly name: string;
  readonly entry: ModelEntry;
  /** The name the backend knows, when different from `name` (the request body is rewritten). */
  readonly servedName: string | undefined;
  readonly upstreams: readonly Upstream[];
  readonly series: ModelSeries;
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
      next.set(entry.name, {
        name: entry.name,
        entry,
        servedName: entry.servedName && entry.servedName !== entry.name ? entry.servedName : undefined,
        upstreams,
        series: this.metrics.model(entry.name),
      });
      if (!this.created.has(entry.name)) this.created.set(entry.name, now);
    }
    this.models = next;
    this.listJson = JSON.stringify({
      object: 'list',
      data: entries.map((e) => ({ id: e.name, object: 'model', created: this.created.get(e.name), owned_by: e.ownedBy })),
    });
    this.registry.retain(new Set(entries.flatMap((e) => e.upstreams.map(normalizeUrl))));
  }
}

/** The registry key of an upstream URL (no trailing slash). */
export function normalizeUrl(url: string): string {
  return url.endsWith('/') ? url.slice(0, -1) : url;
}
