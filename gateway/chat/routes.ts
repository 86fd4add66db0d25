// The OpenAI-compatible routes: GET /v1/models and POST /v1/chat/completions.
//
// Request path of a completion: key (headers, before the body is read) -> body (size limit) ->
// JSON object with a string `model` -> catalog -> max_tokens fitted into the context (400 when
// the prompt alone is too long) -> admission slot (503) -> gate (429) -> forward the body as
// received (rewritten only to add stream_options.include_usage, the served model name, or a
// fitted or bounded max_tokens) -> relay the response as bytes.
import { chatRouteHint } from '../backends/route-hint.js';
import type { HttpRequest, HttpResponse, TemplatedApp } from '../../lib/uws.js';
import { sendJson, track } from '../../lib/http.js';
import { allocUnsafe, copyWithin, lastIndexOf, set } from '../../lib/bytes.js';
import { chatPrompt } from '../admission/prompt.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { GatewayContext, RoutePlugin } from '../context.js';
import { CHAT_CODES, ERRORS, GatewayError } from '../errors.js';
import { fitAndAdmit } from '../admission/model-call.js';
import { authenticate, frontDoor } from '../request/front-door.js';
import { ModelRequest } from '../request/lifecycle.js';
import { ZERO_USAGE } from '../usage.js';
import { CHAT_PROTOCOL, type ChatError } from './protocol.js';
import { ChatRelay } from './relay.js';

export const CHAT_ROUTE = 'chat';
export const MODELS_ROUTE = 'models';

const INCLUDE_USAGE = Buffer.from(',"stream_options":{"include_usage":true}');

/** What the request path reads from a completion body and rewrites in it; everything else is the backend's business. */
export interface ChatFields {
  stream: boolean;
  /** The body to forward. */
  body: Buffer | string;
  stripUsage: boolean;
  /** The parsed body, with the rewrites already applied (for a later max_tokens bound). */
  obj: Record<string, unknown>;
}

/** The request's max_completion_tokens / max_tokens, when it gives a usable one. */
export function requestedMaxTokens(obj: Record<string, unknown>): number | undefined {
  const m = obj.max_completion_tokens ?? obj.max_tokens;
  return typeof m === 'number' && m > 0 && Number.isFinite(m) ? Math.ceil(m) : undefined;
}

/**
 * The 400 for a max tokens field `field` whose value `v` is a number below 1, else undefined.
 * The gateway checks it itself: a bound or fitted max tokens would replace a 0 and forward a
 * request the client's value makes invalid (vLLM refuses it; SGLang and llama.cpp take a 0 or a
 * negative as "no limit"). The caller reads the field by its name: a read by a name in a variable
 * goes through V8's megamorphic keyed load (some 300 instructions a request under callgrind).
 */
export function maxTokensBelowOne(field: string, v: unknown): GatewayError | undefined {
  if (typeof v === 'number' && !(v >= 1))
    return new GatewayError(CHAT_CODES.invalidBody, `${field}: must be at least 1, got ${v}`, 400, 'invalid_request_error', field);
  return undefined;
}

/**
 * The body to forward for a completion body `o` of `model` (stream_options.include_usage added,
 * the served name set); answers 400 itself and returns undefined when it cannot be serialized.
 */
export function chatFields(r: ModelRequest<ChatError>, raw: Buffer, o: Record<string, unknown>, model: ModelState): ChatFields | undefined {
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
      r.fail(ERRORS.tooDeep);
      return undefined;
    }
  }
  return { stream, body, stripUsage, obj: o };
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

/**
 * Adds `"stream_options":{"include_usage":true}` before the final `}` without re-serializing:
 * the body copied whole, its tail moved up and the key written in the gap (three typed-array
 * builtins; two slices and a concat cost about twice as much).
 */
function spliceIncludeUsage(raw: Buffer): Buffer {
  const end = lastIndexOf(raw, 0x7d); // '}': the body parsed as an object, so it exists
  const out = allocUnsafe(raw.length + INCLUDE_USAGE.length);
  set(out, raw, 0);
  copyWithin(out, end + INCLUDE_USAGE.length, end, raw.length);
  set(out, INCLUDE_USAGE, end);
  return out;
}

/** Through the door: the fields read, then fitted and admitted (admission/model-call.ts). */
function completion(r: ModelRequest<ChatError>, raw: Buffer, o: Record<string, unknown>, model: ModelState): void {
  const belowOne = maxTokensBelowOne('max_tokens', o.max_tokens) ?? maxTokensBelowOne('max_completion_tokens', o.max_completion_tokens);
  if (belowOne) {
    r.model = model;
    r.fail(belowOne);
    return;
  }
  const f = chatFields(r, raw, o, model);
  if (!f) return;
  r.stream = f.stream;
  fitAndAdmit(
    r,
    model,
    chatRouteHint(model, o, typeof o.user === 'string' ? o.user : undefined),
    requestedMaxTokens(o),
    () => chatPrompt(o),
    (r) => forwardCompletion(r, f),
  );
}

function forwardCompletion(r: ModelRequest<ChatError>, f: ChatFields): void {
  let body = f.body;
  if (r.forwardMaxTokens !== undefined) {
    // Fitted into the context, or the account has less left than the request could generate.
    const rewritten = withMaxTokens(f.obj, r.forwardMaxTokens);
    if (rewritten === undefined) {
      r.fail(ERRORS.tooDeep, ZERO_USAGE);
      return;
    }
    body = rewritten;
  }
  const relay = new ChatRelay(r, f.stream, f.stripUsage, r.decision!.headers);
  relay.call = r.ctx.upstreams.send(r.model!, r.routeHint, body, relay);
}

export const chatRoutes: RoutePlugin = (app: TemplatedApp, ctx: GatewayContext) => {
  app.get('/v1/models', (res: HttpResponse, req: HttpRequest) => {
    const r = new ModelRequest(ctx, track(res), MODELS_ROUTE, CHAT_PROTOCOL);
    if (!authenticate(r, req)) return;
    sendJson(r.res, 200, ctx.catalog.listBody());
    r.finish(200, undefined);
  });

  app.post('/v1/chat/completions', (res: HttpResponse, req: HttpRequest) => {
    // frontDoor reads x-rc-fit-max-tokens (r.fitHeader) with the other headers.
    frontDoor(new ModelRequest(ctx, track(res), CHAT_ROUTE, CHAT_PROTOCOL), req, completion);
  });
};
