// One streamed request of the routing benchmark, as a client sees it: the time to its first
// generated token, which sim served it (the sims' `x-sim-instance` header, relayed by the
// gateway on chat completions) and whether it succeeded.
import { performance } from 'node:perf_hooks';
import { request } from 'undici';

export interface Outcome {
  /** The conversation's protocol (set by the sender). */
  protocol: 'chat' | 'messages';
  ok: boolean;
  status: number;
  /** Milliseconds from sending to the first generated token (NaN when none came). */
  ttftMs: number;
  /** The sim that served it, when the response says (undefined through the messages protocol). */
  servedBy: string | undefined;
  /** The sim's own time to first token (`x-sim-first-token-ms`), when the response says (as servedBy). */
  engineTtftMs: number;
}

// The first generated token: a chat delta with non-empty content, or a messages text delta (the
// role event that opens a chat stream has empty content and does not count).
const FIRST_TOKEN = /"content":"[^"]|"text_delta"/;

export async function streamOnce(protocol: Outcome['protocol'], url: string, headers: Record<string, string>, body: unknown): Promise<Outcome> {
  const t0 = performance.now();
  let ttftMs = Number.NaN;
  try {
    const r = await request(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
    const served = r.headers['x-sim-instance'];
    const engine = r.headers['x-sim-first-token-ms'];
    for await (const chunk of r.body) {
      if (Number.isNaN(ttftMs) && FIRST_TOKEN.test((chunk as Buffer).toString('latin1'))) ttftMs = performance.now() - t0;
    }
    return {
      protocol,
      ok: r.statusCode === 200,
      status: r.statusCode,
      ttftMs,
      servedBy: typeof served === 'string' ? served : undefined,
      engineTtftMs: typeof engine === 'string' ? Number(engine) : Number.NaN,
    };
  } catch {
    return { protocol, ok: false, status: 0, ttftMs, servedBy: undefined, engineTtftMs: Number.NaN };
  }
}

/** The p-th percentile (0..100) of `xs` by nearest rank; NaN for none. */
export function percentile(xs: readonly number[], p: number): number {
  const v = xs.filter((x) => !Number.isNaN(x)).sort((a, b) => a - b);
  if (v.length === 0) return Number.NaN;
  return v[Math.min(v.length - 1, Math.max(0, Math.ceil((p / 100) * v.length) - 1))]!;
}
