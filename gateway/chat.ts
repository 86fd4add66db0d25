// The OpenAI-compatible routes: GET /v1/models and POST /v1/chat/completions.
//
// Request path of a completion: key (headers, before the body is read) -> body (size limit) ->
// JSON object with a string `model` -> catalog -> admission slot (503) -> gate (429) ->
// forward the body as received (rewritten only to add stream_options.include_usage or the
// served model name) -> relay the response as bytes.
import { boundingContext } from './context-fit.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../lib/uws.js';
import { declaredLength, readBody, sendJson, track, type Res } from '../lib/http.js';
import { admit, boundedMaxTokens, gateRequestFor, settlement } from './admit.js';
import type { ModelState } from './catalog.js';
import type { GatewayContext, RoutePlugin } from './context.js';
import { ERRORS, fromBodyError, refuseChat, sendCanned, sendError, unknownModel, type CannedError } from './errors.js';
import { AUTH_MISSING } from './keys.js';
import { AUTH_SESSION, AUTH_UNVERIFIED } from './sessions.js';
import { NO_MODEL } from './metrics.js';
import { ChatRelay } from './relay.js';
import { FIT_HEADER, fitChat, fitRequested } from './chat-fit.js';
import { ZERO_USAGE } from './usage.js';

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
  /** The input part of the estimate (body bytes / 4). */
  inputTokens: number;
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
  const inputTokens = Math.ceil(raw.length / 4);
  const maxTokens = requestedMaxTokens(o);
  return { model, stream, user, body, stripUsage, inputTokens, maxTokens, obj: o };
}

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

function completion(ctx: GatewayContext, res: Res, accountId: number, raw: Buffer, fit: boolean): void {
  const f = chatFields(ctx, res, raw);
  if (!f) return;
  // Optional max_tokens fitting into the model's context (gateway/chat-fit.ts).
  if (fit || f.model.entry.fitMaxTokens) fitChat(ctx, res, CHAT_ROUTE, f, (fitted) => forwardCompletion(ctx, res, accountId, fitted));
  else forwardCompletion(ctx, res, accountId, f);
}

function forwardCompletion(ctx: GatewayContext, res: Res, accountId: number, f: ChatFields): void {
  const gateRequest = gateRequestFor(ctx, accountId, f.model.name, f.inputTokens, f.maxTokens);
  admit(ctx, res, CHAT_ROUTE, gateRequest, refuseChat, (decision) => {
    const finish = settlement(ctx, CHAT_ROUTE, f.model, gateRequest, decision);
    let body = f.body;
    const bound = boundedMaxTokens(decision, f.maxTokens, boundingContext(f.model), f.inputTokens);
    if (bound !== undefined) {
      // The account has less left than the request could generate: it may generate no more.
      const rewritten = withMaxTokens(f.obj, bound);
      if (rewritten === undefined) {
        finish(ERRORS.tooDeep.status, ZERO_USAGE);
        sendCanned(res, ERRORS.tooDeep);
        return;
      }
      body = rewritten;
    }
    const model = f.model;
    const relay = new ChatRelay(res, ctx, {
      stream: f.stream,
      stripUsage: f.stripUsage,
      inputTokens: f.inputTokens,
      reservedTokens: decision.reservedTokens ?? gateRequest.estimatedTokens,
      headers: decision.headers,
      onFinish: finish,
    });
    relay.call = ctx.upstreams.send(model, f.user, body, relay);
  });
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
    const fit = fitRequested(req.getHeader(FIT_HEADER));
    readBody(
      r,
      declaredLength(req),
      ctx.limits.maxBodyBytes,
      (body) => completion(ctx, r, accountId, body, fit),
      (err) => {
        ctx.metrics.request(CHAT_ROUTE, NO_MODEL, err.status);
        sendError(r, fromBodyError(err));
      },
    );
  });
};
