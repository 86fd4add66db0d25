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
import { responsesRouteHint } from '../backends/route-hint.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { track } from '../../lib/http.js';
import { FIT_HEADER, fitAndAdmit } from '../admission/model-call.js';
import type { ModelState } from '../backends/model-catalog.js';
import { CHAT_PROTOCOL, promptTooLong, type ChatError } from '../chat/protocol.js';
import { ChatRelay } from '../chat/relay.js';
import { maxTokensBelowOne, requestedMaxTokens } from '../chat/routes.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { resolveEffort } from '../effort.js';
import { CHAT_CODES, ERRORS, GatewayError } from '../errors.js';
import { frontDoor } from '../request/front-door.js';
import { ModelRequest } from '../request/lifecycle.js';
import type { Protocol } from '../request/protocol.js';
import { ZERO_USAGE } from '../usage.js';
import { NamespaceRelay, NamespaceRestorer } from './namespace-relay.js';
import { responsesPrompt } from './prompt.js';
import { prepareResponsesBody, withDroppedTools } from './request.js';
import type { ToolPlan } from './tools.js';

export const RESPONSES_ROUTE = 'responses';
export const RESPONSES_PATH = '/v1/responses';

/** The chat shape, with a prompt too long for the context naming `input`. */
const RESPONSES_PROTOCOL: Protocol<ChatError> = { ...CHAT_PROTOCOL, tooLong: promptTooLong('input') };

/** The Responses API as a gateway RoutePlugin (registered in BUILTIN_ROUTES). */
export const responsesRoutes: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
  app.post(RESPONSES_PATH, (res: HttpResponse, req: HttpRequest) => {
    const r = new ModelRequest(ctx, track(res), RESPONSES_ROUTE, RESPONSES_PROTOCOL);
    r.fitHeader = req.getHeader(FIT_HEADER);
    frontDoor(r, req, create);
  });
  app.any(RESPONSES_PATH, (res: HttpResponse) => new ModelRequest(ctx, track(res), RESPONSES_ROUTE, RESPONSES_PROTOCOL).fail(ERRORS.methodNotAllowed));
};

/** Through the door: the body checked and rewritten for the backend, then fitted and admitted (admission/model-call.ts). */
function create(r: ModelRequest<ChatError>, raw: Buffer, o: Record<string, unknown>, model: ModelState): void {
  const belowOne = maxTokensBelowOne('max_output_tokens', o.max_output_tokens);
  if (belowOne) return refuseOnModel(r, model, belowOne);
  const tools = prepareResponsesBody(o);
  if (tools instanceof GatewayError) return refuseOnModel(r, model, tools);
  const effortChanged = applyEffort(o, model);
  if (effortChanged instanceof GatewayError) return refuseOnModel(r, model, effortChanged);
  let body: Buffer | string = raw;
  if (tools.changed || effortChanged || model.servedName) {
    if (model.servedName) o.model = model.servedName;
    try {
      body = JSON.stringify(o);
    } catch {
      r.fail(ERRORS.tooDeep); // nested deeper than JSON.stringify can go
      return;
    }
  }
  const stream = (r.stream = o.stream === true);
  // Sticky routing keeps a conversation on one backend's prefix cache: prompt_cache_key is meant for it.
  const sticky = [o.prompt_cache_key, o.user, o.safety_identifier].find((v): v is string => typeof v === 'string' && v !== '');
  // max_output_tokens fitted into the context, then admission on the input's bound or count.
  fitAndAdmit(
    r,
    model,
    responsesRouteHint(model, o, sticky),
    requestedMaxTokens({ max_tokens: o.max_output_tokens }),
    () => responsesPrompt(o),
    (r) => forwardResponse(r, o, body, stream, tools),
  );
}

/** A 400 about the body of a request for `model`, counted under the model. */
function refuseOnModel(r: ModelRequest<ChatError>, model: ModelState, e: GatewayError): void {
  r.model = model;
  r.fail(e);
}

/**
 * reasoning.effort follows the rule of gateway/effort.ts, as output_config.effort on /v1/messages:
 * true when `o` was changed (the effort dropped or mapped), or the 400 for a tier the model cannot take.
 */
function applyEffort(o: Record<string, unknown>, model: ModelState): boolean | GatewayError {
  const reasoning = o.reasoning;
  if (reasoning === null || typeof reasoning !== 'object' || Array.isArray(reasoning)) return false;
  const rs = reasoning as Record<string, unknown>;
  if (typeof rs.effort !== 'string') return false;
  const decision = resolveEffort(rs.effort, model.entry);
  if (decision.kind === 'refuse') {
    const message = `reasoning.effort: ${JSON.stringify(rs.effort)} is not supported by model ${model.name} (accepted: ${decision.accepted.join(', ')})`;
    return new GatewayError(CHAT_CODES.invalidEffort, message, 400, 'invalid_request_error', 'reasoning.effort');
  }
  if (decision.kind === 'ignore') {
    const { effort: _dropped, ...rest } = rs;
    o.reasoning = Object.keys(rest).length ? rest : undefined;
    return true;
  }
  if (decision.effort === rs.effort) return false;
  o.reasoning = { ...rs, effort: decision.effort };
  return true;
}

/** The admitted request to the backend's /v1/responses, through the chat relay. */
function forwardResponse(r: ModelRequest<ChatError>, o: Record<string, unknown>, body: Buffer | string, stream: boolean, tools: ToolPlan): void {
  if (r.forwardMaxTokens !== undefined) {
    // Fitted into the context, or lowered to what the account has left (exact caps).
    o.max_output_tokens = r.forwardMaxTokens;
    try {
      body = JSON.stringify(o);
    } catch {
      r.fail(ERRORS.tooDeep, ZERO_USAGE);
      return;
    }
  }
  const relay = new ChatRelay(r, stream, false, withDroppedTools(r.decision!.headers, tools));
  // Calls of namespace functions get their namespace back on the way to the client.
  const handler = tools.names ? new NamespaceRelay(relay, new NamespaceRestorer(tools.names), stream) : relay;
  relay.call = r.ctx.upstreams.send(r.model!, r.routeHint, body, handler, RESPONSES_PATH);
}
