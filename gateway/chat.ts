// The OpenAI-compatible routes: GET /v1/models and POST /v1/chat/completions.
//
// Request path of a completion: key (headers, before the body is read) -> body (size limit) ->
// JSON object with a string `model` -> catalog -> admission slot (503) -> gate (429) ->
// forward the body as received (rewritten only to add stream_options.include_usage or the
// served model name) -> relay the response as bytes.
import type { HttpRequest, HttpResponse, TemplatedApp } from '../lib/uws.js';
import { declaredLength, readBody, sendJson, track, type Res } from '../lib/http.js';
import type { ModelState } from './catalog.js';
import type { GatewayContext, RoutePlugin } from './context.js';
import { ERRORS, fromBodyError, rateLimited, sendCanned, sendError, unknownModel, type CannedError } from './errors.js';
import type { GateDecision, GateRequest } from './gate.js';
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
  estimatedTokens: number;
}

/**
 * Authenticates a request from its headers (call synchronously in the handler). Answers 401
 * itself and returns undefined when the key is missing or unknown.
 */
export function authenticateRequest(ctx: GatewayContext, res: Res, req: HttpRequest, route: string): number | undefined {
  const auth = ctx.authenticateShared(req);
  if (typeof auth === 'number') return auth;
  const e = auth === AUTH_MISSING ? ERRORS.missingKey : auth === AUTH_SESSION ? ERRORS.invalidSession : auth === AUTH_UNVERIFIED ? ERRORS.accountNotVerified : ERRORS.invalidKey;
  ctx.metrics.request(route, NO_MODEL, e.status);
  sendCanned(res, e);
  return undefined;
}

/** Output tokens a request may produce, from max_completion_tokens / max_tokens or the default. */
export function outputReservation(obj: Record<string, unknown>, fallback: number): number {
  const m = obj.max_completion_tokens ?? obj.max_tokens;
  return typeof m === 'number' && m > 0 && Number.isFinite(m) ? Math.ceil(m) : fallback;
}

/**
 * Admission (in-flight slot) then the gate; calls `forward` with the allowed decision, or answers
 * 503 / 429 itself. The slot is released by whoever ends the request (ChatRelay.finish).
 */
export function admit(
  ctx: GatewayContext,
  res: Res,
  route: string,
  gateRequest: GateRequest,
  forward: (decision: GateDecision & { allowed: true }) => void,
): void {
  if (!ctx.admission.tryEnter()) {
    ctx.metrics.request(route, gateRequest.model, 503);
    sendCanned(res, ERRORS.poolExhausted);
    return;
  }
  const onDecision = (d: GateDecision): void => {
    if (!d.allowed) {
      ctx.admission.leave();
      ctx.metrics.request(route, gateRequest.model, 429);
      sendError(res, rateLimited(d.code, d.retryAfterSec, d.headers));
      return;
    }
    if (res.aborted) {
      // The client left while the gate decided: nothing was forwarded, nothing was used.
      ctx.admission.leave();
      ctx.metrics.request(route, gateRequest.model, 499);
      ctx.gate.settle(gateRequest, d, ZERO_USAGE);
      return;
    }
    forward(d);
  };
  let decision: GateDecision | Promise<GateDecision>;
  try {
    decision = ctx.gate.admit(gateRequest);
  } catch (err) {
    gateFailed(ctx, res, route, gateRequest, err);
    return;
  }
  if (decision instanceof Promise) decision.then(onDecision, (err) => gateFailed(ctx, res, route, gateRequest, err));
  else onDecision(decision);
}

function gateFailed(ctx: GatewayContext, res: Res, route: string, gateRequest: GateRequest, err: unknown): void {
  ctx.admission.leave();
  ctx.logger.error('gate admit failed', { err, route, model: gateRequest.model });
  ctx.metrics.request(route, gateRequest.model, 503);
  sendJson(res, 503, '{"error":{"message":"Model gateway is unavailable","type":"api_error","param":null,"code":"gate_unavailable"}}', { 'retry-after': '5' });
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
      else if (so === undefined) body = spliceIncludeUsage(raw);
      else { o.stream_options = { include_usage: true }; rewrite = true; }
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
  const estimatedTokens = Math.ceil(raw.length / 4) + outputReservation(o, ctx.limits.defaultMaxTokens);
  return { model, stream, user, body, stripUsage, estimatedTokens };
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
  // Optional max_tokens fitting (gateway/chat-fit.ts, issue 15).
  if (fit || f.model.entry.fitMaxTokens) fitChat(ctx, res, CHAT_ROUTE, f, (fitted) => forwardCompletion(ctx, res, accountId, fitted));
  else forwardCompletion(ctx, res, accountId, f);
}

function forwardCompletion(ctx: GatewayContext, res: Res, accountId: number, f: ChatFields): void {
  const gateRequest: GateRequest = { accountId, model: f.model.name, estimatedTokens: f.estimatedTokens };
  admit(ctx, res, CHAT_ROUTE, gateRequest, (decision) => {
    const relay = new ChatRelay(res, ctx, f.model, { route: CHAT_ROUTE, stream: f.stream, stripUsage: f.stripUsage, gateRequest, decision });
    relay.call = ctx.upstreams.send(f.model, f.user, f.body, relay);
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
    readBody(r, declaredLength(req), ctx.limits.maxBodyBytes, (body) => completion(ctx, r, accountId, body, fit), (err) => {
      ctx.metrics.request(CHAT_ROUTE, NO_MODEL, err.status);
      sendError(r, fromBodyError(err));
    });
  });
};
