// POST /tokenize, as vLLM answers it: a chat (`messages`, `tools`, `add_generation_prompt`) or a
// plain `prompt` (`add_special_tokens`), counted with the sim's tokenizer and chat template.
// It neither reads nor fills the prefix cache.
import { parseJsonObject, readBody, sendJson, track } from '../lib/http.js';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { NOT_AN_OBJECT, SimRequestError, tokenizeChatSchema, tokenizePromptSchema, validate, vllmError } from './request.js';
import { recordHeaders } from './stats.js';
import { applyChatTemplate, encode, tokenize } from './tokenizer.js';

export function tokenizeRoute(ctx: SimContext): (res: HttpResponse, req: HttpRequest) => void {
  return (res, req) => {
    const r = track(res);
    ctx.stats.tokenizeRequests++;
    recordHeaders(ctx.stats, req);
    readBody(
      r,
      req.getHeader('content-length'),
      ctx.opts.maxBodyBytes,
      (buf) => {
        const body = parseJsonObject(buf);
        if (!body) return sendJson(r, 400, vllmError(400, NOT_AN_OBJECT));
        ctx.stats.lastBody = body;
        try {
          sendJson(r, 200, tokenized(ctx, body));
        } catch (err) {
          if (err instanceof SimRequestError) return sendJson(r, err.status, err.body());
          ctx.log.error('tokenize failed', { err });
          sendJson(r, 500, vllmError(500, 'Internal error in the sim'));
        }
      },
      (err) => sendJson(r, err.status, vllmError(err.status, err.message)),
    );
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
