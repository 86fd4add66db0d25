// POST /v1/messages/count_tokens: the request rendered exactly as /v1/messages would send it
// (system, tools and thinking switch included), counted by the backend's own /tokenize, so
// count_tokens(x).input_tokens equals usage.input_tokens of the same request (no prompt cache).
// A backend without /tokenize (404, 405, 501) gets an estimate, marked `x-rc-token-count: estimate`.
import { sendJson, type Res } from '../../lib/http.js';
import type { GatewayContext } from '../context.js';
import { parseTokenizeResponse } from '../admission/context-fit.js';
import { requestUpstream, UpstreamError } from '../backends/upstreams.js';
import { backendError, MessagesError } from './errors.js';
import { estimateInputTokens, type PreparedRequest } from './request.js';
import { sendError } from './reply.js';

export const TOKEN_COUNT_HEADER = 'x-rc-token-count';
const EXACT = { [TOKEN_COUNT_HEADER]: 'exact' };
const ESTIMATE = { [TOKEN_COUNT_HEADER]: 'estimate' };
const NO_TOKENIZE = new Set([404, 405, 501]);
const MAX_RESPONSE_BYTES = 16 * 1024 * 1024;

/** Counts the request's tokens; the caller has admitted it (slot and gate) and releases both. */
export async function countTokens(res: Res, ctx: GatewayContext, route: string, p: PreparedRequest, gateHeaders: Record<string, string>): Promise<void> {
  const chat = p.chat;
  const body: Record<string, unknown> = { model: chat.model, messages: chat.messages };
  if (chat.tools) body.tools = chat.tools;
  if (chat.chat_template_kwargs) body.chat_template_kwargs = chat.chat_template_kwargs;
  const json = JSON.stringify(body);
  const ac = new AbortController();
  res.onAbort = () => ac.abort();
  try {
    const up = await requestUpstream(ctx.upstreams, p.model, p.stickyKey, json, { path: '/tokenize', signal: ac.signal, maxBytes: MAX_RESPONSE_BYTES });
    if (up.status === 200) {
      const count = parseTokenizeResponse(up.body)?.count;
      if (count === undefined) {
        sendError(res, ctx, route, p.model.name, new MessagesError(502, 'The model backend returned a malformed /tokenize response'));
        return;
      }
      ctx.metrics.request(route, p.model.name, 200);
      sendJson(res, 200, `{"input_tokens":${count}}`, { ...gateHeaders, ...EXACT });
    } else if (NO_TOKENIZE.has(up.status)) {
      const estimate = estimateInputTokens(JSON.stringify(chat.messages), chat.tools && JSON.stringify(chat.tools));
      ctx.metrics.request(route, p.model.name, 200);
      sendJson(res, 200, `{"input_tokens":${estimate}}`, { ...gateHeaders, ...ESTIMATE });
    } else {
      sendError(res, ctx, route, p.model.name, backendError(up.status, up.body.toString('utf8'), up.headers['retry-after']));
    }
  } catch (err) {
    if (err instanceof UpstreamError) {
      if (!(err.kind === 'aborted' && res.aborted)) sendError(res, ctx, route, p.model.name, new MessagesError(502, 'Model gateway is unavailable'));
    } else throw err;
  } finally {
    res.onAbort = undefined;
  }
}
