// POST /tokenize, as each server answers it (and llama.cpp's POST /apply-template), counted with
// the sim's tokenizer and chat template. Neither reads nor fills the prefix cache.
// - vLLM: a chat (`messages`, `tools`, `add_generation_prompt`) or a plain `prompt`
//   (`add_special_tokens`) -> {count, max_model_len, tokens, token_strs}.
// - SGLang (serving_tokenize.py, protocol.py TokenizeRequest/TokenizeResponse): exactly one of
//   `prompt` or `messages` (0.5.x: `prompt` only, so a chat is a 400) -> {tokens, count,
//   max_model_len}, max_model_len being the tokenizer's model_max_length, not the context.
// - llama.cpp (server-context.cpp): {content, add_special (false), with_pieces} -> {tokens}
//   (with pieces: [{id, piece}]); /apply-template {messages, tools} -> {prompt}, the chat
//   template's text without BOS, so /tokenize of it with add_special is the chat's prompt_tokens.
import { z } from 'zod';
import type { HttpRequest, HttpResponse } from '../lib/uws.js';
import type { SimContext } from './context.js';
import { familyOf } from './flavours/index.js';
import { SGLANG_TOKENIZER_MAX_LEN } from './flavours/sglang.js';
import { jsonRoute } from './json-route.js';
import { messageSchema, SimRequestError, tokenizeChatSchema, tokenizePromptSchema, toolSchema, validate } from './request.js';
import { recordHeaders } from './stats.js';
import { applyChatTemplate, encode, SPECIAL, tokenize } from './tokenizer.js';

type Handler = (res: HttpResponse, req: HttpRequest) => void;

/** A JSON route counted as a tokenize request (stats), its body kept as lastBody. */
function countedRoute(ctx: SimContext, what: string, answer: (body: Record<string, unknown>) => unknown): Handler {
  const route = jsonRoute(ctx, what, answer, (body) => {
    ctx.stats.lastBody = body;
  });
  return (res, req) => {
    ctx.stats.tokenizeRequests++;
    recordHeaders(ctx.stats, req);
    route(res, req);
  };
}

export function tokenizeRoute(ctx: SimContext): Handler {
  const family = familyOf(ctx.flavour.name);
  const answer = family === 'vllm' ? vllmTokenize : family === 'sglang' ? sglangTokenize : llamaCppTokenize;
  return countedRoute(ctx, 'tokenize', (body) => answer(ctx, body));
}

/** POST /apply-template (llama.cpp only). */
export function applyTemplateRoute(ctx: SimContext): Handler {
  return countedRoute(ctx, 'apply-template', (body) => {
    const t = validate(applyTemplateSchema, body);
    return { prompt: applyChatTemplate(t.messages, t.tools).slice(SPECIAL.bos.length) };
  });
}

function vllmTokenize(ctx: SimContext, body: Record<string, unknown>): object {
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
    text = (t.add_special_tokens ? SPECIAL.bos : '') + t.prompt;
    returnStrs = t.return_token_strs;
  }
  const tokens = encode(text);
  return { count: tokens.length, max_model_len: ctx.opts.maxModelLen, tokens, token_strs: returnStrs ? tokenize(text) : null };
}

function sglangTokenize(ctx: SimContext, body: Record<string, unknown>): object {
  const hasPrompt = body.prompt != null;
  const hasMessages = body.messages != null;
  let text: string;
  if (ctx.flavour.name === 'sglang-0.5' || hasPrompt) {
    if (!hasPrompt) throw new SimRequestError(400, 'prompt: Field required', 'prompt');
    if (hasMessages && ctx.flavour.name !== 'sglang-0.5') throw new SimRequestError(400, "Exactly one of 'prompt' or 'messages' must be provided.");
    const t = validate(tokenizePromptSchema, body);
    text = (t.add_special_tokens ? SPECIAL.bos : '') + t.prompt;
  } else {
    if (!hasMessages) throw new SimRequestError(400, "Exactly one of 'prompt' or 'messages' must be provided.");
    const t = validate(tokenizeChatSchema, body);
    text = applyChatTemplate(t.messages, t.tools);
  }
  const tokens = encode(text);
  return { tokens, count: tokens.length, max_model_len: SGLANG_TOKENIZER_MAX_LEN };
}

const llamaTokenizeSchema = z.looseObject({
  content: z.string().optional(),
  add_special: z.boolean().default(false),
  with_pieces: z.boolean().default(false),
});

const applyTemplateSchema = z.looseObject({
  messages: z.array(messageSchema),
  tools: z.array(toolSchema).nullish(),
});

function llamaCppTokenize(_ctx: SimContext, body: Record<string, unknown>): object {
  const t = validate(llamaTokenizeSchema, body);
  if (t.content === undefined) return { tokens: [] };
  const text = (t.add_special ? SPECIAL.bos : '') + t.content;
  const ids = encode(text);
  if (!t.with_pieces) return { tokens: ids };
  const pieces = tokenize(text);
  return { tokens: ids.map((id, i) => ({ id, piece: pieces[i] })) };
}
