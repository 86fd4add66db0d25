// GET /metrics: the engine's state in Prometheus' text format, under vLLM's metric names and
// labels (`model_name`, `engine`), so that a scraper or router written for vLLM reads the sim.
// vLLM exposes its metrics with prometheus_client, which names a Counter X's sample X_total
// (with X_total in its HELP and TYPE lines) and adds an X_created gauge (when the counter
// started): the sim writes the same lines, numbers formatted as Python's client does.
import type { HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';

/** prometheus_client's text format version 0.0.4. */
const CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

interface Metric {
  name: string;
  type: 'gauge' | 'counter';
  help: string;
  value: number;
}

/** The metrics, with vLLM's names and help texts (vllm/v1/metrics/loggers.py). */
function metrics(ctx: SimContext): Metric[] {
  const { stats, kv } = ctx;
  return [
    { name: 'vllm:num_requests_running', type: 'gauge', help: 'Number of requests in model execution batches.', value: stats.running },
    { name: 'vllm:num_requests_waiting', type: 'gauge', help: 'Number of requests waiting to be processed.', value: stats.waiting },
    { name: 'vllm:kv_cache_usage_perc', type: 'gauge', help: 'KV-cache usage. 1 means 100 percent usage.', value: kv.usage },
    {
      name: 'vllm:prefix_cache_queries',
      type: 'counter',
      help: 'Prefix cache queries, in terms of number of queried tokens.',
      value: stats.prefixCacheQueries,
    },
    { name: 'vllm:prefix_cache_hits', type: 'counter', help: 'Prefix cache hits, in terms of number of cached tokens.', value: stats.prefixCacheHits },
  ];
}

/** The metrics page for the sim's current state. */
export function metricsText(ctx: SimContext): string {
  const labels = `{model_name="${labelValue(ctx.opts.model)}",engine="0"}`;
  let out = '';
  for (const m of metrics(ctx)) {
    const name = m.type === 'counter' ? `${m.name}_total` : m.name;
    out += `# HELP ${name} ${m.help}\n# TYPE ${name} ${m.type}\n${name}${labels} ${pythonFloat(m.value)}\n`;
    if (m.type === 'counter') {
      const created = `${m.name}_created`;
      out += `# HELP ${created} ${m.help}\n# TYPE ${created} gauge\n${created}${labels} ${pythonFloat(ctx.startedAt)}\n`;
    }
  }
  return out;
}

export function metricsRoute(ctx: SimContext): (res: HttpResponse) => void {
  return (res) => {
    const body = metricsText(ctx);
    res.cork(() => {
      res.writeHeader('content-type', CONTENT_TYPE);
      res.end(body);
    });
  };
}

/** A label value escaped as the text format wants (backslash, double quote, newline). */
function labelValue(v: string): string {
  return v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');
}

/** A number as prometheus_client writes it: Python's repr of a float ("1.0", "0.25"), large ones as Go would ("1.7e+09"). */
export function pythonFloat(v: number): string {
  if (!Number.isFinite(v)) return Number.isNaN(v) ? 'NaN' : v > 0 ? '+Inf' : '-Inf';
  const s = Number.isInteger(v) && Math.abs(v) < 1e16 ? `${v}.0` : String(v);
  const dot = s.indexOf('.');
  if (v > 0 && dot > 6) {
    const mantissa = `${s[0]}.${s.slice(1, dot)}${s.slice(dot + 1)}`.replace(/[.0]+$/, '');
    return `${mantissa}e+0${dot - 1}`;
  }
  return s;
}
