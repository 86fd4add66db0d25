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

/** The fields of vLLM's error body, checked loosely enough to survive message wording changes. */
export function isVllmError(body: any, code: number): boolean {
  return (
    body?.object === 'error' &&
    body.code === code &&
    typeof body.message === 'string' &&
    body.message.length > 0 &&
    body.type === (code === 404 ? 'NotFoundError' : code === 429 ? 'RateLimitError' : code >= 500 ? 'InternalServerError' : 'BadRequestError')
  );
}

export const user = (content: string) => ({ role: 'user' as const, content });
