// Asking a shared model's upstream (an OpenAI-compatible server: vLLM, SGLang, llama.cpp, the sim)
// about itself, from the control plane: its model listing (GET /v1/models: which names it serves,
// its context window) and a one-token completion. Used by Model APIs' context column
// (model-contexts.ts) and the operator's check before a model is saved (model-check.ts). Never on a
// request path of the gateway. Bodies are read up to MAX_BODY_BYTES: an upstream is the
// operator's choice, but a wrong URL may point at anything. undici's request, not fetch: fetch
// refuses the "bad ports" of browsers (6000, 6665, 10080...), which a model server may well use.
import { request, type Dispatcher } from 'undici';
import { listedModels, modelServerRoot, readModelList, readPropsContext, type ServerKind } from '../lib/model-list.js';

const MAX_BODY_BYTES = 1024 * 1024;

/** What GET /v1/models of one upstream gave. */
export type ListingResult =
  /** No HTTP answer: refused, a name that does not resolve, a timeout. */
  | { kind: 'unreachable'; error: string }
  /** An HTTP answer that is not a model listing (an error status, not JSON, not the list shape). */
  | { kind: 'not-a-model-server'; status: number; excerpt: string }
  | { kind: 'listed'; models: string[]; context: number | undefined; server: ServerKind | undefined };

/** What a one-token completion gave. */
export type CompletionResult =
  | { kind: 'unreachable'; error: string }
  | { kind: 'failed'; status: number; message: string }
  | { kind: 'answered'; ms: number; finishReason: string | null };

/** Why a request failed, in a few words. */
function reason(err: unknown): string {
  const e = err as { name?: string; code?: string; message?: string };
  if (e.name === 'TimeoutError' || e.name === 'AbortError' || e.code === 'UND_ERR_HEADERS_TIMEOUT' || e.code === 'UND_ERR_BODY_TIMEOUT')
    return 'no answer in time';
  if (e.code === 'ECONNREFUSED') return 'connection refused';
  if (e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN') return 'the host name does not resolve';
  if (e.code === 'ECONNRESET' || e.code === 'UND_ERR_SOCKET') return 'the connection was reset';
  if (e.code === 'UND_ERR_CONNECT_TIMEOUT') return 'no connection in time';
  return e.message ?? String(err);
}

interface Answer {
  status: number;
  text: string;
}

/** One request; the body read up to MAX_BODY_BYTES (the rest is dropped). Throws when there is no HTTP answer. */
async function call(url: string, timeoutMs: number, o: { method?: Dispatcher.HttpMethod; body?: string } = {}): Promise<Answer> {
  const res = await request(url, {
    method: o.method ?? 'GET',
    body: o.body,
    headers: o.body ? { 'content-type': 'application/json', accept: 'application/json' } : { accept: 'application/json' },
    signal: AbortSignal.timeout(timeoutMs),
  });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body) {
    chunks.push(chunk as Buffer);
    size += (chunk as Buffer).byteLength;
    if (size >= MAX_BODY_BYTES) {
      res.body.destroy();
      break;
    }
  }
  return { status: res.statusCode, text: Buffer.concat(chunks).toString('utf8') };
}

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
};

const excerptOf = (text: string) => text.replace(/\s+/g, ' ').trim().slice(0, 160);

/** GET /v1/models of `upstream`; `served`: the name whose entry gives the context. */
export async function readListing(upstream: string, served: string, timeoutMs: number): Promise<ListingResult> {
  const root = modelServerRoot(upstream);
  let res: Answer;
  try {
    res = await call(`${root}/v1/models`, timeoutMs);
  } catch (err) {
    return { kind: 'unreachable', error: reason(err) };
  }
  const body = parse(res.text);
  const models = res.status === 200 ? listedModels(body) : undefined;
  if (!models) return { kind: 'not-a-model-server', status: res.status, excerpt: excerptOf(res.text) };
  const read = readModelList(body, served);
  let context = read?.context;
  if (context === undefined && read?.kind === 'llama.cpp') {
    // Older llama.cpp servers give their slot context only in /props (as the gateway reads it).
    try {
      const props = await call(`${root}/props`, timeoutMs);
      context = props.status === 200 ? readPropsContext(parse(props.text)) : undefined;
    } catch {
      // No /props: the context stays unknown.
    }
  }
  return { kind: 'listed', models, context, server: read?.kind };
}

/** POST /v1/chat/completions of `upstream` for `served` with max_tokens 1. */
export async function oneTokenCompletion(upstream: string, served: string, timeoutMs: number): Promise<CompletionResult> {
  const started = performance.now();
  let res: Answer;
  try {
    res = await call(`${modelServerRoot(upstream)}/v1/chat/completions`, timeoutMs, {
      method: 'POST',
      body: JSON.stringify({ model: served, messages: [{ role: 'user', content: 'Say OK.' }], max_tokens: 1, stream: false }),
    });
  } catch (err) {
    return { kind: 'unreachable', error: reason(err) };
  }
  const body = parse(res.text) as { choices?: { finish_reason?: unknown }[]; error?: unknown; message?: unknown; detail?: unknown } | undefined;
  if (res.status !== 200 || !body || !Array.isArray(body.choices)) {
    return { kind: 'failed', status: res.status, message: errorMessage(body) ?? (excerptOf(res.text) || `HTTP ${res.status}`) };
  }
  const finish = body.choices[0]?.finish_reason;
  return { kind: 'answered', ms: Math.round(performance.now() - started), finishReason: typeof finish === 'string' ? finish : null };
}

/** The message of an error body in the shapes servers use (OpenAI's nested error, vLLM's flat one, FastAPI's detail). */
function errorMessage(body: { error?: unknown; message?: unknown; detail?: unknown } | undefined): string | undefined {
  if (!body) return undefined;
  const e = body.error as { message?: unknown } | string | undefined;
  const m = typeof e === 'string' ? e : typeof e?.message === 'string' ? e.message : typeof body.message === 'string' ? body.message : body.detail;
  return typeof m === 'string' ? m.slice(0, 300) : undefined;
}
