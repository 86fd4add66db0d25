// POST /v1/messages/count_tokens: the request rendered exactly as /v1/messages would send it
// (system, tools and thinking switch included), counted by the backend's own /tokenize, so
// count_tokens(x).input_tokens equals usage.input_tokens of the same request (no prompt cache).
// Each backend counts its own way (admission/tokenize.ts: vLLM and SGLang /tokenize, llama.cpp
// /apply-template then /tokenize). A backend that cannot count (no endpoint, SGLang 0.5's
// prompt-only /tokenize, a 200 that is not a count) gets the estimate, marked
// `x-rc-token-count: estimate`, and is not asked again.
import { chatRouteHint } from '../backends/route-hint.js';
import { sendJson } from '../../lib/http.js';
import { chatPrompt } from '../admission/prompt.js';
import { countWithBackend } from '../admission/tokenize.js';
import { backendLearned, learnBackend } from '../backends/backend-kind.js';
import { UpstreamError } from '../backends/upstreams.js';
import { CLIENT_CLOSED } from '../metrics.js';
import type { ModelRequest } from '../request/lifecycle.js';
import { ZERO_USAGE } from '../usage.js';
import { backendError, type MessagesError } from './errors.js';
import { upstreamUnavailable } from './reply.js';
import { estimateInputTokens, type PreparedRequest } from './request.js';

export const TOKEN_COUNT_HEADER = 'x-rc-token-count';
const EXACT = { [TOKEN_COUNT_HEADER]: 'exact' };
const ESTIMATE = { [TOKEN_COUNT_HEADER]: 'estimate' };

/**
 * Counts the request's tokens; `r` is admitted (slot and request bucket) and finishes here, with
 * zero usage whatever the outcome (counting spends no tokens). A client that leaves during the
 * count: the request finishes as client-closed, nothing answered (admission/context-fit.ts, "A
 * count the client left").
 */
export async function countTokens(r: ModelRequest<MessagesError>, p: PreparedRequest): Promise<void> {
  const res = r.res;
  const chat = p.chat;
  const model = r.model!;
  const json = JSON.stringify(chatPrompt(chat)!); // a translated request always has its messages
  const ac = new AbortController();
  res.onAbort = () => ac.abort();
  try {
    if (!backendLearned(model)) await learnBackend(model);
    if (res.aborted) {
      r.finish(CLIENT_CLOSED, ZERO_USAGE);
      return;
    }
    const c = await countWithBackend(r.ctx, model, chatRouteHint(model, p.chat, p.stickyKey), json, ac.signal);
    if (c.kind === 'counted') {
      sendJson(res, 200, `{"input_tokens":${c.count}}`, { ...r.decision!.headers, ...EXACT });
      r.finish(200, ZERO_USAGE);
    } else if (c.kind === 'cannot') {
      const estimate = estimateInputTokens(JSON.stringify(chat.messages), chat.tools && JSON.stringify(chat.tools));
      sendJson(res, 200, `{"input_tokens":${estimate}}`, { ...r.decision!.headers, ...ESTIMATE });
      r.finish(200, ZERO_USAGE);
    } else {
      r.fail(backendError(c.status, c.body.toString('utf8'), c.retryAfter), ZERO_USAGE);
    }
  } catch (err) {
    if (!(err instanceof UpstreamError)) throw err;
    if (err.kind === 'aborted' && res.aborted) r.finish(CLIENT_CLOSED, ZERO_USAGE);
    else r.fail(upstreamUnavailable(), ZERO_USAGE);
  } finally {
    res.onAbort = undefined;
  }
}
