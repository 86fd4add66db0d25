// What an OpenAI-compatible model server says of itself in GET /v1/models, read the same way by the
// gateway (gateway/backends/backend-kind.ts: the kind and context it fits max_tokens into) and the
// control plane (the context Model APIs shows, and the operator's check of a model's upstream):
//
// - vLLM: `{"object": "list", "data": [{"id", "owned_by": "vllm", "max_model_len", ...}]}`;
// - SGLang: `{"data": [{"id", "owned_by": "sglang", "max_model_len", ...}]}`;
// - llama.cpp: `{"models": [...], "object": "list", "data": [{"id", "owned_by": "llamacpp",
//   "meta": {"n_ctx", ...}}]}` (older servers: GET /props `default_generation_settings.n_ctx`).

export type ServerKind = 'vllm' | 'sglang' | 'llama.cpp';

/** The `owned_by` each server writes on its /v1/models entries. */
const OWNED_BY: Record<string, ServerKind> = { vllm: 'vllm', sglang: 'sglang', llamacpp: 'llama.cpp' };

const isRecord = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);
const positiveInt = (v: unknown): number | undefined => (typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : undefined);

/** The model ids a /v1/models body lists, or undefined when it is not such a list. */
export function listedModels(body: unknown): string[] | undefined {
  if (!isRecord(body) || !Array.isArray(body.data)) return undefined;
  return body.data.filter(isRecord).flatMap((d) => (typeof d.id === 'string' ? [d.id] : []));
}

/** Kind and context from a /v1/models body (the entry of `served`, else the first), or undefined when it is not such a list. */
export function readModelList(body: unknown, served: string): { kind: ServerKind | undefined; context: number | undefined } | undefined {
  if (!isRecord(body) || !Array.isArray(body.data)) return undefined;
  const items = body.data.filter(isRecord);
  const item = items.find((d) => d.id === served) ?? items[0];
  if (!item) return undefined;
  const kind = typeof item.owned_by === 'string' ? OWNED_BY[item.owned_by] : undefined;
  const context = positiveInt(item.max_model_len) ?? (isRecord(item.meta) ? positiveInt(item.meta.n_ctx) : undefined);
  return { kind, context };
}

/** The slot context of a llama.cpp /props body. */
export function readPropsContext(body: unknown): number | undefined {
  if (!isRecord(body) || !isRecord(body.default_generation_settings)) return undefined;
  return positiveInt(body.default_generation_settings.n_ctx);
}

/**
 * The root a model server's paths hang from, as the gateway's upstreams read a URL: its origin and
 * path without a trailing `/v1` (`http://h:8000/v1` and `http://h:8000` both give `http://h:8000`).
 */
export function modelServerRoot(url: string): string {
  const u = new URL(url);
  let path = u.pathname.replace(/\/+$/, '');
  if (path.endsWith('/v1')) path = path.slice(0, -3);
  return `${u.origin}${path}`;
}
