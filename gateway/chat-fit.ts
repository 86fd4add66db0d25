// The context fitting of gateway/context-fit.ts on POST /v1/chat/completions, as an option:
// OpenAI clients expect the backend's own error by default, so it applies only when the
// request carries `x-rc-fit-max-tokens: 1` (or `true`) or the catalog entry has `fitMaxTokens`.
// Then max_completion_tokens (or max_tokens) is lowered to what fits, and a prompt that alone
// is too long gets 400 `prompt is too long: N tokens > M maximum`, code `context_length_exceeded`.
import { headerName, type Res } from '../lib/http.js';
import type { ChatFields } from './chat.js';
import type { GatewayContext } from './context.js';
import { fitForResponse, promptTooLongMessage } from './context-fit.js';
import { CHAT_CODES, GatewayError, sendError } from './errors.js';

export const FIT_HEADER = headerName('x-rc-fit-max-tokens');

/** Whether the header asks for fitting (read it synchronously in the uWS handler). */
export function fitRequested(headerValue: string): boolean {
  return headerValue === '1' || headerValue.toLowerCase() === 'true';
}

/**
 * Fits `f` into its model's context, then calls `next` with the (possibly rewritten) fields;
 * answers 400 itself when the prompt alone is too long. Only called when fitting applies.
 */
export function fitChat(ctx: GatewayContext, res: Res, route: string, f: ChatFields, next: (f: ChatFields) => void): void {
  // The parsed body with the route's rewrites (chatFields): f.body is its serialization.
  const o = f.obj;
  const field = typeof o.max_completion_tokens === 'number' ? 'max_completion_tokens' : typeof o.max_tokens === 'number' ? 'max_tokens' : undefined;
  const asked = field ? (o[field] as number) : undefined;
  const messages = Array.isArray(o.messages) ? o.messages : [];
  const prompt = {
    model: o.model as string,
    messages,
    tools: Array.isArray(o.tools) ? o.tools : undefined,
    chat_template_kwargs:
      o.chat_template_kwargs !== null && typeof o.chat_template_kwargs === 'object' ? (o.chat_template_kwargs as Record<string, unknown>) : undefined,
  };
  fitForResponse(ctx, res, f.model, f.user, prompt, asked, Buffer.byteLength(f.body), (r) => {
    if (r.kind === 'too-long') {
      ctx.metrics.request(route, f.model.name, 400);
      sendError(res, new GatewayError(CHAT_CODES.contextLengthExceeded, promptTooLongMessage(r), 400, 'invalid_request_error', 'messages'));
      return;
    }
    if (r.kind === 'lowered' && field) {
      o[field] = r.maxTokens;
      let body: string;
      try {
        body = JSON.stringify(o);
      } catch {
        next(f); // nests deeper than the stack allows: forwarded as it is, the backend judges
        return;
      }
      next({ ...f, body, obj: o, maxTokens: r.maxTokens });
      return;
    }
    next(f);
  });
}
