// Shared setup of the sim test files: a sim on an ephemeral port and an official OpenAI client on it.
import OpenAI from 'openai';
import { startSim, type SimOptions, type SimServer } from '../../sim/server.js';

export async function simWithClient(options: SimOptions = {}): Promise<{ sim: SimServer; client: OpenAI }> {
  const sim = await startSim({ model: 'sim-test', fast: true, ...options });
  const client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'sk-unused', maxRetries: 0, timeout: 20_000 });
  return { sim, client };
}

/** POSTs JSON (or a raw string) and returns status, headers and parsed body. */
export async function postJson(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; headers: Headers; body: any }> {
  const r = await fetch(url, {
    method: 'POST',
    body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'content-type': 'application/json', ...headers },
  });
  const text = await r.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    /* not JSON: keep the text */
  }
  return { status: r.status, headers: r.headers, body: parsed };
}

/**
 * The fields of vLLM's error body (nested since 0.10.1: `{error: {message, type, param, code}}`),
 * checked loosely enough to survive message wording changes.
 */
export function isVllmError(body: any, code: number): boolean {
  const e = body?.error;
  return (
    e?.code === code &&
    typeof e.message === 'string' &&
    e.message.length > 0 &&
    'param' in e &&
    e.type === (code === 404 ? 'NotFoundError' : code === 429 ? 'RateLimitError' : code >= 500 ? 'InternalServerError' : 'BadRequestError')
  );
}

export const user = (content: string) => ({ role: 'user' as const, content });

/**
 * Starts a streamed chat completion without waiting for its headers (a request waiting for a
 * batch slot gets none): its SSE events as they arrive, and an abort.
 */
export function startStream(url: string, body: Record<string, unknown>): { events: string[]; abort: () => void; done: Promise<unknown> } {
  const ac = new AbortController();
  const events: string[] = [];
  const done = (async () => {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      body: JSON.stringify({ model: 'sim-test', stream: true, ...body }),
      headers: { 'content-type': 'application/json' },
      signal: ac.signal,
    });
    let buffer = '';
    const decoder = new TextDecoder();
    for await (const chunk of r.body as unknown as AsyncIterable<Uint8Array>) {
      buffer += decoder.decode(chunk, { stream: true });
      let i;
      while ((i = buffer.indexOf('\n\n')) >= 0) {
        events.push(buffer.slice(0, i));
        buffer = buffer.slice(i + 2);
      }
    }
  })().catch((err: unknown) => err);
  return { events, abort: () => ac.abort(), done };
}

/** GET /metrics: the content type and each sample's value by its name (labels dropped), plus the text. */
export async function scrape(url: string): Promise<{ contentType: string | null; text: string; value: (name: string) => number | undefined }> {
  const r = await fetch(`${url}/metrics`);
  const text = await r.text();
  const values = new Map<string, number>();
  for (const line of text.split('\n')) {
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$/.exec(line);
    if (m) values.set(m[1]!, Number(m[3]));
  }
  return { contentType: r.headers.get('content-type'), text, value: (name) => values.get(name) };
}
