// The messages routes' part of the way in, after the shared front door (request/front-door.ts:
// credential, body, JSON object, catalog model): depth, schema, translation. Everything here
// answers 4xx in the protocol's error shape; nothing reaches a backend.
import type { z } from 'zod';
import { MAX_JSON_DEPTH, nestsDeeperThan } from '../../lib/http.js';
import type { ModelState } from '../backends/model-catalog.js';
import type { ModelRequest } from '../request/lifecycle.js';
import { MessagesError } from './errors.js';
import { describeIssue, messagesRequestSchema, type MessagesRequest } from './schema.js';
import { simpleRequest } from './simple-request.js';
import type { ThinkingSigner } from './signature.js';
import { toChatRequest, type Translated } from './translate-request.js';

export interface PreparedRequest extends Translated {
  body: MessagesRequest;
}

const TOO_DEEP = new MessagesError(400, `Request body nests deeper than ${MAX_JSON_DEPTH} levels`);

/**
 * Checks a messages request body `json` (for `model`) against `schema` and translates it to the
 * chat request; answers the 400 itself and returns undefined when it cannot.
 */
export function prepare(
  r: ModelRequest<MessagesError>,
  json: Record<string, unknown>,
  model: ModelState,
  schema: z.ZodType<MessagesRequest>,
  signer: ThinkingSigner,
): PreparedRequest | undefined {
  // The common shape without zod (simple-request.ts; it nests three levels deep at most);
  // anything else, valid or not, through it.
  let body = simpleRequest(json, schema === messagesRequestSchema);
  if (body === undefined) {
    // Free JSON (tool inputs and schemas) is re-serialized by the translation: bound its depth.
    if (nestsDeeperThan(json)) {
      r.fail(TOO_DEEP);
      return undefined;
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      r.fail(new MessagesError(400, describeIssue(parsed.error, json)));
      return undefined;
    }
    body = parsed.data;
  }
  let translated: Translated;
  try {
    translated = toChatRequest(body, model.entry, signer);
  } catch (err) {
    if (!(err instanceof MessagesError)) throw err;
    r.fail(err);
    return undefined;
  }
  // Written out, not `{ ...translated, body }`: V8 defined `body` on the spread's clone through
  // its slow runtime path (Runtime_DefineNamedOwnIC_Slow), some 4k instructions a request.
  return { chat: translated.chat, stickyKey: translated.stickyKey, thinking: translated.thinking, body };
}

/**
 * A rough input token count: about 4 bytes of the chat request's messages and tools per token,
 * for count_tokens when the backend has no /tokenize (never for the gate's reservation: that
 * takes a true bound, gateway/admission/model-call.ts).
 */
export function estimateInputTokens(messagesJson: string, toolsJson: string | undefined): number {
  return Math.ceil((messagesJson.length + (toolsJson?.length ?? 0)) / 4);
}
