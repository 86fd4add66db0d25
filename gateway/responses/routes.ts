// POST /v1/responses: OpenAI's Responses API, relayed to the catalog model's backend (vLLM
// serves it). The same path as chat completions: key -> body -> JSON object with a string
// `model` -> catalog -> reasoning effort rule -> admission (503) -> gate (429) -> relay the
// backend's bytes (streams unbuffered, with backpressure; a client that leaves aborts the
// backend request). Errors the gateway answers itself are chat-shaped; backend errors pass through.
//
// The relay is the chat relay (gateway/relay.ts): the gate is settled from the response's
// `usage` (`input_tokens`, `output_tokens`, `input_tokens_details.cached_tokens`), found in the
// bytes by gateway/usage.ts. Streams need no stream_options: the backend always puts the usage
// in response.completed.
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { readBody, track, type Res } from '../../lib/http.js';
import { admit, authenticateRequest, modelRequest, outputReservation, reject } from '../chat.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { resolveEffort } from '../effort.js';
import { ERRORS, fromBodyError, GatewayError, sendError } from '../errors.js';
import type { GateRequest } from '../gate.js';
import { NO_MODEL } from '../metrics.js';
import { ChatRelay } from '../relay.js';

export const RESPONSES_ROUTE = 'responses';
export const RESPONSES_PATH = '/v1/responses';

/** The Responses API as a gateway RoutePlugin (registered in BUILTIN_ROUTES). */
export const responsesRoutes: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
  app.post(RESPONSES_PATH, (res: HttpResponse, req: HttpRequest) => {
    const r = track(res);
    const accountId = authenticateRequest(ctx, r, req, RESPONSES_ROUTE);
    if (accountId === undefined) return;
    readBody(r, req.getHeader('content-length'), ctx.limits.maxBodyBytes, (body) => create(ctx, r, accountId, body), (err) => {
      ctx.metrics.request(RESPONSES_ROUTE, NO_MODEL, err.status);
      sendError(r, fromBodyError(err));
    });
  });
  app.any(RESPONSES_PATH, (res: HttpResponse) => reject(ctx, track(res), ERRORS.methodNotAllowed, RESPONSES_ROUTE));
};

function create(ctx: GatewayContext, res: Res, accountId: number, raw: Buffer): void {
  const parsed = modelRequest(ctx, res, raw, RESPONSES_ROUTE);
  if (!parsed) return;
  const { o, model } = parsed;

  let rewrite = false;
  if (model.servedName) {
    o.model = model.servedName;
    rewrite = true;
  }
  // reasoning.effort follows the rule of gateway/effort.ts, as output_config.effort on /v1/messages.
  const reasoning = o.reasoning;
  if (reasoning !== null && typeof reasoning === 'object' && !Array.isArray(reasoning)) {
    const rs = reasoning as Record<string, unknown>;
    if (typeof rs.effort === 'string') {
      const decision = resolveEffort(rs.effort, model.entry);
      if (decision.kind === 'refuse') {
        ctx.metrics.request(RESPONSES_ROUTE, model.name, 400);
        const message = `reasoning.effort: ${JSON.stringify(rs.effort)} is not supported by model ${model.name} (accepted: ${decision.accepted.join(', ')})`;
        sendError(res, new GatewayError('invalid_effort', message, 400, 'invalid_request_error', 'reasoning.effort'));
        return;
      }
      if (decision.kind === 'ignore') {
        const { effort: _dropped, ...rest } = rs;
        o.reasoning = Object.keys(rest).length ? rest : undefined;
        rewrite = true;
      } else if (decision.effort !== rs.effort) {
        o.reasoning = { ...rs, effort: decision.effort };
        rewrite = true;
      }
    }
  }
  let body: Buffer | string = raw;
  if (rewrite) {
    try {
      body = JSON.stringify(o);
    } catch {
      return reject(ctx, res, ERRORS.tooDeep, RESPONSES_ROUTE); // nested deeper than JSON.stringify can go
    }
  }

  const stream = o.stream === true;
  // Sticky routing keeps a conversation on one backend's prefix cache: prompt_cache_key is meant for it.
  const sticky = [o.prompt_cache_key, o.user, o.safety_identifier].find((v): v is string => typeof v === 'string' && v !== '');
  const estimatedTokens = Math.ceil(raw.length / 4) + outputReservation({ max_tokens: o.max_output_tokens }, ctx.limits.defaultMaxTokens);
  const gateRequest: GateRequest = { accountId, model: model.name, estimatedTokens };
  admit(ctx, res, RESPONSES_ROUTE, gateRequest, (decision) => {
    const relay = new ChatRelay(res, ctx, model, { route: RESPONSES_ROUTE, stream, stripUsage: false, gateRequest, decision });
    relay.call = ctx.upstreams.send(model, sticky, body, relay, RESPONSES_PATH);
  });
}
