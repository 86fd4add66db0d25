// POST /v1/messages and /v1/messages/count_tokens (and their /api/v1/... twins) on the gateway.
// Register with `messagesRoutes(options)`, a RoutePlugin (gateway/context.ts).
import type { Config } from '../../lib/config.js';
import { sendJson, track, type Res } from '../../lib/http.js';
import { admit, type Allowed } from '../admission/admit.js';
import { FIT_HEADER, fitAndAdmit, fitRequested, type CallReplies } from '../admission/model-call.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import type { GateRequest, GateUsage } from '../gates/gate.js';
import { CLIENT_CLOSED, NO_MODEL } from '../metrics.js';
import { requestUpstream, UpstreamError } from '../backends/upstreams.js';
import { countTokens } from './count-tokens.js';
import { backendError, errorBody, MessagesError, toMessagesError } from './errors.js';
import { refuseMessages, sendError, upstreamFailure } from './reply.js';
import { prepare, type PreparedRequest } from './request.js';
import { countTokensRequestSchema, messagesRequestSchema } from './schema.js';
import { ThinkingSigner } from './signature.js';
import { reservedUsage, ZERO_USAGE } from '../usage.js';
import { relayStream } from './stream-relay.js';
import { gateUsage, toMessagesResponse, type ChatCompletion } from './translate-response.js';

export interface MessagesRouteOptions {
  /** Secret for thinking signatures (config messagesThinkingSecret); empty: random per process. */
  thinkingSecret?: string | undefined;
  /** Backend silence before a ping event (config messagesPingIntervalMs). */
  pingIntervalMs?: number | undefined;
}

export const MESSAGES_PATHS = ['/v1/messages', '/api/v1/messages'] as const;
export const COUNT_TOKENS_PATHS = ['/v1/messages/count_tokens', '/api/v1/messages/count_tokens'] as const;

/** The largest non-stream backend response we translate. */
const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;

/** The messages routes as a gateway RoutePlugin. */
export function messagesRoutes(options: MessagesRouteOptions = {}): RoutePlugin {
  const signer = new ThinkingSigner(options.thinkingSecret);
  const pingIntervalMs = options.pingIntervalMs ?? 5_000;
  return (app: TemplatedApp, ctx: GatewayContext) => {
    const create = (res: HttpResponse, req: HttpRequest) => handleCreate(track(res), req, ctx, signer, pingIntervalMs);
    const count = (res: HttpResponse, req: HttpRequest) => handleCount(track(res), req, ctx, signer);
    const wrongMethod = (res: HttpResponse) => sendError(track(res), ctx, 'unknown', NO_MODEL, new MessagesError(405, 'Method not allowed on this path'));
    for (const p of MESSAGES_PATHS) app.post(p, create).any(p, wrongMethod);
    for (const p of COUNT_TOKENS_PATHS) app.post(p, count).any(p, wrongMethod);
  };
}

const MESSAGES_REPLIES: CallReplies = {
  refuse: refuseMessages,
  tooLong: (res, message) => sendJson(res, 400, errorBody('invalid_request_error', message)),
};

function handleCreate(res: Res, req: HttpRequest, ctx: GatewayContext, signer: ThinkingSigner, pingIntervalMs: number): void {
  const route = 'messages';
  const fitHeader = req.getHeader(FIT_HEADER); // before prepare: req is valid only in this call
  prepare(
    res,
    req,
    ctx,
    messagesRequestSchema,
    signer,
    (p) => {
      forward(res, ctx, route, p, signer, pingIntervalMs, fitRequested(p.model, fitHeader));
    },
    (e) => sendError(res, ctx, route, NO_MODEL, e),
  );
}

function forward(res: Res, ctx: GatewayContext, route: string, p: PreparedRequest, signer: ThinkingSigner, pingIntervalMs: number, fit: boolean): void {
  const chat = p.chat;
  const call = {
    route,
    accountId: p.accountId,
    model: p.model,
    stickyKey: p.stickyKey,
    prompt: () => ({ model: chat.model, messages: chat.messages, tools: chat.tools, chat_template_kwargs: chat.chat_template_kwargs }),
    maxTokens: chat.max_tokens,
    bodyBytes: p.bodyBytes,
    fit,
  };
  // max_tokens fitted into the context (a prompt alone too long: 400), then admission on the
  // input's bound or exact count (gateway/admission/model-call.ts).
  fitAndAdmit(ctx, res, call, MESSAGES_REPLIES, (a) => {
    const { decision, gateRequest: greq, inputTokens: estimate } = a;
    if (a.maxTokens !== undefined) chat.max_tokens = a.maxTokens;
    void exchange(res, ctx, route, p, signer, pingIntervalMs, greq, decision, estimate).catch((err: unknown) => {
      ctx.logger.error('messages request failed', { err, model: p.model.name });
      sendError(res, ctx, route, p.model.name, toMessagesError(err));
    });
  });
}

/** The admitted exchange with the backend; settles the gate and the slot exactly once. */
async function exchange(
  res: Res,
  ctx: GatewayContext,
  route: string,
  p: PreparedRequest,
  signer: ThinkingSigner,
  pingIntervalMs: number,
  greq: GateRequest,
  decision: Allowed,
  estimate: number,
): Promise<void> {
  const chat = p.chat;
  let settled = false;
  const settle = (usage: GateUsage | undefined) => {
    if (settled) return;
    settled = true;
    ctx.admission.leave();
    ctx.gate.settle(greq, decision, usage);
    if (usage) p.model.series.tokens(usage.inputTokens, usage.outputTokens);
  };

  if (p.body.stream) {
    chat.stream = true;
    // vLLM then reports usage on every chunk: message_start gets the real input_tokens.
    chat.stream_options = { include_usage: true, continuous_usage_stats: true };
    relayStream(res, ctx, {
      route,
      model: p.model,
      stickyKey: p.stickyKey,
      body: JSON.stringify(chat),
      signer,
      thinking: p.thinking,
      inputTokensEstimate: estimate,
      pingIntervalMs,
      headers: decision.headers,
      settle,
    });
    return;
  }

  const ac = new AbortController();
  res.onAbort = () => ac.abort();
  let usage: GateUsage | undefined;
  try {
    const up = await requestUpstream(ctx.upstreams, p.model, p.stickyKey, JSON.stringify(chat), { signal: ac.signal, maxBytes: MAX_RESPONSE_BYTES });
    if (up.status !== 200) {
      sendError(res, ctx, route, p.model.name, backendError(up.status, up.body.toString('utf8'), up.headers['retry-after']));
      return;
    }
    let completion: ChatCompletion;
    try {
      completion = JSON.parse(up.body.toString('utf8')) as ChatCompletion;
    } catch {
      sendError(res, ctx, route, p.model.name, new MessagesError(502, 'The model backend returned a malformed response'));
      return;
    }
    const u = completion.usage;
    if (u) usage = gateUsage(u);
    const body = toMessagesResponse(completion, p.model.name, signer, p.thinking);
    ctx.metrics.request(route, p.model.name, 200);
    sendJson(res, 200, JSON.stringify(body), decision.headers);
  } catch (err) {
    // 'aborted' with the client still here: the response outgrew MAX_RESPONSE_BYTES.
    if (!(err instanceof UpstreamError && err.kind === 'aborted' && res.aborted)) sendError(res, ctx, route, p.model.name, upstreamFailure(err));
    else {
      // The client left before the answer: nothing relayed tells what the backend had generated
      // when the abort reached it, so the whole reservation is charged.
      ctx.metrics.request(route, p.model.name, CLIENT_CLOSED);
      usage = reservedUsage(estimate, decision.reservedTokens ?? greq.estimatedTokens);
    }
  } finally {
    res.onAbort = undefined;
    settle(usage);
  }
}

function handleCount(res: Res, req: HttpRequest, ctx: GatewayContext, signer: ThinkingSigner): void {
  const route = 'count_tokens';
  prepare(
    res,
    req,
    ctx,
    countTokensRequestSchema,
    signer,
    (p) => {
      // Counting spends no tokens but is a request: it meets the request-rate gate (an estimate of 0
      // is checked against the request bucket only), and holds an in-flight slot like any backend call.
      const greq: GateRequest = { accountId: p.accountId, model: p.model.name, estimatedTokens: 0 };
      admit(ctx, res, route, greq, refuseMessages, (decision) => {
        void countTokens(res, ctx, route, p, decision.headers)
          .catch((err: unknown) => {
            ctx.logger.error('count_tokens failed', { err, model: p.model.name });
            sendError(res, ctx, route, p.model.name, toMessagesError(err));
          })
          .finally(() => {
            ctx.admission.leave();
            ctx.gate.settle(greq, decision, ZERO_USAGE);
          });
      });
    },
    (e) => sendError(res, ctx, route, NO_MODEL, e),
  );
}

/** The plugin with its settings from the platform configuration (lib/config.ts). */
export function messagesRoutesFromConfig(config: Pick<Config, 'messagesThinkingSecret' | 'messagesPingIntervalMs'>): RoutePlugin {
  return messagesRoutes({ thinkingSecret: config.messagesThinkingSecret, pingIntervalMs: config.messagesPingIntervalMs });
}
