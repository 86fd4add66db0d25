// POST /tokenize, as vLLM answers it: a chat (`messages`, `tools`, `add_generation_prompt`) or a
// plain `prompt` (`add_special_tokens`), counted with the sim's tokenizer and chat template.
// It neither reads nor fills the prefix cache.
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { jsonRoute } from './json-route.js';
import { tokenizeChatSchema, tokenizePromptSchema, validate } from './request.js';
import { recordHeaders } from './stats.js';
import { applyChatTemplate, encode, tokenize } from './tokenizer.js';

export function tokenizeRoute(ctx: SimContext): (res: HttpResponse, req: HttpRequest) => void {
  const route = jsonRoute(
    ctx,
    'tokenize',
    (body) => tokenized(ctx, body),
    (body) => {
      ctx.stats.lastBody = body;
    },
  );
  return (res, req) => {
    ctx.stats.tokenizeRequests++;
    recordHeaders(ctx.stats, req);
    route(res, req);
  };
}

/** The /tokenize answer for a body; throws SimRequestError for what vLLM refuses. */
function tokenized(ctx: SimContext, body: Record<string, unknown>): object {
  let text: string;
  let returnStrs: boolean | null | undefined;
  if (body.messages !== undefined || body.prompt === undefined) {
    const t = validate(tokenizeChatSchema, body);
    ctx.checkModel(t.model);
    text = applyChatTemplate(t.messages, t.tools, t.add_generation_prompt);
    returnStrs = t.return_token_strs;
  } else {
    const t = validate(tokenizePromptSchema, body);
    ctx.checkModel(t.model);
    text = (t.add_special_tokens ? '<s>' : '') + t.prompt;
    returnStrs = t.return_token_strs;
  }
  const tokens = encode(text);
  return { count: tokens.length, max_model_len: ctx.opts.maxModelLen, tokens, token_strs: returnStrs ? tokenize(text) : null };
}
