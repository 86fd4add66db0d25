// What the gateway checks and changes in a /v1/responses body before the backend, apart from the
// model, effort and max_output_tokens (routes.ts): state kept between requests, and the tools
// (tools.ts).
import { CHAT_CODES, GatewayError } from '../errors.js';
import { DROPPED_TOOLS_HEADER, planTools, type ToolPlan } from './tools.js';

/**
 * Fields that name state a previous request left on the server. The gateway stores no responses,
 * and a model's requests go to several backends, so a backend's own store could not be relied
 * on either: clients send the whole conversation in `input` (Codex does, with `store: false`).
 */
const STATEFUL_FIELDS = ['previous_response_id', 'conversation'] as const;

/** The 400 for a request that refers to stored state, or undefined. */
function statefulRefusal(o: Record<string, unknown>): GatewayError | undefined {
  for (const field of STATEFUL_FIELDS) {
    const v = o[field];
    if (v === undefined || v === null || v === '') continue;
    return new GatewayError(
      CHAT_CODES.statefulNotSupported,
      `${field} is not supported: the gateway keeps no responses or conversations; send the whole conversation in input`,
      400,
      'invalid_request_error',
      field,
    );
  }
  return undefined;
}

/**
 * Checks the request and makes its tools fit the backend (changing `o`). Returns the tool plan,
 * or the 400 to answer.
 */
export function prepareResponsesBody(o: Record<string, unknown>): ToolPlan | GatewayError {
  return statefulRefusal(o) ?? planTools(o);
}

/** The gate's headers, with `x-rc-dropped-tools` when tools were left out. */
export function withDroppedTools(headers: Record<string, string>, plan: ToolPlan): Record<string, string> {
  // The types come from a fixed list (tools.ts): no CR or LF can reach the header.
  return plan.dropped.length ? { ...headers, [DROPPED_TOOLS_HEADER]: plan.dropped.join(', ') } : headers;
}
