// The backend's /tokenize, the one way the gateway asks a backend to count a prompt: for fitting
// max tokens and for the gate's exact count (context-fit.ts), and for count_tokens
// (messages/count-tokens.ts). One request (same path, same response limit) and one rule for
// what says "this backend cannot count".
import type { ModelState } from '../backends/model-catalog.js';
import { requestUpstream, type Route, type UpstreamResponse } from '../backends/upstreams.js';
import type { GatewayContext } from '../context.js';

/** Statuses of a backend without /tokenize (count_tokens then estimates; fitting stops asking that model). */
const NO_TOKENIZE = new Set([404, 405, 501]);
const MAX_TOKENIZE_RESPONSE_BYTES = 16 * 1024 * 1024;

/** The answer means the backend has no /tokenize. */
export function cannotTokenize(status: number): boolean {
  return NO_TOKENIZE.has(status);
}

/** Posts `body` (a serialized PromptParts) to the /tokenize of the upstream `route` picks (learning nothing); rejects with UpstreamError. */
export function requestTokenize(ctx: GatewayContext, model: ModelState, route: Route, body: string, signal: AbortSignal): Promise<UpstreamResponse> {
  return requestUpstream(ctx.upstreams, model, route, body, { path: '/tokenize', signal, maxBytes: MAX_TOKENIZE_RESPONSE_BYTES });
}

/** `{count, max_model_len?}` of a /tokenize answer, or undefined when malformed. */
export function parseTokenizeResponse(body: Buffer): { count: number; maxModelLen: number | undefined } | undefined {
  try {
    const v = JSON.parse(body.toString('utf8')) as { count?: unknown; max_model_len?: unknown };
    if (v === null || typeof v !== 'object' || !isCount(v.count)) return undefined;
    return { count: v.count, maxModelLen: isCount(v.max_model_len) && v.max_model_len > 0 ? v.max_model_len : undefined };
  } catch {
    return undefined;
  }
}

function isCount(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}
