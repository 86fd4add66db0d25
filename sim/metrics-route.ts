// GET /metrics: the engine's state in Prometheus' text format, under the flavour's metric names:
// vLLM's (labels `model_name`, `engine`), SGLang's (`sglang:`, label `model_name`; only with its
// --enable-metrics) or llama.cpp's (`llamacpp:`, no labels; only with its --metrics), so that a
// scraper or router written for that server reads the sim.
// vLLM exposes its metrics with prometheus_client, which names a Counter X's sample X_total
// (with X_total in its HELP and TYPE lines) and adds an X_created gauge (when the counter
// started): the sim writes the same lines, numbers formatted as Python's client does.
import { statusLine } from '../lib/http.js';
import type { HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { familyOf } from './flavours/index.js';
import { llamaCppErrorBody } from './flavours/llama-cpp.js';
import { vllmMetricNames } from './flavours/vllm.js';

/** prometheus_client's text format version 0.0.4. */
const CONTENT_TYPE = 'text/plain; version=0.0.4; charset=utf-8';

interface Metric {
  name: string;
  type: 'gauge' | 'counter';
  help: string;
  value: number;
}

/** The metrics, with vLLM's names and help texts (vllm/v1/metrics/loggers.py; 0.10's gpu_ names). */
function vllmMetrics(ctx: SimContext): Metric[] {
  const { stats, kv } = ctx;
  const names = vllmMetricNames(ctx.flavour.name);
  return [
    { name: 'vllm:num_requests_running', type: 'gauge', help: 'Number of requests in model execution batches.', value: stats.running },
    { name: 'vllm:num_requests_waiting', type: 'gauge', help: 'Number of requests waiting to be processed.', value: stats.waiting },
    { name: names.kvUsage, type: 'gauge', help: 'KV-cache usage. 1 means 100 percent usage.', value: kv.usage },
    { name: names.prefixQueries, type: 'counter', help: 'Prefix cache queries, in terms of number of queried tokens.', value: stats.prefixCacheQueries },
    { name: names.prefixHits, type: 'counter', help: 'Prefix cache hits, in terms of number of cached tokens.', value: stats.prefixCacheHits },
  ];
}

/** SGLang's scheduler metrics (python/sglang/srt/metrics/collector.py), with --enable-metrics. */
function sglangMetrics(ctx: SimContext): Metric[] {
  const { stats, kv } = ctx;
  const hitRate = stats.prefixCacheQueries ? stats.prefixCacheHits / stats.prefixCacheQueries : 0;
  return [
    { name: 'sglang:num_running_reqs', type: 'gauge', help: 'The number of running requests.', value: stats.running },
    { name: 'sglang:num_queue_reqs', type: 'gauge', help: 'The number of requests in the waiting queue.', value: stats.waiting },
    { name: 'sglang:token_usage', type: 'gauge', help: 'The token usage.', value: kv.usage },
    { name: 'sglang:cache_hit_rate', type: 'gauge', help: 'The prefix cache hit rate.', value: hitRate },
    { name: 'sglang:prompt_tokens', type: 'counter', help: 'Number of prefill tokens processed.', value: stats.promptTokensTotal },
    { name: 'sglang:generation_tokens', type: 'counter', help: 'Number of generation tokens processed.', value: stats.generationTokensTotal },
  ];
}

/** The metrics page for the sim's current state (vLLM's or SGLang's, prometheus_client's format). */
export function metricsText(ctx: SimContext): string {
  if (familyOf(ctx.flavour.name) === 'llama.cpp') return llamaCppMetricsText(ctx);
  const vllm = familyOf(ctx.flavour.name) === 'vllm';
  const labels = vllm ? `{model_name="${labelValue(ctx.opts.model)}",engine="0"}` : `{model_name="${labelValue(ctx.opts.model)}"}`;
  let out = '';
  for (const m of vllm ? vllmMetrics(ctx) : sglangMetrics(ctx)) {
    const name = m.type === 'counter' ? `${m.name}_total` : m.name;
    out += `# HELP ${name} ${m.help}\n# TYPE ${name} ${m.type}\n${name}${labels} ${pythonFloat(m.value)}\n`;
    if (m.type === 'counter') {
      const created = `${m.name}_created`;
      out += `# HELP ${created} ${m.help}\n# TYPE ${created} gauge\n${created}${labels} ${pythonFloat(ctx.startedAt)}\n`;
    }
  }
  return out;
}

/** llama-server's /metrics (server-context.cpp handle_metrics): `llamacpp:` names, no labels, no _created. */
function llamaCppMetricsText(ctx: SimContext): string {
  const { stats } = ctx;
  const metrics: Metric[] = [
    { name: 'prompt_tokens_total', type: 'counter', help: 'Number of prompt tokens processed.', value: stats.promptTokensTotal },
    { name: 'tokens_predicted_total', type: 'counter', help: 'Number of generation tokens processed.', value: stats.generationTokensTotal },
    { name: 'requests_processing', type: 'gauge', help: 'Number of requests processing.', value: stats.running },
    { name: 'requests_deferred', type: 'gauge', help: 'Number of requests deferred.', value: stats.waiting },
  ];
  let out = '';
  for (const m of metrics) out += `# HELP llamacpp:${m.name} ${m.help}\n# TYPE llamacpp:${m.name} ${m.type}\nllamacpp:${m.name} ${m.value}\n`;
  return out;
}

/** GET /metrics; with metrics off, what the server answers then (llama.cpp: 501; SGLang: no route, 404). */
export function metricsRoute(ctx: SimContext): (res: HttpResponse) => void {
  const llama = familyOf(ctx.flavour.name) === 'llama.cpp';
  return (res) => {
    if (!ctx.metricsOn) {
      const a = llama
        ? { status: 501, body: llamaCppErrorBody(501, 'This server does not support metrics endpoint. Start it with `--metrics`') }
        : { status: 404, body: '{"detail":"Not Found"}' };
      res.cork(() => {
        res.writeStatus(statusLine(a.status));
        res.writeHeader('content-type', 'application/json');
        res.end(a.body);
      });
      return;
    }
    const body = metricsText(ctx);
    res.cork(() => {
      res.writeHeader('content-type', llama ? 'text/plain; version=0.0.4' : CONTENT_TYPE);
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
