// Reads each upstream's queue from its Prometheus endpoint (`GET <root>/metrics`, summed over
// its series) every interval, in the background: the
// prefix router (router.ts) takes a backend whose queue is long for overloaded. Never on the
// request path; only the upstreams of models routed by prefix are read, and only when an interval
// is configured (metricsIntervalMs: off in createGateway's defaults, 2 s from the settings,
// RC_UPSTREAM_METRICS_INTERVAL_MS). A backend that does not
// answer, or answers without the metric, keeps no reading (waitingAt 0), so only in-flight
// counts judge it.
import { probeGet } from '../../lib/probe-http.js';

/** What the scraper writes on an upstream (upstreams.ts Upstream). */
export interface ScrapedUpstream {
  readonly url: string;
  readonly basePath: string;
  waiting: number;
  waitingAt: number;
}

/**
 * The queue gauge of each backend, as its source names it: vLLM `vllm:num_requests_waiting`
 * (vllm/v1/metrics/loggers.py; labels model_name, engine), SGLang `sglang:num_queue_reqs`
 * (python/sglang/srt/metrics/collector.py; labels model_name, tp_rank, ..., one series per
 * data-parallel rank), llama.cpp `llamacpp:requests_deferred` (tools/server/server-context.cpp,
 * the tasks waiting for a free slot; no labels; served with --metrics).
 */
const QUEUE_METRICS = ['vllm:num_requests_waiting', 'sglang:num_queue_reqs', 'llamacpp:requests_deferred'] as const;

/** The queued requests a Prometheus text body reports (the first queue metric present, summed over its samples), or undefined when none is. */
export function waitingRequests(text: string): number | undefined {
  for (const metric of QUEUE_METRICS) {
    const sum = metricSum(text, metric);
    if (sum !== undefined) return sum;
  }
  return undefined;
}

/** The sum of the samples of `METRIC` in a Prometheus text body, or undefined when absent. */
function metricSum(text: string, METRIC: string): number | undefined {
  let sum: number | undefined;
  let at = text.indexOf(METRIC);
  while (at >= 0) {
    const lineStart = at === 0 || text.charCodeAt(at - 1) === 10;
    const next = text.charCodeAt(at + METRIC.length);
    // A sample line: the name at the start of a line, then labels or a space (not `..._total`).
    if (lineStart && (next === 0x7b || next === 0x20)) {
      const end = text.indexOf('\n', at);
      const line = text.slice(at, end < 0 ? text.length : end);
      const value = Number(line.slice(line.lastIndexOf(' ') + 1));
      if (Number.isFinite(value)) sum = (sum ?? 0) + value;
    }
    at = text.indexOf(METRIC, at + METRIC.length);
  }
  return sum;
}

export class LoadScraper {
  private readonly timer: NodeJS.Timeout;
  /** Upstreams with a read in flight (one at a time each). */
  private readonly busy = new Set<ScrapedUpstream>();
  private stopped = false;

  constructor(
    private readonly upstreams: () => Iterable<ScrapedUpstream>,
    private readonly intervalMs: number,
  ) {
    this.timer = setInterval(() => this.round(), intervalMs);
    this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    clearInterval(this.timer);
  }

  /** Reads every upstream once (also called by tests). */
  round(): Promise<void> {
    const reads: Promise<void>[] = [];
    for (const u of this.upstreams()) if (!this.busy.has(u)) reads.push(this.read(u));
    return Promise.all(reads).then(() => undefined);
  }

  private async read(u: ScrapedUpstream): Promise<void> {
    this.busy.add(u);
    try {
      const origin = new URL(u.url).origin;
      const res = await probeGet(`${origin}${u.basePath}/metrics`, this.intervalMs);
      const waiting = res.status >= 200 && res.status < 300 ? waitingRequests(res.text) : undefined;
      if (this.stopped) return;
      if (waiting === undefined) u.waitingAt = 0;
      else {
        u.waiting = waiting;
        u.waitingAt = Date.now();
      }
    } catch {
      u.waitingAt = 0; // unreachable: passive health decides; no stale reading is used
    } finally {
      this.busy.delete(u);
    }
  }
}
