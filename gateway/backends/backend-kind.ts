// What the gateway knows of the server behind each upstream: which kind it is (vLLM, SGLang,
// llama.cpp: they count prompts differently, admission/tokenize.ts) and its context window.
// Learned once per upstream and served name, on the first request that needs it (fitting, a
// count), from the server's own GET /v1/models (read in the servers' source):
//
// - vLLM: `{"object": "list", "data": [{"id", "owned_by": "vllm", "max_model_len", ...}]}`
//   (vllm/entrypoints/openai/protocol.py ModelCard);
// - SGLang: `{"data": [{"id", "owned_by": "sglang", "max_model_len", ...}]}`, the server's context
//   (python/sglang/srt/entrypoints/openai/protocol.py ModelCard); its /tokenize's max_model_len is
//   the tokenizer's limit (often 131072), not the server's;
// - llama.cpp: `{"models": [...], "object": "list", "data": [{"id", "owned_by": "llamacpp",
//   "meta": {"n_ctx", "n_ctx_train", ...}}]}` (tools/server/server-context.cpp): `meta.n_ctx` is
//   one slot's context (older servers lack it: then GET /props
//   `default_generation_settings.n_ctx`, the same slot context).
//
// The catalog entry's `server` names the kind when set (lib/config.ts), and its `maxContext` wins
// over the learned context (admission/context-fit.ts). A /tokenize answer in llama.cpp's shape
// also tells the kind (admission/tokenize.ts noteKind). The facts are kept per Upstream object,
// which outlives catalog reloads (the registry keeps it while a model uses its URL). A backend
// that cannot be reached is asked again after RETRY_MS; one that answers without these fields is
// not asked again.
import { readModelList, readPropsContext, type ServerKind } from '../../lib/model-list.js';
import type { BackendSummary, ModelState } from './model-catalog.js';
import type { Upstream } from './upstreams.js';
import { probeGet } from '../../lib/probe-http.js';

// Reading the bodies is shared with the control plane (lib/model-list.ts), which shows the same context.
export { readModelList, readPropsContext, type ServerKind } from '../../lib/model-list.js';

/** A probe that failed (unreachable, an error status) is tried again after this long. */
const RETRY_MS = 30_000;
const PROBE_TIMEOUT_MS = 5_000;

interface Facts {
  kind: ServerKind | undefined;
  context: number | undefined;
  /** Epoch ms of the last finished probe; 0: none yet. */
  probedAt: number;
  /** The probe failed: asked again after RETRY_MS. */
  failed: boolean;
  pending: Promise<void> | undefined;
}

const factsOf = new WeakMap<Upstream, Map<string, Facts>>();
/** Upstreams that showed they cannot count a chat prompt (admission/tokenize.ts). */
const cannot = new WeakSet<Upstream>();

/** Bumped on every change of a Facts or of `cannot`: every summary is recomputed at its next read. */
let generation = 0;

function summaryOf(model: ModelState): BackendSummary {
  const s = model.backend;
  if (s.generation === generation) return s;
  const served = servedName(model);
  let settled = true;
  let context: number | undefined;
  let count = true;
  for (const u of model.upstreams) {
    const f = factsOf.get(u)?.get(served);
    if (f === undefined || f.probedAt === 0 || f.failed || f.pending !== undefined) settled = false;
    const c = f?.context;
    if (c !== undefined && (context === undefined || c < context)) context = c;
    if (cannot.has(u)) count = false;
  }
  s.settled = settled;
  s.context = context;
  s.canCount = count;
  s.generation = generation;
  return s;
}

function facts(u: Upstream, served: string): Facts {
  let m = factsOf.get(u);
  if (!m) factsOf.set(u, (m = new Map()));
  let f = m.get(served);
  if (!f) {
    m.set(served, (f = { kind: undefined, context: undefined, probedAt: 0, failed: false, pending: undefined }));
    generation++;
  }
  return f;
}

/** Whether `model`'s backends may be asked for a count (none has shown that it cannot). */
export function canCount(model: ModelState): boolean {
  return summaryOf(model).canCount;
}

/** Remembers that `model`'s backends cannot count a chat prompt (never asked again). */
export function cannotCount(model: ModelState): void {
  for (const u of model.upstreams) cannot.add(u);
  generation++;
}

const servedName = (model: ModelState): string => model.servedName ?? model.name;

/** Whether `u` must be probed now. */
function due(f: Facts, now: number): boolean {
  return f.pending === undefined && (f.probedAt === 0 || (f.failed && now - f.probedAt >= RETRY_MS));
}

/** Whether everything there is to learn of `model`'s backends is known (no probe due or under way). */
export function backendLearned(model: ModelState): boolean {
  if (summaryOf(model).settled) return true;
  const now = Date.now();
  const served = servedName(model);
  for (const u of model.upstreams) {
    const f = facts(u, served);
    if (f.pending !== undefined || due(f, now)) return false;
  }
  return true;
}

/** Probes the backends of `model` not known yet; resolves once every probe ended (never rejects). */
export function learnBackend(model: ModelState): Promise<void> {
  const now = Date.now();
  const served = servedName(model);
  const waits: Promise<void>[] = [];
  for (const u of model.upstreams) {
    const f = facts(u, served);
    if (due(f, now)) {
      f.pending = probe(u, served, f);
      generation++;
    }
    if (f.pending) waits.push(f.pending);
  }
  return Promise.all(waits).then(() => undefined);
}

/** The server kind of `model`: the catalog's `server`, else what its backends said. */
export function serverKind(model: ModelState): ServerKind | undefined {
  const named = model.entry.server;
  if (named !== undefined) return named;
  const served = servedName(model);
  for (const u of model.upstreams) {
    const k = factsOf.get(u)?.get(served)?.kind;
    if (k !== undefined) return k;
  }
  return undefined;
}

/** Records what a backend's answer showed of its kind (a /tokenize reply in llama.cpp's shape). */
export function noteKind(model: ModelState, kind: ServerKind): void {
  const served = servedName(model);
  for (const u of model.upstreams) {
    const f = facts(u, served);
    f.kind ??= kind;
  }
  generation++;
}

/** The context window the backends of `model` report (the smallest over its upstreams), when known. */
export function backendContext(model: ModelState): number | undefined {
  return summaryOf(model).context;
}

async function getJson(u: Upstream, path: string): Promise<unknown> {
  const res = await probeGet(`${new URL(u.url).origin}${u.basePath}${path}`, PROBE_TIMEOUT_MS);
  if (res.status < 200 || res.status >= 300) throw new Error(`HTTP ${res.status}`);
  return JSON.parse(res.text) as unknown; // a SyntaxError: a 200 that is not JSON (the caller tells it apart)
}

async function probe(u: Upstream, served: string, f: Facts): Promise<void> {
  let failed = false;
  try {
    let read: ReturnType<typeof readModelList>;
    try {
      read = readModelList(await getJson(u, '/v1/models'), served);
    } catch (err) {
      // Unreachable or an error status: asked again later. A 200 that is not JSON: nothing to learn.
      failed = !(err instanceof SyntaxError);
      read = undefined;
    }
    if (read) {
      f.kind ??= read.kind;
      f.context = read.context;
      if (read.context === undefined && f.kind === 'llama.cpp') {
        try {
          f.context = readPropsContext(await getJson(u, '/props'));
        } catch {
          // No /props: the context stays unknown (the catalog's maxContext, or the backend judges).
        }
      }
    }
  } finally {
    f.failed = failed;
    f.probedAt = Date.now();
    f.pending = undefined;
    generation++;
  }
}
