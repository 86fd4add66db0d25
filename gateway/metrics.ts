// Prometheus metrics for the gateway, written by hand: the hot path does one or two Map lookups
// and array increments, and nothing is formatted until /metrics is scraped. (prom-client would do
// the same job with label-object hashing on every observation, and it is not installed.)
//
// Labels are bounded: `model` is always a catalog name (or "-" when the request named none we
// serve), `route` a fixed route name, never anything a client can invent.

/** Seconds. Upstream latency and time to first byte. */
const TIME_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

export class Histogram {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(readonly buckets: readonly number[] = TIME_BUCKETS) {
    this.counts = new Float64Array(buckets.length);
  }
  observe(v: number): void {
    this.sum += v;
    this.count++;
    const b = this.buckets;
    for (let i = 0; i < b.length; i++)
      if (v <= b[i]!) {
        this.counts[i]!++;
        return;
      }
  }
}

/**
 * Why a request went to a backend (gateway/backends/router.ts): it holds the request's prefix,
 * the conversation key hashes to it, load moved the request there (bounded load, fewest in
 * flight), its turn in a rotation, or nothing healthy was left.
 */
export const ROUTE_REASONS = ['prefix', 'key', 'load', 'rotate', 'fallback'] as const;
export type RouteReason = (typeof ROUTE_REASONS)[number];
export const REASON_PREFIX = 0;
export const REASON_KEY = 1;
export const REASON_LOAD = 2;
export const REASON_ROTATE = 3;
export const REASON_FALLBACK = 4;

/** The route choices of a model with more than one backend. */
export class RouteSeries {
  /** Upstream URL -> choices, indexed by ROUTE_REASONS. Kept across catalog changes. */
  readonly choices = new Map<string, Float64Array>();
  /** Prefix units of the requests routed by prefix, and how many of them the chosen backend held. */
  unitsSent = 0;
  unitsMatched = 0;

  /** The counters of one upstream (created on first use). */
  upstream(url: string): Float64Array {
    let c = this.choices.get(url);
    if (!c) this.choices.set(url, (c = new Float64Array(ROUTE_REASONS.length)));
    return c;
  }
}

/** Everything measured per model; fetched once per request and held. */
export class ModelSeries {
  readonly upstreamSeconds = new Histogram();
  readonly ttfbSeconds = new Histogram();
  readonly routes = new RouteSeries();
  tokensIn = 0;
  tokensOut = 0;
  constructor(readonly model: string) {}
  tokens(input: number, output: number): void {
    this.tokensIn += input;
    this.tokensOut += output;
  }
}

/** The label used when a request names no catalog model. */
export const NO_MODEL = '-';
/** Status recorded when the client went away before its response ended (the response writer's). */
export { CLIENT_CLOSED } from '../lib/relay/response-writer.js';

/**
 * Counts per status, indexed by the status itself: an increment, no hashing. HTTP statuses have
 * three digits (the backend's are parsed as such), so 1000 slots hold every one.
 */
const STATUS_MIN = 0;
const STATUS_SLOTS = 1000;

export class GatewayMetrics {
  /** route -> model -> counts by status */
  private readonly requestCounts = new Map<string, Map<string, Float64Array>>();
  /** The last route looked up, and its map: most requests repeat the previous route. */
  private lastRoute = '';
  private lastByModel: Map<string, Float64Array> | undefined;
  private readonly series = new Map<string, ModelSeries>();
  /** Times a client could not take more and the backend body was paused. */
  backpressurePauses = 0;
  /** Reads the admission gauge at scrape time. */
  inflight: () => number = () => 0;

  /** Counts one finished request (the status the client got). */
  request(route: string, model: string, status: number): void {
    let byModel = this.lastByModel;
    if (route !== this.lastRoute || !byModel) {
      byModel = this.requestCounts.get(route);
      if (!byModel) this.requestCounts.set(route, (byModel = new Map()));
      this.lastRoute = route;
      this.lastByModel = byModel;
    }
    let byStatus = byModel.get(model);
    if (!byStatus) byModel.set(model, (byStatus = new Float64Array(STATUS_SLOTS)));
    const slot = status - STATUS_MIN;
    byStatus[slot >= 0 && slot < STATUS_SLOTS ? slot : STATUS_SLOTS - 1]!++;
  }

  /** The per-model series (created on first use). */
  model(name: string): ModelSeries {
    let s = this.series.get(name);
    if (!s) this.series.set(name, (s = new ModelSeries(name)));
    return s;
  }

  /** How many requests were counted for route/model/status (tests and the bench). */
  count(route: string, model: string, status: number): number {
    const slot = status - STATUS_MIN;
    return slot >= 0 && slot < STATUS_SLOTS ? (this.requestCounts.get(route)?.get(model)?.[slot] ?? 0) : 0;
  }

  /** The Prometheus text exposition format (version 0.0.4). */
  render(): string {
    const out: string[] = [];
    out.push('# HELP rc_gateway_requests_total Requests answered, by route, model and status.');
    out.push('# TYPE rc_gateway_requests_total counter');
    for (const [route, byModel] of this.requestCounts) {
      for (const [model, byStatus] of byModel) {
        for (let slot = 0; slot < STATUS_SLOTS; slot++) {
          const n = byStatus[slot]!;
          if (n > 0) out.push(`rc_gateway_requests_total{route="${esc(route)}",model="${esc(model)}",status="${slot + STATUS_MIN}"} ${n}`);
        }
      }
    }
    out.push('# HELP rc_gateway_inflight_requests Requests currently forwarded to backends.');
    out.push('# TYPE rc_gateway_inflight_requests gauge');
    out.push(`rc_gateway_inflight_requests ${this.inflight()}`);
    out.push('# HELP rc_gateway_backpressure_pauses_total Times a slow client paused its backend stream.');
    out.push('# TYPE rc_gateway_backpressure_pauses_total counter');
    out.push(`rc_gateway_backpressure_pauses_total ${this.backpressurePauses}`);
    histogram(out, 'rc_gateway_upstream_duration_seconds', 'Time from forwarding to the end of the backend response.', this.series, (s) => s.upstreamSeconds);
    histogram(
      out,
      'rc_gateway_upstream_ttfb_seconds',
      'Time from forwarding to the first byte of the backend response body.',
      this.series,
      (s) => s.ttfbSeconds,
    );
    out.push('# HELP rc_gateway_tokens_total Tokens metered from backend usage, by model and direction.');
    out.push('# TYPE rc_gateway_tokens_total counter');
    for (const s of this.series.values()) {
      out.push(`rc_gateway_tokens_total{model="${esc(s.model)}",direction="in"} ${s.tokensIn}`);
      out.push(`rc_gateway_tokens_total{model="${esc(s.model)}",direction="out"} ${s.tokensOut}`);
    }
    routes(out, this.series);
    return out.join('\n') + '\n';
  }
}

/** The route choices and prefix units of the models with more than one backend. */
function routes(out: string[], series: Map<string, ModelSeries>): void {
  out.push('# HELP rc_gateway_route_choices_total Backends chosen for requests of a model with several, by reason.');
  out.push('# TYPE rc_gateway_route_choices_total counter');
  for (const s of series.values()) {
    const m = esc(s.model);
    for (const [url, c] of s.routes.choices) {
      for (let r = 0; r < ROUTE_REASONS.length; r++)
        out.push(`rc_gateway_route_choices_total{model="${m}",upstream="${esc(url)}",reason="${ROUTE_REASONS[r]}"} ${c[r]}`);
    }
  }
  out.push('# HELP rc_gateway_route_prefix_units_total Prefix units of requests routed by prefix: sent, and matched on the chosen backend.');
  out.push('# TYPE rc_gateway_route_prefix_units_total counter');
  for (const s of series.values()) {
    if (s.routes.unitsSent === 0) continue;
    const m = esc(s.model);
    out.push(`rc_gateway_route_prefix_units_total{model="${m}",kind="sent"} ${s.routes.unitsSent}`);
    out.push(`rc_gateway_route_prefix_units_total{model="${m}",kind="matched"} ${s.routes.unitsMatched}`);
  }
}

function histogram(out: string[], name: string, help: string, series: Map<string, ModelSeries>, pick: (s: ModelSeries) => Histogram): void {
  out.push(`# HELP ${name} ${help}`);
  out.push(`# TYPE ${name} histogram`);
  for (const s of series.values()) {
    const h = pick(s);
    const m = esc(s.model);
    let cumulative = 0;
    for (let i = 0; i < h.buckets.length; i++) {
      cumulative += h.counts[i]!;
      out.push(`${name}_bucket{model="${m}",le="${h.buckets[i]}"} ${cumulative}`);
    }
    out.push(`${name}_bucket{model="${m}",le="+Inf"} ${h.count}`);
    out.push(`${name}_sum{model="${m}"} ${h.sum}`);
    out.push(`${name}_count{model="${m}"} ${h.count}`);
  }
}

function esc(v: string): string {
  return v.replace(/[\\"\n]/g, (c) => (c === '\n' ? '\\n' : `\\${c}`));
}
