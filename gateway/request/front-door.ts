// The front door of the shared model routes (chat completions, /v1/messages, count_tokens,
// /v1/responses): the credential (a key, else a browser session: auth/credentials.ts), the body
// read within its size limit, a JSON object, and the catalog model it names. Every refusal is
// answered in the request's protocol (protocol.ts) and ends the request through its lifecycle
// (which counts it, under no model). Nothing here reaches a backend.
import { type BodyWatch, CONFLICTING_LENGTH, readBody } from '../../lib/http.js';
import { decode } from '../../lib/bytes.js';
import type { Upload, UploadRefusal } from '../../lib/upload-limits.js';
import { CHAT_CODES } from '../errors.js';
import type { CredentialHeaders } from '../auth/credentials.js';
import type { HttpRequest } from '../../lib/uws.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { ModelRequest } from './lifecycle.js';
import { checkParseBudget } from './parse-budget.js';
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

// One walk over the request's headers (uWS's forEach) reads what the door needs: the Content-Length
// walk (declaredLength, lib/http.ts) has to see every header anyway, so the credential's headers,
// x-forwarded-for and x-rc-fit-max-tokens are taken from it instead of one getHeader call each (a call into uWS
// and a new string, some 700 instructions). Module state, set around the synchronous walk: no
// closure per request. The first value of each name wins, as getHeader gives it.
const seen: CredentialHeaders = { authorization: '', xApiKey: '', cookie: '', csrfToken: '', forwardedProto: '' };
let fitValue = '';
let forwardedValue = '';
let lengthValue = '';
let lengthConflict = false;
/** Bits of the names already seen (their first value kept). */
let seenBits = 0;

function onHeader(name: string, value: string): void {
  // uWS hands names in lower case. The length picks the one name it may be.
  switch (name.length) {
    case 13:
      if (name === 'authorization' && (seenBits & 1) === 0) {
        seenBits |= 1;
        seen.authorization = value;
      }
      return;
    case 9:
      if (name === 'x-api-key' && (seenBits & 2) === 0) {
        seenBits |= 2;
        seen.xApiKey = value;
      }
      return;
    case 6:
      if (name === 'cookie' && (seenBits & 4) === 0) {
        seenBits |= 4;
        seen.cookie = value;
      }
      return;
    case 12:
      if (name === 'x-csrf-token' && (seenBits & 8) === 0) {
        seenBits |= 8;
        seen.csrfToken = value;
      }
      return;
    case 17:
      if (name === 'x-forwarded-proto' && (seenBits & 16) === 0) {
        seenBits |= 16;
        seen.forwardedProto = value;
      }
      return;
    case 19:
      if (name === FIT_HEADER_NAME && (seenBits & 32) === 0) {
        seenBits |= 32;
        fitValue = value;
      }
      return;
    case 15:
      // The last line: a proxy appends its entry to the last one (lib/client-address.ts).
      if (name === 'x-forwarded-for') forwardedValue = value;
      return;
    case 14:
      if (name === 'content-length') {
        if ((seenBits & 64) === 0) {
          seenBits |= 64;
          lengthValue = value;
        } else if (value !== lengthValue) lengthConflict = true;
      }
      return;
  }
}

/** x-rc-fit-max-tokens (admission/model-call.ts FIT_HEADER). */
const FIT_HEADER_NAME = 'x-rc-fit-max-tokens';

/**
 * Walks the headers once: `seen` and `fitValue` set, and the declared length returned as
 * declaredLength() gives it ('' when the first Content-Length is absent or empty, CONFLICTING_LENGTH
 * when another one differs from it).
 */
function walkHeaders(req: HttpRequest): string {
  seen.authorization = seen.xApiKey = seen.cookie = seen.csrfToken = seen.forwardedProto = '';
  fitValue = forwardedValue = lengthValue = '';
  lengthConflict = false;
  seenBits = 0;
  req.forEach(onHeader);
  return lengthValue === '' ? '' : lengthConflict ? CONFLICTING_LENGTH : lengthValue;
}

/**
 * The door, then `enter`. Call synchronously in the uWS handler: the credential, the body's length
 * and x-rc-fit-max-tokens (into `r.fitHeader`) are read from `req`, in one walk over its headers.
 */
export function frontDoor<E extends ProtocolError>(r: ModelRequest<E>, req: HttpRequest, enter: RouteEntry<E>): void {
  const length = walkHeaders(req);
  r.fitHeader = fitValue;
  r.forwardedFor = forwardedValue;
  const auth = r.ctx.authenticateHeaders(seen);
  if (typeof auth !== 'number') {
    r.fail(r.protocol.auth(auth));
    return;
  }
  r.accountId = auth;
  // The body's bytes in flight count against its address and account (lib/upload-limits.ts)
  // until it is whole; one that arrives in a single read never counts.
  let upload: Upload | undefined;
  const watch: BodyWatch = (bytes, last) => {
    if (upload === undefined) {
      if (last) return true;
      upload = r.ctx.uploads.start(r.clientAddress(), auth);
      const held = upload;
      r.res.onAbort = () => held.release();
    }
    const refusal = upload.received(bytes, last);
    if (refusal) {
      refuseUpload(r, refusal);
      return false;
    }
    if (last) r.res.onAbort = undefined;
    return true;
  };
  readBody(
    r.res,
    length,
    r.ctx.limits.maxBodyBytes,
    (raw) => enterWith(r, raw, enter),
    (err) => {
      upload?.release();
      r.fail(r.protocol.body(err));
    },
    watch,
  );
}

/**
 * 429 in the route's shape, `code` upload_limit_exceeded, Retry-After, the limit in `x-rc-limit`;
 * the connection is closed after it (the rest of the body is never read).
 */
function refuseUpload<E extends ProtocolError>(r: ModelRequest<E>, refusal: UploadRefusal): void {
  r.res.onAbort = undefined;
  r.res.closeAfter = true;
  r.protocol.refuse(r.res, {
    kind: 'rate_limited',
    code: CHAT_CODES.uploadLimit,
    retryAfterSec: refusal.retryAfterSec,
    headers: { 'x-rc-limit': refusal.message },
  });
  r.finish(429, undefined);
}

function enterWith<E extends ProtocolError>(r: ModelRequest<E>, raw: Buffer, enter: RouteEntry<E>): void {
  const p = r.protocol;
  let json: unknown;
  try {
    json = JSON.parse(decode(raw, 'utf8'));
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
  // Counted before the route's own work on the body: what a request may make it walk is bounded.
  const overBudget = checkParseBudget(body, r.ctx.limits.parseBudget);
  if (overBudget) {
    r.model = model;
    r.fail(p.body(overBudget));
    return;
  }
  enter(r, raw, body, model);
}
