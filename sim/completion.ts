// One generation request validated and planned: a Responses request is mapped onto a chat
// request, so validation, the context window checks, output planning, tokens, tool choice and
// the prefix cache are those of chat completions. The Completion then renders itself as one
// JSON body or as the events of a stream; sim/non-stream.ts and sim/stream.ts send them. Its
// cached tokens are known only when it starts running (the prefix cache is looked up then, as
// vLLM's scheduler does), so they are set after planning.
import { hexId } from './generate.js';
import { planOutput, type Plan } from './plan.js';
import { completionBody, StreamRenderer } from './render.js';
import { chatRequestSchema, checkChatRequest, SimRequestError, validate, type ChatRequest } from './request.js';
import { responseBody, responsesRequestSchema, responsesToChat, ResponsesStreamRenderer, type ResponseMeta, type ResponsesRequest } from './responses.js';
import { applyChatTemplate, countTokens, encode } from './tokenizer.js';
import type { SimContext } from './context.js';

/** Which API a generation request came in on. */
export type Api = 'chat' | 'responses';

/** The events of one stream, token by token (the chat StreamRenderer and the ResponsesStreamRenderer). */
export interface SseRenderer {
  /** Number of token events. */
  readonly tokens: number;
  /** The first event(s), sent with the headers. */
  role(): string;
  /** The event(s) of token `i` (0-based). */
  token(i: number): string;
  /** What is sent when no token is generated at all. */
  emptyFinish(): string;
  /** The closing events. */
  tail(): string;
}

/** What planning found out about one request. */
interface Planned {
  req: ChatRequest;
  /** Set for a request that came in on the Responses API. */
  responsesReq: ResponsesRequest | undefined;
  plan: Plan;
  promptTokens: number;
  /** The prompt's token ids, needed for the prefix cache's block hashes (undefined without it). */
  promptIds: readonly number[] | undefined;
}

export class Completion {
  readonly req: ChatRequest;
  readonly plan: Plan;
  readonly promptTokens: number;
  readonly promptIds: readonly number[] | undefined;
  /** Prompt tokens served from the prefix cache: set when the request starts running (0 without the cache). */
  cachedTokens = 0;
  private readonly id: string;
  private readonly created = Math.floor(Date.now() / 1000);
  /** Set for a Responses request. */
  private readonly responsesReq: ResponsesRequest | undefined;

  constructor(
    p: Planned,
    private readonly model: string,
    private readonly modelJson: string,
  ) {
    this.req = p.req;
    this.plan = p.plan;
    this.promptTokens = p.promptTokens;
    this.promptIds = p.promptIds;
    this.responsesReq = p.responsesReq;
    this.id = `${p.responsesReq ? 'resp_' : 'chatcmpl-'}${hexId()}`;
  }

  get stream(): boolean {
    return this.req.stream === true;
  }

  /** Prompt tokens to prefill (not served from the prefix cache). */
  get uncachedTokens(): number {
    return this.promptTokens - this.cachedTokens;
  }

  /** For a Responses request: its ids and echoed fields. */
  private get responses(): ResponseMeta | undefined {
    const { responsesReq: req, id, created, model, promptTokens, cachedTokens } = this;
    return req && { id, created, model, req, promptTokens, cachedTokens };
  }

  /** The non-stream response body, as JSON. */
  json(): string {
    const { plan, promptTokens, cachedTokens } = this;
    const responses = this.responses;
    return JSON.stringify(responses ? responseBody(responses, plan) : completionBody(this.id, this.created, this.model, plan, promptTokens, cachedTokens));
  }

  /** The stream's events. */
  renderer(): SseRenderer {
    const responses = this.responses;
    if (responses) return new ResponsesStreamRenderer(responses, this.plan);
    const so = this.req.stream_options;
    const includeUsage = so?.include_usage === true;
    const continuousUsage = includeUsage && so?.continuous_usage_stats === true;
    return new StreamRenderer(this.id, this.created, this.modelJson, this.plan, this.promptTokens, includeUsage, continuousUsage, this.cachedTokens);
  }
}

/** Validates and plans one generation; throws SimRequestError (vLLM's status and message) for what vLLM refuses. */
export function planCompletion(ctx: SimContext, body: Record<string, unknown>, api: Api): Completion {
  const { maxModelLen, reasoning, seed } = ctx.opts;
  let responsesReq: ResponsesRequest | undefined;
  if (api === 'responses') responsesReq = validate(responsesRequestSchema, body);
  const req = validate(chatRequestSchema, responsesReq ? responsesToChat(responsesReq) : body);
  ctx.checkModel(req.model);
  checkChatRequest(req);
  const promptText = applyChatTemplate(req.messages, req.tools);
  // With prefix caching the token ids are needed anyway (block hashes): count them once.
  const promptIds = ctx.kv.prefix ? encode(promptText) : undefined;
  const promptTokens = promptIds ? promptIds.length : countTokens(promptText);
  const maxTokens = checkContextWindow(req, promptTokens, maxModelLen);
  const plan = planOutput(req, { reasoningModel: reasoning, limit: maxTokens ?? maxModelLen - promptTokens, promptText, seed });
  return new Completion({ req, responsesReq, plan, promptTokens, promptIds }, ctx.opts.model, ctx.modelJson);
}

/** vLLM's two context window errors: the prompt fills the window, or max_tokens exceeds the room left. Returns max_tokens. */
function checkContextWindow(req: ChatRequest, promptTokens: number, maxModelLen: number): number | null | undefined {
  if (promptTokens >= maxModelLen) {
    throw new SimRequestError(
      400,
      `This model's maximum context length is ${maxModelLen} tokens. However, your request has ${promptTokens} input tokens. Please reduce the length of the input messages.`,
      'messages',
    );
  }
  const room = maxModelLen - promptTokens;
  const maxTokens = req.max_completion_tokens ?? req.max_tokens;
  if (maxTokens != null && maxTokens > room) {
    throw new SimRequestError(
      400,
      `'max_tokens' or 'max_completion_tokens' is too large: ${maxTokens}. This model's maximum context length is ${maxModelLen} tokens and your request has ${promptTokens} input tokens (${maxTokens} > ${maxModelLen} - ${promptTokens}).`,
      'max_tokens',
    );
  }
  return maxTokens;
}
