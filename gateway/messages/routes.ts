// POST /v1/messages and /v1/messages/count_tokens (and their /api/v1/... twins) on the gateway.
// Register with `messagesRoutes(options)`, a RoutePlugin (gateway/context.ts).
import { chatRouteHint } from '../backends/route-hint.js';
import type { Config } from '../../lib/config.js';
import { sendJson, track } from '../../lib/http.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { admit } from '../admission/admit.js';
import { fitAndAdmit } from '../admission/model-call.js';
import { chatPrompt } from '../admission/prompt.js';
import { requestUpstream, UpstreamError } from '../backends/upstreams.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import type { GateUsage } from '../gates/gate.js';
import { CLIENT_CLOSED } from '../metrics.js';
import { frontDoor, type RouteEntry } from '../request/front-door.js';
import { ModelRequest } from '../request/lifecycle.js';
import { reservedUsage, ZERO_USAGE } from '../usage.js';
import { countTokens } from './count-tokens.js';
import { backendError, MessagesError, toMessagesError } from './errors.js';
import { MESSAGES_PROTOCOL, upstreamFailure } from './reply.js';
import { prepare, type PreparedRequest } from './request.js';
import { countTokensRequestSchema, messagesRequestSchema } from './schema.js';
import { ThinkingSigner } from './signature.js';
import { relayStream } from './stream-relay.js';
import { chatRequestJson } from './translate-request.js';
import { gateUsage, toMessagesResponse, type ChatCompletion } from './translate-response.js';

export interface MessagesRouteOptions {
  /** Secret for thinking signatures (config messagesThinkingSecret); empty: random per process. */
  thinkingSecret?: string | undefined;
  /** Backend silence before a ping event (config messagesPingIntervalMs). */
  pingIntervalMs?: number | undefined;
}

export const MESSAGES_PATHS = ['/v1/messages', '/api/v1/messages'] as const;
export const COUNT_TOKENS_PATHS = ['/v1/messages/count_tokens', '/api/v1/messages/count_tokens'] as const;

const MESSAGES_ROUTE = 'messages';
const COUNT_TOKENS_ROUTE = 'count_tokens';
const METHOD_NOT_ALLOWED = new MessagesError(405, 'Method not allowed on this path');

/** The largest non-stream backend response we translate. */
const MAX_RESPONSE_BYTES = 32 * 1024 * 1024;

/** The messages routes as a gateway RoutePlugin. */
export function messagesRoutes(options: MessagesRouteOptions = {}): RoutePlugin {
  const signer = new ThinkingSigner(options.thinkingSecret);
  const pingIntervalMs = options.pingIntervalMs ?? 5_000;
  const create = createEntry(signer, pingIntervalMs);
  const count = countEntry(signer);
  return (app: TemplatedApp, ctx: GatewayContext) => {
    const onCreate = (res: HttpResponse, req: HttpRequest) => {
      // frontDoor reads x-rc-fit-max-tokens (r.fitHeader) with the other headers.
      frontDoor(new ModelRequest(ctx, track(res), MESSAGES_ROUTE, MESSAGES_PROTOCOL), req, create);
    };
    const onCount = (res: HttpResponse, req: HttpRequest) => frontDoor(new ModelRequest(ctx, track(res), COUNT_TOKENS_ROUTE, MESSAGES_PROTOCOL), req, count);
    const wrongMethod = (res: HttpResponse) => new ModelRequest(ctx, track(res), 'unknown', MESSAGES_PROTOCOL).fail(METHOD_NOT_ALLOWED);
    for (const p of MESSAGES_PATHS) app.post(p, onCreate).any(p, wrongMethod);
    for (const p of COUNT_TOKENS_PATHS) app.post(p, onCount).any(p, wrongMethod);
  };
}

/** /v1/messages through the door: checked and translated, max_tokens fitted, admitted, then the exchange. */
function createEntry(signer: ThinkingSigner, pingIntervalMs: number): RouteEntry<MessagesError> {
  return (r, _raw, json, model) => {
    const p = prepare(r, json, model, messagesRequestSchema, signer);
    if (!p) return;
    const chat = p.chat;
    r.stream = p.body.stream === true;
    // max_tokens fitted into the context (a prompt alone too long: 400), then admission on the
    // input's bound or exact count (gateway/admission/model-call.ts).
    fitAndAdmit(
      r,
      model,
      chatRouteHint(model, chat, p.stickyKey),
      chat.max_tokens,
      () => chatPrompt(chat),
      (r) => {
        if (r.forwardMaxTokens !== undefined) chat.max_tokens = r.forwardMaxTokens;
        // The admitted exchange with the backend; the request finishes once, however it ends. A
        // stream starts synchronously: no promise, catch handler and microtask a request.
        if (!p.body.stream) {
          answerWhole(r, p, signer).catch((err: unknown) => exchangeFailed(r, err));
          return;
        }
        try {
          streamExchange(r, p, signer, pingIntervalMs);
        } catch (err) {
          exchangeFailed(r, err);
        }
      },
    );
  };
}

/** A stream request: the chat request asks for usage on every chunk, and its stream is relayed translated. */
function streamExchange(r: ModelRequest<MessagesError>, p: PreparedRequest, signer: ThinkingSigner, pingIntervalMs: number): void {
  const chat = p.chat;
  chat.stream = true;
  // vLLM then reports usage on every chunk: message_start gets the real input_tokens.
  chat.stream_options = { include_usage: true, continuous_usage_stats: true };
  relayStream(r, chatRequestJson(chat), signer, p.thinking, pingIntervalMs);
}

/** An exchange failed in our code (a backend's failure is answered by the exchange itself): logged, and answered in the messages shape. */
function exchangeFailed(r: ModelRequest<MessagesError>, err: unknown): void {
  r.ctx.logger.error('messages request failed', { err, model: r.model?.name });
  r.fail(toMessagesError(err));
}

/** A non-stream request: the backend's whole completion, translated. */
async function answerWhole(r: ModelRequest<MessagesError>, p: PreparedRequest, signer: ThinkingSigner): Promise<void> {
  const res = r.res;
  const model = r.model!;
  const ac = new AbortController();
  res.onAbort = () => ac.abort();
  let usage: GateUsage | undefined;
  try {
    const up = await requestUpstream(r.ctx.upstreams, model, r.routeHint, chatRequestJson(p.chat), { signal: ac.signal, maxBytes: MAX_RESPONSE_BYTES });
    if (up.status !== 200) {
      r.fail(backendError(up.status, up.body.toString('utf8'), up.headers['retry-after']));
      return;
    }
    let completion: ChatCompletion;
    try {
      completion = JSON.parse(up.body.toString('utf8')) as ChatCompletion;
    } catch {
      r.fail(new MessagesError(502, 'The model backend returned a malformed response'));
      return;
    }
    const u = completion.usage;
    if (u) usage = gateUsage(u);
    const body = toMessagesResponse(completion, model.name, signer, p.thinking);
    sendJson(res, 200, JSON.stringify(body), r.decision!.headers);
    r.finish(200, usage);
  } catch (err) {
    // 'aborted' with the client still here: the response outgrew MAX_RESPONSE_BYTES.
    if (!(err instanceof UpstreamError && err.kind === 'aborted' && res.aborted)) r.fail(upstreamFailure(err), usage);
    else {
      // The client left before the answer: nothing relayed tells what the backend had generated
      // when the abort reached it, so the whole reservation is charged.
      r.finish(CLIENT_CLOSED, reservedUsage(r.inputTokens, r.reservedTokens));
    }
  } finally {
    res.onAbort = undefined;
  }
}

/** count_tokens through the door: checked and translated, admitted on the request bucket, then counted. */
function countEntry(signer: ThinkingSigner): RouteEntry<MessagesError> {
  return (r, _raw, json, model) => {
    const p = prepare(r, json, model, countTokensRequestSchema, signer);
    if (!p) return;
    r.model = model;
    // Counting spends no tokens but is a request: it meets the request-rate gate (an estimate of 0
    // is checked against the request bucket only), and holds an in-flight slot like any backend call.
    r.gateRequest = { accountId: r.accountId, model: model.name, estimatedTokens: 0 };
    admit(r, (r) => {
      void countTokens(r, p).catch((err: unknown) => {
        r.ctx.logger.error('count_tokens failed', { err, model: model.name });
        r.fail(toMessagesError(err), ZERO_USAGE);
      });
    });
  };
}

/** The plugin with its settings from the platform configuration (lib/config.ts). */
export function messagesRoutesFromConfig(config: Pick<Config, 'messagesThinkingSecret' | 'messagesPingIntervalMs'>): RoutePlugin {
  return messagesRoutes({ thinkingSecret: config.messagesThinkingSecret, pingIntervalMs: config.messagesPingIntervalMs });
}
