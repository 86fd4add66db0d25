// The front half of every messages route: key, body, JSON, schema, catalog, translation.
// Everything here answers 4xx in the protocol's error shape; nothing reaches a backend.
import type { z } from 'zod';
import { declaredLength, MAX_JSON_DEPTH, nestsDeeperThan, readBody, type Res } from '../../lib/http.js';
import type { HttpRequest } from '../../lib/uws.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { GatewayContext } from '../context.js';
import { MessagesError } from './errors.js';
import { describeIssue, type MessagesRequest } from './schema.js';
import type { ThinkingSigner } from './signature.js';
import { toChatRequest, type Translated } from './translate-request.js';

export interface PreparedRequest extends Translated {
  accountId: number;
  model: ModelState;
  body: MessagesRequest;
  /** The client's body size (the gate's input bound and the input estimate are made from it). */
  bodyBytes: number;
}

const NO_KEY = new MessagesError(401, 'Unauthorized: No API key provided.');
const BAD_KEY = new MessagesError(401, 'Invalid bearer token');
const BAD_SESSION = new MessagesError(401, 'Invalid or expired session, or missing x-csrf-token');
const UNVERIFIED = new MessagesError(403, 'Your account is under review; shared model access needs a verified account');
const TOO_DEEP = new MessagesError(400, `Request body nests deeper than ${MAX_JSON_DEPTH} levels`);

/**
 * Reads and checks a messages request. Calls `onReady` with the translated request, or
 * `onError` with the 4xx to answer. Must be called synchronously from the uWS handler.
 */
export function prepare(
  res: Res,
  req: HttpRequest,
  ctx: GatewayContext,
  schema: z.ZodType<MessagesRequest>,
  signer: ThinkingSigner,
  onReady: (p: PreparedRequest) => void,
  onError: (e: MessagesError) => void,
): void {
  // Headers first: req is only valid during this synchronous call.
  const auth = ctx.authenticateShared(req);
  const length = declaredLength(req);
  if (typeof auth !== 'number') {
    onError(auth.reason === 'missing' ? NO_KEY : auth.reason === 'session' ? BAD_SESSION : auth.reason === 'unverified' ? UNVERIFIED : BAD_KEY);
    return;
  }
  readBody(
    res,
    length,
    ctx.limits.maxBodyBytes,
    (buf) => {
      let json: unknown;
      try {
        json = JSON.parse(buf.toString('utf8'));
      } catch {
        onError(new MessagesError(400, 'Request body is not valid JSON'));
        return;
      }
      if (json === null || typeof json !== 'object' || Array.isArray(json)) {
        onError(new MessagesError(400, 'Request body must be a JSON object'));
        return;
      }
      // The model first: an unknown name is refused with the same message whatever else is wrong.
      const name = (json as { model?: unknown }).model;
      if (typeof name !== 'string' || name === '') {
        onError(new MessagesError(400, 'model: required, a model name from the catalog'));
        return;
      }
      const model = ctx.catalog.get(name);
      if (!model) {
        onError(new MessagesError(400, `Requested model ${name.length > 256 ? `${name.slice(0, 256)}...` : name} not supported`));
        return;
      }
      // Free JSON (tool inputs and schemas) is re-serialized by the translation: bound its depth.
      if (nestsDeeperThan(json)) {
        onError(TOO_DEEP);
        return;
      }
      const parsed = schema.safeParse(json);
      if (!parsed.success) {
        onError(new MessagesError(400, describeIssue(parsed.error, json)));
        return;
      }
      let translated: Translated;
      try {
        translated = toChatRequest(parsed.data, model.entry, signer);
      } catch (err) {
        if (err instanceof MessagesError) onError(err);
        else throw err;
        return;
      }
      onReady({ ...translated, accountId: auth, model, body: parsed.data, bodyBytes: buf.length });
    },
    (err) => onError(new MessagesError(err.status, err.message)),
  );
}

/**
 * A rough input token count: about 4 bytes of the chat request's messages and tools per token,
 * for count_tokens when the backend has no /tokenize (never for the gate's reservation: that
 * takes a true bound, gateway/admission/model-call.ts).
 */
export function estimateInputTokens(messagesJson: string, toolsJson: string | undefined): number {
  return Math.ceil((messagesJson.length + (toolsJson?.length ?? 0)) / 4);
}
