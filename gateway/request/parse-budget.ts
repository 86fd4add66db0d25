// The parse budget of a shared model request: how many tools, messages and content blocks one
// body may hold, checked at the front door right after JSON.parse, before the route's own work
// (tool flattening, prompt building, the messages translation) and before any gate. The body's
// byte limit alone let one request of 20,000 namespace functions (606 KiB) hold the process
// for seconds (issue 44): every step after the parse is meant to be linear in the body, and
// this bounds how much there is to walk, whatever a later step costs per item.
//
// What is counted (one walk, at fixed depths, never recursing into arbitrary JSON):
// - tools: `tools[]`, plus the functions of each namespace tool (`tools[i].tools[]`, /v1/responses);
// - messages: `messages[]` (chat, /v1/messages, count_tokens) or `input[]` (/v1/responses);
// - blocks: the content parts of every message or input item (`content[]`), the parts nested one
//   level in them (a tool_result's `content[]`), a reasoning item's `summary[]`, and `system[]`.
// A body over a cap is refused with 400 in the route's shape (the protocol's body error), naming
// the field, the cap and its setting.
import { RcError } from '../../lib/errors.js';

export interface ParseBudget {
  /** Tools of one request, namespace functions included (RC_GATEWAY_MAX_TOOLS). */
  maxTools: number;
  /** Messages or input items of one request (RC_GATEWAY_MAX_MESSAGES). */
  maxMessages: number;
  /** Content blocks of one request, over all its messages and `system` (RC_GATEWAY_MAX_BLOCKS). */
  maxBlocks: number;
}

export const DEFAULT_PARSE_BUDGET: ParseBudget = { maxTools: 4096, maxMessages: 50_000, maxBlocks: 100_000 };

/** A request body over its parse budget: 400 in the route's shape (its protocol's `body` error). */
export class ParseBudgetError extends RcError {
  constructor(message: string) {
    super('parse_budget_exceeded', message, 400);
  }
}

const lengthOf = (v: unknown): number => (Array.isArray(v) ? v.length : 0);

/** The blocks of a message or input item: its `content[]` and `summary[]`, and the `content[]` of each part in them. */
function blocksOf(item: unknown): number {
  if (item === null || typeof item !== 'object') return 0;
  const o = item as Record<string, unknown>;
  let n = lengthOf(o.summary);
  const content = o.content;
  if (!Array.isArray(content)) return n;
  n += content.length;
  for (let i = 0; i < content.length; i++) {
    const part: unknown = content[i];
    if (part !== null && typeof part === 'object') n += lengthOf((part as Record<string, unknown>).content);
  }
  return n;
}

/** The refusal of a body over `budget`, or undefined. Linear in the items it counts. */
export function checkParseBudget(body: Record<string, unknown>, budget: ParseBudget): ParseBudgetError | undefined {
  const tools = body.tools;
  if (Array.isArray(tools)) {
    let n = tools.length;
    for (let i = 0; i < tools.length && n <= budget.maxTools; i++) {
      const t: unknown = tools[i];
      if (t !== null && typeof t === 'object') n += lengthOf((t as Record<string, unknown>).tools);
    }
    if (n > budget.maxTools)
      return new ParseBudgetError(
        `tools: more than ${budget.maxTools} tools (namespace functions included) in one request; this gateway's limit is RC_GATEWAY_MAX_TOOLS`,
      );
  }
  const field = Array.isArray(body.messages) ? 'messages' : 'input';
  const items = body[field];
  let blocks = lengthOf(body.system);
  if (Array.isArray(items)) {
    if (items.length > budget.maxMessages)
      return new ParseBudgetError(`${field}: more than ${budget.maxMessages} items in one request; this gateway's limit is RC_GATEWAY_MAX_MESSAGES`);
    for (let i = 0; i < items.length && blocks <= budget.maxBlocks; i++) blocks += blocksOf(items[i]);
  }
  if (blocks > budget.maxBlocks)
    return new ParseBudgetError(
      `${field}: more than ${budget.maxBlocks} content blocks in one request (system included); this gateway's limit is RC_GATEWAY_MAX_BLOCKS`,
    );
  return undefined;
}
