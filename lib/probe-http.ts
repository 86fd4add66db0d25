// Asking a program we started, or a tenant runs, about itself over HTTP: the gateway's questions
// to backends (GET /v1/models, /props, /metrics) and the agent's readiness check (GET /health).
// Never on a request path. undici's request on an Agent of our own, never the process's global
// dispatcher: in a platform process that is Node 20's own fetch Agent (its bundled undici 6 sets
// the global first, and the undici package's request then uses it too), which keeps a connection
// pool per origin it has ever called for the life of the process, and every instance is a new
// origin (a port of its own): the soak's heap grew 18 KB per instance launched (41-51 MB/h;
// bench/README.md "Soak"). This Agent (undici 7) closes and forgets an origin's pool once its last
// connection is gone; idle connections close after IDLE_MS. Also, fetch refuses the browsers' "bad
// ports" (6000, 6665, 10080...), which a model server may well use.
import { Agent, request } from 'undici';

const IDLE_MS = 4_000;
/** A dedicated backend is a tenant's program: what it answers is read up to this, no further. */
const MAX_BODY_BYTES = 1024 * 1024;

const probes = new Agent({ keepAliveTimeout: IDLE_MS, keepAliveMaxTimeout: IDLE_MS });

/** An answer's status and body (the callers ask for small documents). */
export interface ProbeAnswer {
  status: number;
  text: string;
}

/** GET `url` within `timeoutMs`; throws when there is no HTTP answer or the body passes MAX_BODY_BYTES. */
export async function probeGet(url: string, timeoutMs: number): Promise<ProbeAnswer> {
  const res = await request(url, { dispatcher: probes, signal: AbortSignal.timeout(timeoutMs) });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of res.body as AsyncIterable<Buffer>) {
    size += chunk.byteLength;
    if (size > MAX_BODY_BYTES) {
      res.body.destroy();
      throw new Error(`the answer passed ${MAX_BODY_BYTES} bytes`);
    }
    chunks.push(chunk);
  }
  return { status: res.statusCode, text: Buffer.concat(chunks, size).toString('utf8') };
}

/** The origins the probe client holds a pool for now (tests: a gone backend's origin is forgotten). */
export function probeOrigins(): string[] {
  return Object.keys(probes.stats);
}
