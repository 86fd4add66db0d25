// The front door of the shared model routes (chat completions, /v1/messages, count_tokens,
// /v1/responses): the credential (a key, else a browser session: auth/credentials.ts), the body
// read within its size limit, a JSON object, and the catalog model it names. Every refusal is
// answered in the request's protocol (protocol.ts) and ends the request through its lifecycle
// (which counts it, under no model). Nothing here reaches a backend.
import { declaredLength, readBody } from '../../lib/http.js';
import type { HttpRequest } from '../../lib/uws.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { ModelRequest } from './lifecycle.js';
import type { ProtocolError } from './protocol.js';

/**
 * What a route does with a request through the door: `raw` is the body as received, `body` the
 * object it parsed to, `model` the catalog model it names (the route binds it to the request,
 * `r.model`, from where its metrics count under the model). A function made once per route.
 */
export type RouteEntry<E extends ProtocolError> = (r: ModelRequest<E>, raw: Buffer, body: Record<string, unknown>, model: ModelState) => void;

/**
 * Takes the request's credential from its headers (call synchronously in the uWS handler): true
 * with `r.accountId` set, or false once the refusal (401, or 403 for an account under review) is
 * answered.
 */
export function authenticate<E extends ProtocolError>(r: ModelRequest<E>, req: HttpRequest): boolean {
  const auth = r.ctx.authenticateShared(req);
  if (typeof auth === 'number') {
    r.accountId = auth;
    return true;
  }
  r.fail(r.protocol.auth(auth));
  return false;
}

/** The door, then `enter`. Call synchronously in the uWS handler: the credential and the body's length are read from `req`. */
export function frontDoor<E extends ProtocolError>(r: ModelRequest<E>, req: HttpRequest, enter: RouteEntry<E>): void {
  if (!authenticate(r, req)) return;
  readBody(
    r.res,
    declaredLength(req),
    r.ctx.limits.maxBodyBytes,
    (raw) => enterWith(r, raw, enter),
    (err) => r.fail(r.protocol.body(err)),
  );
}

function enterWith<E extends ProtocolError>(r: ModelRequest<E>, raw: Buffer, enter: RouteEntry<E>): void {
  const p = r.protocol;
  let json: unknown;
  try {
    json = JSON.parse(raw.toString('utf8'));
  } catch {
    r.fail(p.invalidJson);
    return;
  }
  if (json === null || typeof json !== 'object' || Array.isArray(json)) {
    r.fail(p.notAnObject);
    return;
  }
  const body = json as Record<string, unknown>;
  // The model first: an unknown name is refused with the same message whatever else is wrong.
  const name = body.model;
  if (typeof name !== 'string' || name === '') {
    r.fail(p.modelMissing);
    return;
  }
  const model = r.ctx.catalog.get(name);
  if (!model) {
    r.fail(p.unknownModel(name));
    return;
  }
  r.bodyBytes = raw.length;
  enter(r, raw, body, model);
}
