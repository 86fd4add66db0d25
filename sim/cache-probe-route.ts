// POST /rc/cache-probe: a sim-only route for benchmarks (vLLM has none like it). For a chat
// prompt (`/tokenize`'s chat form: `{model?, messages, tools?}`) it answers how many of its
// tokens this sim's prefix cache would serve now, as a generation would count them, without
// changing the cache or its LRU order: an "oracle" router asks every sim before choosing one.
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { jsonRoute } from './json-route.js';
import { tokenizeChatSchema, validate } from './request.js';
import { applyChatTemplate, encode } from './tokenizer.js';

export function cacheProbeRoute(ctx: SimContext): (res: HttpResponse, req: HttpRequest) => void {
  return jsonRoute(ctx, 'cache probe', (body) => probe(ctx, body));
}

/** The prompt as a generation would see it (chat template with the generation prompt), and its cached tokens now. */
function probe(ctx: SimContext, body: Record<string, unknown>): { cached_tokens: number; prompt_tokens: number } {
  const t = validate(tokenizeChatSchema, body);
  ctx.checkModel(t.model);
  const ids = encode(applyChatTemplate(t.messages, t.tools));
  return { cached_tokens: ctx.kv.peek(ids), prompt_tokens: ids.length };
}
