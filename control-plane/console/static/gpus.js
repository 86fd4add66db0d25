// GPU telemetry in the console (issue 41): the tenant's instance page shows its GPUs'
// utilization and memory live, the operator's Hosts page every GPU of every host, each with its
// short history drawn as a sparkline. The history comes once from the API (GET /api/notebook/gpus,
// GET /api/operator/hosts/:name/gpus); new samples come with the live streams the pages already
// follow (the status stream's `gpus` events, the operator stream's `hosts` snapshots) and are
// appended here. Simulated GPUs report nothing, and the page says so rather than drawing zeros.
// Loaded by app.js when the instance page opens (dynamic import) and by operator.js.
import { api, h, svg } from '/console/app.js';

/** Samples kept per GPU in the page (the API's history is at most RC_INSTANCE_GPU_HISTORY_SAMPLES). */
const KEEP = 2000;
const UTIL_COLOUR = '#0b5cad';
const MEM_COLOUR = '#7b3fa0';

/** One GPU's samples as columns, oldest first. */
class Series {
  constructor() {
    this.t = [];
    this.util = [];
    this.mem = [];
  }

  /** Appends the API's history (`{sampled_at_ms, utilization_pct, memory_used_mb}`) before what the stream brought. */
  merge(history) {
    if (!history) return;
    const newer = this.t.map((t, i) => [t, this.util[i], this.mem[i]]).filter(([t]) => t > (history.sampled_at_ms.at(-1) ?? 0));
    this.t = [...history.sampled_at_ms];
    this.util = [...history.utilization_pct];
    this.mem = [...history.memory_used_mb];
    for (const [t, u, m] of newer) this.push(t, u, m);
  }

  /** A GPU view's latest figures (when it has any, and they are newer than the last). */
  add(g) {
    if (g.sampled_at === null || g.utilization_pct === null) return;
    this.push(Date.parse(g.sampled_at), g.utilization_pct, g.memory_used_mb);
  }

  push(t, u, m) {
    if (this.t.length && t <= this.t.at(-1)) return;
    this.t.push(t);
    this.util.push(u);
    this.mem.push(m);
    if (this.t.length > KEEP) for (const c of [this.t, this.util, this.mem]) c.splice(0, c.length - KEEP);
  }
}

/** What the lines cover, in words: "the last 12 min" (the longest of the series). */
function spanOf(list) {
  const ms = Math.max(0, ...list.filter((s) => s && s.t.length > 1).map((s) => s.t.at(-1) - s.t[0]));
  return ms ? `the last ${span(ms)}` : 'the samples as they come';
}

const pct = (v) => `${Math.round(v)} %`;
/** MiB as "812 MiB" or "4.8 GiB". */
const mib = (v) => (v < 1024 ? `${Math.round(v)} MiB` : `${(v / 1024).toFixed(1)} GiB`);
function span(ms) {
  const s = Math.max(1, Math.round(ms / 1000));
  return s < 120 ? `${s} s` : `${Math.round(s / 60)} min`;
}

/**
 * A sparkline of `values` at `times` (ms) on 0..max: an inline SVG area whose accessible name sums
 * it up (`what` over the span: now, peak, mean). A gap in the samples (sampling failed for a
 * while) breaks the line instead of bridging it.
 */
export function sparkline(times, values, max, colour, what, fmt) {
  if (!values.length) return h('span', { class: 'hint spark-none' }, ' no samples yet');
  const W = 120;
  const H = 28;
  const t0 = times[0];
  const width = Math.max(1, times.at(-1) - t0);
  const steps = times.slice(1).map((t, i) => t - times[i]).sort((a, b) => a - b);
  const gap = 3 * (steps[Math.floor(steps.length / 2)] ?? Number.POSITIVE_INFINITY);
  const y = (v) => (H - 1 - (Math.min(v, max) / max) * (H - 2)).toFixed(1);
  const x = (t) => (values.length === 1 ? W : ((t - t0) / width) * W).toFixed(1);
  const runs = [[]];
  values.forEach((v, i) => {
    if (i > 0 && times[i] - times[i - 1] > gap) runs.push([]);
    runs.at(-1).push([x(times[i]), y(v)]);
  });
  const shapes = runs.flatMap((run) => {
    const pts = run.length === 1 ? [[Math.max(0, run[0][0] - 2).toFixed(1), run[0][1]], run[0]] : run;
    const line = pts.map((p) => p.join(',')).join(' ');
    return [
      svg('polygon', { points: `${pts[0][0]},${H} ${line} ${pts.at(-1)[0]},${H}`, fill: colour, 'fill-opacity': 0.15 }),
      svg('polyline', { points: line, fill: 'none', stroke: colour, 'stroke-width': 1.5, 'vector-effect': 'non-scaling-stroke' }),
    ];
  });
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  const label = `${what} over the last ${span(times.at(-1) - t0)}: now ${fmt(values.at(-1))}, peak ${fmt(Math.max(...values))}, mean ${fmt(mean)}`;
  return svg('svg', { class: 'spark', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': label },
    svg('title', {}, label), svg('line', { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, class: 'spark-axis' }), shapes);
}

/** Utilization and memory of one GPU: the figures and their sparklines. */
function figures(g, s) {
  const util = g.utilization_pct === null ? 'no telemetry' : pct(g.utilization_pct);
  const mem = g.memory_used_mb === null ? `no telemetry (${mib(g.memory_mb)} in all)` : `${mib(g.memory_used_mb)} of ${mib(g.memory_mb)}`;
  const has = s && s.t.length > 0;
  return {
    util: h('span', { class: 'gpu-figure' }, h('span', { class: 'gpu-util' }, util),
      has ? sparkline(s.t, s.util, 100, UTIL_COLOUR, `GPU ${g.index} utilization`, pct) : null),
    mem: h('span', { class: 'gpu-figure' }, h('span', { class: 'gpu-mem' }, mem),
      has ? sparkline(s.t, s.mem, g.memory_mb, MEM_COLOUR, `GPU ${g.index} memory in use`, mib) : null),
  };
}

/** Why an instance's GPUs have no figures, in a sentence (null when they have them). */
function telemetryNote(telemetry, count) {
  if (telemetry === 'none') return 'No GPU telemetry yet: GPUs are assigned when the instance is placed on a host.';
  if (telemetry === 'simulated') {
    return count === 1 ? 'No GPU telemetry: this instance runs on a simulated GPU, which reports no utilization or memory figures.'
      : 'No GPU telemetry: this instance runs on simulated GPUs, which report no utilization or memory figures.';
  }
  if (telemetry === 'unavailable') return 'No GPU telemetry right now: the host reports no current figures (nvidia-smi not answering, sampling off, or the host not reachable). Any lines show what was sampled before.';
  return null;
}

/**
 * The instance page's GPU section, in `box`: `status(st)` on every status event (shown while the
 * instance is pending or ready), `sample(ev)` on every `gpus` event of the status stream.
 */
export function instanceGpus(box) {
  let view = null;
  let loading = null;
  const series = new Map();

  function draw() {
    if (!view) return;
    const parts = [h('h2', { id: 'gpu-h' }, view.gpus.length === 1 ? 'GPU' : 'GPUs')];
    const note = telemetryNote(view.telemetry, view.gpus.length);
    if (note) parts.push(h('p', { class: 'notice', id: 'gpu-note' }, note));
    else if (view.telemetry === 'sampled') parts.push(h('p', { class: 'hint', id: 'gpu-span' }, `Sampled on the host every few seconds; the lines show ${spanOf(view.gpus.map((g) => series.get(g.index)))}.`));
    for (const g of view.gpus) {
      const f = figures(g, series.get(g.index));
      parts.push(h('div', { class: 'gpu', 'data-gpu': g.index },
        h('h3', {}, `GPU ${g.index} `, h('span', { class: 'hint' }, g.model)),
        h('dl', { class: 'facts' }, h('dt', {}, 'Utilization'), h('dd', {}, f.util), h('dt', {}, 'Memory'), h('dd', {}, f.mem))));
    }
    box.replaceChildren(...parts);
  }

  function load() {
    loading ??= api('GET', '/api/notebook/gpus')
      .then((v) => {
        view = v;
        series.clear();
        for (const g of v.gpus) {
          const s = new Series();
          s.merge(g.history);
          series.set(g.index, s);
        }
        draw();
      })
      .catch(() => {})
      .finally(() => { loading = null; });
    return loading;
  }

  return {
    status(st) {
      const live = st && (st.status === 'pending' || st.status === 'ready');
      box.hidden = !live;
      if (!live) { view = null; return; }
      // A new instance, or GPUs assigned since (placed): the whole view again.
      if (!view || view.instance_id !== st.instance_id || (view.telemetry === 'none' && st.placed_at)) load();
    },
    sample(ev) {
      const known = view && view.instance_id === ev.instance_id && ev.gpus.every((g) => series.has(g.index)) && ev.gpus.length === view.gpus.length;
      if (!known) return load();
      view = { ...view, telemetry: ev.telemetry, gpus: ev.gpus };
      for (const g of ev.gpus) series.get(g.index).add(g);
      draw();
    },
  };
}

/**
 * The Hosts page's GPU tables, in `box`: every GPU of every host (index, model, utilization,
 * memory, holder) with its history. `update(hosts)` with each `hosts` snapshot; `table` is the
 * operator pages' table builder (stacked on phones).
 */
export function hostGpus(box, table) {
  const series = new Map();
  const fetched = new Set();
  let hosts = [];
  const key = (host, index) => `${host}/${index}`;
  const seriesOf = (host, index) => {
    let s = series.get(key(host, index));
    if (!s) series.set(key(host, index), (s = new Series()));
    return s;
  };

  function draw() {
    const withGpus = hosts.filter((x) => x.gpus && x.gpus.length);
    const parts = [h('h2', { id: 'gpus-h' }, 'GPUs')];
    if (!withGpus.length) parts.push(h('p', { class: 'muted' }, 'No host has reported its GPUs yet.'));
    for (const x of withGpus) {
      const simulated = x.gpus.every((g) => g.uuid === null);
      const lines = simulated ? '' : `; lines: ${spanOf(x.gpus.map((g) => series.get(key(x.name, g.index))))}`;
      parts.push(h('h3', {}, x.name, h('span', { class: 'hint' }, ` · ${x.gpus.length} × ${x.gpu_model}${lines}`)));
      if (simulated) parts.push(h('p', { class: 'hint' }, 'Simulated GPUs: no GPU telemetry (they report no figures).'));
      parts.push(table(`GPUs of ${x.name}`, ['GPU', 'Utilization', 'Memory', 'Instance'], x.gpus.map((g) => {
        const f = figures(g, series.get(key(x.name, g.index)));
        return [h('span', {}, h('strong', {}, String(g.index)), h('span', { class: 'hint gpu-model' }, ` ${g.model}`)), f.util, f.mem, g.instance_id ?? h('span', { class: 'muted' }, 'free')];
      })));
    }
    box.replaceChildren(...parts);
  }

  return {
    update(next) {
      hosts = next;
      const names = new Set(next.map((x) => x.name));
      for (const k of series.keys()) if (!names.has(k.slice(0, k.lastIndexOf('/')))) series.delete(k);
      for (const x of next) {
        if (!x.gpus) continue;
        for (const g of x.gpus) seriesOf(x.name, g.index).add(g);
        if (fetched.has(x.name) || x.gpus.every((g) => g.uuid === null)) continue;
        fetched.add(x.name);
        api('GET', `/api/operator/hosts/${encodeURIComponent(x.name)}/gpus`)
          .then((v) => { for (const g of v.gpus) seriesOf(x.name, g.index).merge(g.history); draw(); })
          .catch(() => fetched.delete(x.name));
      }
      draw();
    },
  };
}
