// The OpenAI-compatible routes: GET /v1/models and POST /v1/chat/completions.
//
// Request path of a completion: key (headers, before the body is read) -> body (size limit) ->
// JSON object with a string `model` -> catalog -> max_tokens fitted into the context (400 when
// the prompt alone is too long) -> admission slot (503) -> gate (429) -> forward the body as
// received (rewritten only to add stream_options.include_usage, the served model name, or a
// fitted or bounded max_tokens) -> relay the response as bytes.
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { declaredLength, readBody, sendJson, track, type Res } from '../../lib/http.js';
import { settlement } from '../admission/admit.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { PromptParts } from '../admission/context-fit.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { CHAT_CODES, ERRORS, fromBodyError, GatewayError, refuseChat, sendCanned, sendError, unknownModel, type CannedError } from '../errors.js';
import { AUTH_MISSING } from '../auth/keys.js';
import { AUTH_SESSION, AUTH_UNVERIFIED } from '../auth/sessions.js';
import { NO_MODEL } from '../metrics.js';
import { ChatRelay } from './relay.js';
import { FIT_HEADER, fitAndAdmit, fitRequested, type AdmittedCall, type CallReplies } from '../admission/model-call.js';
import { ZERO_USAGE } from '../usage.js';

export const CHAT_ROUTE = 'chat';
export const MODELS_ROUTE = 'models';

const INCLUDE_USAGE = Buffer.from(',"stream_options":{"include_usage":true}');

/** What the request path reads from a completion body; everything else is the backend's business. */
export interface ChatFields {
  model: ModelState;
  stream: boolean;
  /** Sticky routing key (`user`). */
  user: string | undefined;
  /** The body to forward. */
  body: Buffer | string;
  stripUsage: boolean;
  /** The client's body size (the gate's input bound is made from it). */
  bodyBytes: number;
  /** The request's max_completion_tokens / max_tokens; undefined when it gave none. */
  maxTokens: number | undefined;
  /** The parsed body, with the rewrites already applied (for a later max_tokens bound). */
  obj: Record<string, unknown>;
}

/**
 * Authenticates a request from its headers (call synchronously in the handler). Answers 401
 * itself and returns undefined when the key is missing or unknown.
 */
export function authenticateRequest(ctx: GatewayContext, res: Res, req: HttpRequest, route: string): number | undefined {
  const auth = ctx.authenticateShared(req);
  if (typeof auth === 'number') return auth;
  const e =
    auth === AUTH_MISSING
      ? ERRORS.missingKey
      : auth === AUTH_SESSION
        ? ERRORS.invalidSession
        : auth === AUTH_UNVERIFIED
          ? ERRORS.accountNotVerified
          : ERRORS.invalidKey;
  ctx.metrics.request(route, NO_MODEL, e.status);
  sendCanned(res, e);
  return undefined;
}

/** The request's max_completion_tokens / max_tokens, when it gives a usable one. */
export function requestedMaxTokens(obj: Record<string, unknown>): number | undefined {
  const m = obj.max_completion_tokens ?? obj.max_tokens;
  return typeof m === 'number' && m > 0 && Number.isFinite(m) ? Math.ceil(m) : undefined;
}

/**
 * The JSON object of an OpenAI-style request body and its catalog model (chat completions,
 * /v1/responses); answers 400 itself (chat shape, metrics under `route`) on bad input.
 */
export function modelRequest(ctx: GatewayContext, res: Res, raw: Buffer, route: string): { o: Record<string, unknown>; model: ModelState } | undefined {
  let obj: unknown;
  try {
    obj = JSON.parse(raw.toString('utf8'));
  } catch {
    return reject(ctx, res, ERRORS.invalidJson, route);
  }
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) return reject(ctx, res, ERRORS.notAnObject, route);
  const o = obj as Record<string, unknown>;
  const name = o.model;
  if (typeof name !== 'string' || name === '') return reject(ctx, res, ERRORS.modelMissing, route);
  const model = ctx.catalog.get(name);
  if (!model) {
    ctx.metrics.request(route, NO_MODEL, 400);
    sendError(res, unknownModel(name));
    return undefined;
  }
  return { o, model };
}

/** Reads what the gateway needs from a parsed completion body; answers 400 itself on bad input. */
export function chatFields(ctx: GatewayContext, res: Res, raw: Buffer): ChatFields | undefined {
  const parsed = modelRequest(ctx, res, raw, CHAT_ROUTE);
  if (!parsed) return undefined;
  const { o, model } = parsed;
  const stream = o.stream === true;
  let body: Buffer | string = raw;
  let stripUsage = false;
  let rewrite = false;
  if (stream) {
    const so = o.stream_options;
    if (so === undefined || so === null) {
      stripUsage = true;
      if (model.servedName) o.stream_options = { include_usage: true };
      else if (so === undefined) {
        body = spliceIncludeUsage(raw);
        o.stream_options = { include_usage: true }; // for a later rewrite (withMaxTokens)
      } else {
        o.stream_options = { include_usage: true };
        rewrite = true;
      }
    } else if (typeof so === 'object' && !Array.isArray(so) && (so as Record<string, unknown>).include_usage !== true) {
      stripUsage = true;
      o.stream_options = { ...(so as Record<string, unknown>), include_usage: true };
      rewrite = true;
    }
  }
  if (model.servedName) {
    o.model = model.servedName;
    rewrite = true;
  }
  if (rewrite) {
    try {
      body = JSON.stringify(o);
    } catch {
      // RangeError: nested deeper than the stack allows (JSON.parse has no such limit).
      return reject(ctx, res, ERRORS.tooDeep);
    }
  }
  const user = typeof o.user === 'string' ? o.user : undefined;
  const maxTokens = requestedMaxTokens(o);
  return { model, stream, user, body, stripUsage, bodyBytes: raw.length, maxTokens, obj: o };
}

/** The prompt of a chat request as /tokenize takes it (the served name already in `model`). */
export function chatPrompt(o: Record<string, unknown>): PromptParts | undefined {
  if (!Array.isArray(o.messages)) return undefined;
  return {
    model: o.model as string,
    messages: o.messages,
    tools: Array.isArray(o.tools) ? o.tools : undefined,
    chat_template_kwargs:
      o.chat_template_kwargs !== null && typeof o.chat_template_kwargs === 'object' ? (o.chat_template_kwargs as Record<string, unknown>) : undefined,
  };
}

/** The chat shape of a prompt that alone fills the context. */
export function promptTooLong(param: string): CallReplies['tooLong'] {
  return (res, message) => sendError(res, new GatewayError(CHAT_CODES.contextLengthExceeded, message, 400, 'invalid_request_error', param));
}

const CHAT_REPLIES: CallReplies = { refuse: refuseChat, tooLong: promptTooLong('messages') };

/** The body with max_tokens (and max_completion_tokens when the request used it) set to `n`; undefined when it cannot be serialized. */
function withMaxTokens(o: Record<string, unknown>, n: number): string | undefined {
  o.max_tokens = n;
  if (o.max_completion_tokens !== undefined) o.max_completion_tokens = n;
  try {
    return JSON.stringify(o);
  } catch {
    return undefined;
  }
}

/** Adds `"stream_options":{"include_usage":true}` before the final `}` without re-serializing. */
function spliceIncludeUsage(raw: Buffer): Buffer {
  const end = raw.lastIndexOf(0x7d); // '}': the body parsed as an object, so it exists
  return Buffer.concat([raw.subarray(0, end), INCLUDE_USAGE, raw.subarray(end)]);
}

/** Answers a canned 4xx for a request no model applies to. */
export function reject(ctx: GatewayContext, res: Res, e: CannedError, route: string = CHAT_ROUTE): undefined {
  ctx.metrics.request(route, NO_MODEL, e.status);
  sendCanned(res, e);
  return undefined;
}

function completion(ctx: GatewayContext, res: Res, accountId: number, raw: Buffer, fitHeader: string): void {
  const f = chatFields(ctx, res, raw);
  if (!f) return;
  const o = f.obj;
  fitAndAdmit(
    ctx,
    res,
    {
      route: CHAT_ROUTE,
      accountId,
      model: f.model,
      stickyKey: f.user,
      prompt: () => chatPrompt(o),
      maxTokens: f.maxTokens,
      bodyBytes: f.bodyBytes,
      fit: fitRequested(f.model, fitHeader),
    },
    CHAT_REPLIES,
    (a) => forwardCompletion(ctx, res, f, a),
  );
}

function forwardCompletion(ctx: GatewayContext, res: Res, f: ChatFields, a: AdmittedCall): void {
  const { decision, gateRequest } = a;
  const finish = settlement(ctx, CHAT_ROUTE, f.model, gateRequest, decision);
  let body = f.body;
  if (a.maxTokens !== undefined) {
    // Fitted into the context, or the account has less left than the request could generate.
    const rewritten = withMaxTokens(f.obj, a.maxTokens);
    if (rewritten === undefined) {
      finish(ERRORS.tooDeep.status, ZERO_USAGE);
      sendCanned(res, ERRORS.tooDeep);
      return;
    }
    body = rewritten;
  }
  const relay = new ChatRelay(res, ctx, {
    stream: f.stream,
    stripUsage: f.stripUsage,
    inputTokens: a.inputTokens,
    reservedTokens: decision.reservedTokens ?? gateRequest.estimatedTokens,
    headers: decision.headers,
    onFinish: finish,
  });
  relay.call = ctx.upstreams.send(f.model, f.user, body, relay);
}

export const chatRoutes: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
  app.get('/v1/models', (res: HttpResponse, req: HttpRequest) => {
    const r = track(res);
    if (authenticateRequest(ctx, r, req, MODELS_ROUTE) === undefined) return;
    ctx.metrics.request(MODELS_ROUTE, NO_MODEL, 200);
    sendJson(r, 200, ctx.catalog.listBody());
  });

  app.post('/v1/chat/completions', (res: HttpResponse, req: HttpRequest) => {
    const r = track(res);
    const accountId = authenticateRequest(ctx, r, req, CHAT_ROUTE);
    if (accountId === undefined) return;
    const fitHeader = req.getHeader(FIT_HEADER);
    readBody(
      r,
      declaredLength(req),
      ctx.limits.maxBodyBytes,
      (body) => completion(ctx, r, accountId, body, fitHeader),
      (err) => {
        ctx.metrics.request(CHAT_ROUTE, NO_MODEL, err.status);
        sendError(r, fromBodyError(err));
      },
    );
  });
};
