// One generation request validated and planned: a Responses request is mapped onto a chat
// request, so validation, the context window checks, output planning, tokens, tool choice and
// the prefix cache are those of chat completions. The Completion then renders itself as one
// JSON body or as the events of a stream; sim/non-stream.ts and sim/stream.ts send them. Its
// cached tokens are known only when it starts running (the prefix cache is looked up then, as
// vLLM's scheduler does), so they are set after planning.
import type { ChatAnswer, Flavour } from './flavours/index.js';
import { hexId } from './generate.js';
import type { Pace } from './pace.js';
import { planOutput, type Plan } from './plan.js';
import { toolChoiceKind } from './render.js';
import { chatRequestSchema, checkChatRequest, SimRequestError, validate, type ChatRequest } from './request.js';
import { responseBody, responsesRequestSchema, responsesToChat, ResponsesStreamRenderer, type ResponseMeta, type ResponsesRequest } from './responses.js';
import { applyChatTemplate, countTokens, encode } from './tokenizer.js';
import type { SimContext } from './context.js';

/** Which API a generation request came in on. */
export type Api = 'chat' | 'responses';

/** The events of one stream, token by token (a flavour's chat events, or the ResponsesStreamRenderer). */
export interface SseRenderer {
  /** Number of token events. */
  readonly tokens: number;
  /** The first event(s), sent with the headers ('' when the server sends nothing before its first token). */
  head(): string;
  /** The event(s) of token `i` (0-based). */
  token(i: number): string;
  /** The closing events (the finish, whatever was generated). */
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
    private readonly flavour: Flavour,
    private readonly opts: { reportCached: boolean; reasoningParser: boolean; pace: Pace },
  ) {
    this.req = p.req;
    this.plan = p.plan;
    this.promptTokens = p.promptTokens;
    this.promptIds = p.promptIds;
    this.responsesReq = p.responsesReq;
    this.id = p.responsesReq ? `resp_${hexId()}` : flavour.completionId();
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
    const { responsesReq: req, id, created, promptTokens, cachedTokens } = this;
    return req && { id, created, model: this.model, req, promptTokens, cachedTokens };
  }

  /** What the flavour needs to write this chat completion. */
  private answer(): ChatAnswer {
    const so = this.req.stream_options;
    const includeUsage = so?.include_usage === true;
    const { pace, reportCached, reasoningParser } = this.opts;
    return {
      id: this.id,
      created: this.created,
      modelJson: this.modelJson,
      plan: this.plan,
      promptTokens: this.promptTokens,
      cachedTokens: this.cachedTokens,
      toolChoice: toolChoiceKind(this.req),
      reportCached,
      reasoningParser,
      stream: this.stream,
      includeUsage,
      continuousUsage: includeUsage && so?.continuous_usage_stats === true,
      firstTokenMs: pace.fast ? 0 : pace.firstTokenMs(this.uncachedTokens),
      tokenMs: pace.fast ? 0 : pace.tokenDueMs(0, 1) - pace.tokenDueMs(0, 0),
    };
  }

  /** The non-stream response body, as JSON. */
  json(): string {
    const responses = this.responses;
    return responses ? JSON.stringify(responseBody(responses, this.plan)) : this.flavour.body(this.answer());
  }

  /** The stream's events. */
  renderer(): SseRenderer {
    const responses = this.responses;
    if (responses) return new ResponsesStreamRenderer(responses, this.plan);
    return this.flavour.events(this.answer());
  }
}

/** Validates and plans one generation; throws SimRequestError (the server's status and words) for what the server refuses. */
export function planCompletion(ctx: SimContext, body: Record<string, unknown>, api: Api): Completion {
  const { maxModelLen, reasoning, seed } = ctx.opts;
  const flavour = ctx.flavour;
  let responsesReq: ResponsesRequest | undefined;
  if (api === 'responses') responsesReq = validate(responsesRequestSchema, body);
  const req = validate(chatRequestSchema, responsesReq ? responsesToChat(responsesReq) : body);
  ctx.checkModel(req.model);
  checkChatRequest(req);
  const promptText = applyChatTemplate(req.messages, req.tools);
  // With prefix caching the token ids are needed anyway (block hashes): count them once.
  const promptIds = ctx.kv.prefix ? encode(promptText) : undefined;
  const promptTokens = promptIds ? promptIds.length : countTokens(promptText);
  const maxTokens = checkContextWindow(flavour, req, promptTokens, maxModelLen);
  const plan = planOutput(req, { reasoningModel: reasoning, limit: maxTokens ?? maxModelLen - promptTokens, promptText, seed });
  const requested = api === 'chat' ? req.model : responsesReq?.model;
  return new Completion({ req, responsesReq, plan, promptTokens, promptIds }, ctx.opts.model, flavour.modelFor(ctx.opts.model, requested), flavour, {
    reportCached: ctx.opts.promptTokensDetails || flavour.name === 'llama.cpp',
    reasoningParser: reasoning,
    pace: ctx.pace,
  });
}

/**
 * The context window errors, in the server's words: the prompt fills the window, or max_tokens
 * exceeds the room left (a server that does not refuse that generates until the window is
 * full). Returns the effective max_tokens.
 */
function checkContextWindow(flavour: Flavour, req: ChatRequest, promptTokens: number, maxModelLen: number): number | null | undefined {
  if (promptTokens >= maxModelLen) {
    const answer = flavour.promptTooLong(promptTokens, maxModelLen);
    throw new SimRequestError(answer.status, 'prompt too long', 'messages', answer);
  }
  const room = maxModelLen - promptTokens;
  const maxTokens = req.max_completion_tokens ?? req.max_tokens;
  if (maxTokens != null && maxTokens > room) {
    const answer = flavour.maxTokensTooLarge(maxTokens, promptTokens, maxModelLen);
    if (!answer) return room;
    throw new SimRequestError(answer.status, 'max_tokens too large', 'max_tokens', answer);
  }
  return maxTokens;
}
