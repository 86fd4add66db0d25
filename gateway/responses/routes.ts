// POST /v1/responses: OpenAI's Responses API, relayed to the catalog model's backend (vLLM
// serves it). The same path as chat completions: key -> body -> JSON object with a string
// `model` -> catalog -> reasoning effort rule -> admission (503) -> gate (429) -> relay the
// backend's bytes (streams unbuffered, with backpressure; a client that leaves aborts the
// backend request). Errors the gateway answers itself are chat-shaped, and so are the backend's
// (relay.ts rewrites an error status's body). Tools the backend cannot take are flattened or left
// out, previous_response_id is refused (request.ts, tools.ts, namespace-relay.ts).
//
// The relay is the chat relay (gateway/chat/relay.ts): the gate is settled from the response's
// `usage` (`input_tokens`, `output_tokens`, `input_tokens_details.cached_tokens`), found in the
// bytes by gateway/usage.ts. Streams need no stream_options: the backend always puts the usage
// in response.completed.
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { declaredLength, readBody, track, type Res } from '../../lib/http.js';
import { settlement } from '../admission/admit.js';
import { authenticateRequest, modelRequest, promptTooLong, reject, requestedMaxTokens } from '../chat/routes.js';
import { FIT_HEADER, fitAndAdmit, fitRequested, type CallReplies } from '../admission/model-call.js';
import { responsesPrompt } from './prompt.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { resolveEffort } from '../effort.js';
import { CHAT_CODES, ERRORS, fromBodyError, GatewayError, refuseChat, sendCanned, sendError } from '../errors.js';
import { NO_MODEL } from '../metrics.js';
import { ChatRelay } from '../chat/relay.js';
import { NamespaceRelay, NamespaceRestorer } from './namespace-relay.js';
import { prepareResponsesBody, withDroppedTools } from './request.js';
import { ZERO_USAGE } from '../usage.js';

export const RESPONSES_ROUTE = 'responses';
export const RESPONSES_PATH = '/v1/responses';

const RESPONSES_REPLIES: CallReplies = { refuse: refuseChat, tooLong: promptTooLong('input') };

/** The Responses API as a gateway RoutePlugin (registered in BUILTIN_ROUTES). */
export const responsesRoutes: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
  app.post(RESPONSES_PATH, (res: HttpResponse, req: HttpRequest) => {
    const r = track(res);
    const accountId = authenticateRequest(ctx, r, req, RESPONSES_ROUTE);
    if (accountId === undefined) return;
    const fitHeader = req.getHeader(FIT_HEADER);
    readBody(
      r,
      declaredLength(req),
      ctx.limits.maxBodyBytes,
      (body) => create(ctx, r, accountId, body, fitHeader),
      (err) => {
        ctx.metrics.request(RESPONSES_ROUTE, NO_MODEL, err.status);
        sendError(r, fromBodyError(err));
      },
    );
  });
  app.any(RESPONSES_PATH, (res: HttpResponse) => reject(ctx, track(res), ERRORS.methodNotAllowed, RESPONSES_ROUTE));
};

function create(ctx: GatewayContext, res: Res, accountId: number, raw: Buffer, fitHeader: string): void {
  const parsed = modelRequest(ctx, res, raw, RESPONSES_ROUTE);
  if (!parsed) return;
  const { o, model } = parsed;

  const tools = prepareResponsesBody(o);
  if (tools instanceof GatewayError) {
    ctx.metrics.request(RESPONSES_ROUTE, model.name, 400);
    sendError(res, tools);
    return;
  }
  let rewrite = tools.changed;
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
        sendError(res, new GatewayError(CHAT_CODES.invalidEffort, message, 400, 'invalid_request_error', 'reasoning.effort'));
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
  const maxTokens = requestedMaxTokens({ max_tokens: o.max_output_tokens });
  // max_output_tokens fitted into the context, then admission on the input's bound or count (gateway/admission/model-call.ts).
  const call = {
    route: RESPONSES_ROUTE,
    accountId,
    model,
    stickyKey: sticky,
    prompt: () => responsesPrompt(o),
    maxTokens,
    bodyBytes: raw.length,
    fit: fitRequested(model, fitHeader),
  };
  fitAndAdmit(ctx, res, call, RESPONSES_REPLIES, (a) => {
    const { decision, gateRequest } = a;
    const finish = settlement(ctx, RESPONSES_ROUTE, model, gateRequest, decision);
    if (a.maxTokens !== undefined) {
      // Fitted into the context, or lowered to what the account has left (exact caps).
      o.max_output_tokens = a.maxTokens;
      try {
        body = JSON.stringify(o);
      } catch {
        finish(ERRORS.tooDeep.status, ZERO_USAGE);
        sendCanned(res, ERRORS.tooDeep);
        return;
      }
    }
    const relay = new ChatRelay(res, ctx, {
      stream,
      stripUsage: false,
      inputTokens: a.inputTokens,
      reservedTokens: decision.reservedTokens ?? gateRequest.estimatedTokens,
      headers: withDroppedTools(decision.headers, tools),
      onFinish: finish,
    });
    // Calls of namespace functions get their namespace back on the way to the client.
    const handler = tools.names ? new NamespaceRelay(relay, new NamespaceRestorer(tools.names), stream) : relay;
    relay.call = ctx.upstreams.send(model, sticky, body, handler, RESPONSES_PATH);
  });
}
