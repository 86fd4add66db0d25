// POST /v1/responses on the sim: the Responses API as vLLM serves it, enough for the gateway's
// tests and the official `openai` client's responses.create / responses.stream: text, reasoning,
// function calls (one per response), usage with cached and reasoning tokens, and the stream's
// events (response.created ... response.completed, with sequence numbers).
//
// The request is mapped onto a chat request (input items -> messages, instructions -> system,
// function tools, max_output_tokens -> max_tokens, reasoning.effort -> reasoning_effort), so it
// is validated, planned, tokenized and prefix-cached exactly like a chat completion.
// Not modelled: previous_response_id and stored responses (400), built-in tools (400).
import { hexId } from './generate.js';
import { z } from 'zod';
import type { Plan } from './plan.js';
import { EFFORTS, SimRequestError } from './request.js';

const part = z.looseObject({ type: z.string(), text: z.string().optional() });
const content = z.union([z.string(), z.array(part)]);

const messageItem = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer']),
  content,
});
const functionCallItem = z.looseObject({ type: z.literal('function_call'), call_id: z.string().min(1), name: z.string().min(1), arguments: z.string() });
const functionOutputItem = z.looseObject({ type: z.literal('function_call_output'), call_id: z.string().min(1), output: z.union([z.string(), z.array(part)]) });
const reasoningItem = z.looseObject({ type: z.literal('reasoning') });
const inputItem = z.union([functionCallItem, functionOutputItem, reasoningItem, messageItem]);

const functionTool = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1).max(256),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

export const responsesRequestSchema = z.looseObject({
  model: z.string().nullish(),
  input: z.union([z.string(), z.array(inputItem).min(1)]),
  instructions: z.string().nullish(),
  tools: z.array(functionTool).nullish(),
  tool_choice: z.union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.literal('function'), name: z.string() })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  max_output_tokens: z.number().int().min(1).nullish(),
  stream: z.boolean().nullish(),
  reasoning: z.looseObject({ effort: z.enum(EFFORTS).nullish(), summary: z.string().nullish() }).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  user: z.string().nullish(),
  seed: z.number().int().nullish(),
  previous_response_id: z.string().nullish(),
  metadata: z.record(z.string(), z.string()).nullish(),
});
export type ResponsesRequest = z.output<typeof responsesRequestSchema>;

const textOf = (c: string | { text?: string | undefined }[]): string => (typeof c === 'string' ? c : c.map((p) => p.text ?? '').join(''));

/** The chat request body a Responses request amounts to (then validated as any chat request). */
export function responsesToChat(r: ResponsesRequest): Record<string, unknown> {
  if (r.previous_response_id) throw new SimRequestError(400, 'previous_response_id: the sim stores no responses', 'previous_response_id');
  const messages: Record<string, unknown>[] = [];
  if (r.instructions) messages.push({ role: 'system', content: r.instructions });
  if (typeof r.input === 'string') messages.push({ role: 'user', content: r.input });
  else {
    for (const item of r.input) {
      if (item.type === 'function_call') {
        const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
        const last = messages.at(-1);
        if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as unknown[]).push(call);
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      } else if (item.type === 'function_call_output') {
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: textOf(item.output) });
      } else if (item.type === 'reasoning') {
        // prior reasoning is not part of the prompt (as vLLM's chat templates drop it)
      } else {
        messages.push({ role: item.role, content: textOf(item.content) });
      }
    }
  }
  if (!messages.length) throw new SimRequestError(400, 'input: no message to answer', 'input');
  const chat: Record<string, unknown> = { model: r.model, messages };
  if (r.tools?.length) {
    chat.tools = r.tools.map((t) => ({
      type: 'function',
      function: { name: t.name, description: t.description ?? undefined, parameters: t.parameters ?? undefined },
    }));
  }
  if (r.tool_choice != null)
    chat.tool_choice = typeof r.tool_choice === 'string' ? r.tool_choice : { type: 'function', function: { name: r.tool_choice.name } };
  if (r.max_output_tokens != null) chat.max_tokens = r.max_output_tokens;
  if (r.reasoning?.effort) chat.reasoning_effort = r.reasoning.effort;
  if (r.seed != null) chat.seed = r.seed;
  if (r.stream) chat.stream = true;
  return chat;
}

/** Ids and echoed fields of one response. */
export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
  req: ResponsesRequest;
  promptTokens: number;
  cachedTokens: number;
}

interface Items {
  reasoning: { id: string; text: string } | undefined;
  message: { id: string; text: string } | undefined;
  call: { id: string; callId: string; name: string; args: string } | undefined;
}

function items(plan: Plan): Items {
  return {
    reasoning: plan.reasoning.length ? { id: `rs_${hexId()}`, text: plan.reasoning.join('') } : undefined,
    message: !plan.tool && plan.content.length ? { id: `msg_${hexId()}`, text: plan.content.join('') } : undefined,
    call: plan.tool ? { id: `fc_${hexId()}`, callId: `call_${hexId().slice(0, 24)}`, name: plan.tool.name, args: plan.tool.args.join('') } : undefined,
  };
}

const reasoningItemOf = (r: { id: string; text: string }, status: string) => ({
  type: 'reasoning',
  id: r.id,
  summary: [],
  content: [{ type: 'reasoning_text', text: r.text }],
  encrypted_content: null,
  status,
});
const messageItemOf = (m: { id: string; text: string }, status: string) => ({
  type: 'message',
  id: m.id,
  role: 'assistant',
  status,
  content: [{ type: 'output_text', text: m.text, annotations: [], logprobs: [] }],
});
const callItemOf = (c: { id: string; callId: string; name: string; args: string }, status: string) => ({
  type: 'function_call',
  id: c.id,
  call_id: c.callId,
  name: c.name,
  arguments: c.args,
  status,
});

function usage(plan: Plan, m: ResponseMeta) {
  return {
    input_tokens: m.promptTokens,
    input_tokens_details: { cached_tokens: m.cachedTokens },
    output_tokens: plan.completionTokens,
    output_tokens_details: { reasoning_tokens: plan.reasoning.length },
    total_tokens: m.promptTokens + plan.completionTokens,
  };
}

/** The response object; `output` and `usage` filled when `done`. */
function responseObject(m: ResponseMeta, plan: Plan, it: Items, done: boolean): Record<string, unknown> {
  const incomplete = done && plan.finish === 'length';
  const output: unknown[] = [];
  if (done) {
    if (it.reasoning) output.push(reasoningItemOf(it.reasoning, 'completed'));
    if (it.message) output.push(messageItemOf(it.message, incomplete ? 'incomplete' : 'completed'));
    if (it.call) output.push(callItemOf(it.call, incomplete ? 'incomplete' : 'completed'));
  }
  const r = m.req;
  return {
    id: m.id,
    object: 'response',
    created_at: m.created,
    status: done ? (incomplete ? 'incomplete' : 'completed') : 'in_progress',
    error: null,
    incomplete_details: incomplete ? { reason: 'max_output_tokens' } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    model: m.model,
    output,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: null,
    reasoning: r.reasoning ?? null,
    temperature: r.temperature ?? 1,
    text: { format: { type: 'text' } },
    tool_choice: r.tool_choice ?? 'auto',
    tools: r.tools ?? [],
    top_p: r.top_p ?? 1,
    truncation: 'disabled',
    usage: done ? usage(plan, m) : null,
    user: r.user ?? null,
    metadata: r.metadata ?? {},
  };
}

/** The non-stream response body. */
export function responseBody(m: ResponseMeta, plan: Plan): object {
  return responseObject(m, plan, items(plan), true);
}

/**
 * The events of a streamed response, one call per generated token (the same interface as the
 * chat StreamRenderer, so the sim's pacing and faults drive both).
 */
export class ResponsesStreamRenderer {
  readonly tokens: number;
  private seq = 0;
  private readonly it: Items;
  private readonly r: number;

  constructor(
    private readonly meta: ResponseMeta,
    private readonly plan: Plan,
  ) {
    this.it = items(plan);
    this.r = plan.reasoning.length;
    this.tokens = this.r + (plan.tool ? plan.tool.args.length : plan.content.length);
  }

  private event(type: string, fields: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...fields })}\n\n`;
  }

  /** response.created and response.in_progress. */
  head(): string {
    const response = responseObject(this.meta, this.plan, this.it, false);
    return this.event('response.created', { response }) + this.event('response.in_progress', { response });
  }

  token(i: number): string {
    const { plan, it, r } = this;
    let out = '';
    if (i < r) {
      const rs = it.reasoning!;
      if (i === 0) {
        out += this.event('response.output_item.added', { output_index: 0, item: { ...reasoningItemOf(rs, 'in_progress'), content: [] } });
        out += this.event('response.content_part.added', { item_id: rs.id, output_index: 0, content_index: 0, part: { type: 'reasoning_text', text: '' } });
      }
      out += this.event('response.reasoning_text.delta', { item_id: rs.id, output_index: 0, content_index: 0, delta: plan.reasoning[i] });
      if (i === r - 1) {
        out += this.event('response.reasoning_text.done', { item_id: rs.id, output_index: 0, content_index: 0, text: rs.text });
        out += this.event('response.content_part.done', { item_id: rs.id, output_index: 0, content_index: 0, part: { type: 'reasoning_text', text: rs.text } });
        out += this.event('response.output_item.done', { output_index: 0, item: reasoningItemOf(rs, 'completed') });
      }
      return out;
    }
    const index = r > 0 ? 1 : 0;
    const j = i - r;
    const last = i === this.tokens - 1;
    const status = plan.finish === 'length' ? 'incomplete' : 'completed';
    if (it.call) {
      const c = it.call;
      if (j === 0) out += this.event('response.output_item.added', { output_index: index, item: { ...callItemOf(c, 'in_progress'), arguments: '' } });
      out += this.event('response.function_call_arguments.delta', { item_id: c.id, output_index: index, delta: plan.tool!.args[j] });
      if (last) {
        out += this.event('response.function_call_arguments.done', { item_id: c.id, output_index: index, arguments: c.args });
        out += this.event('response.output_item.done', { output_index: index, item: callItemOf(c, status) });
      }
      return out;
    }
    const m = it.message!;
    if (j === 0) {
      out += this.event('response.output_item.added', { output_index: index, item: { ...messageItemOf(m, 'in_progress'), content: [] } });
      out += this.event('response.content_part.added', {
        item_id: m.id,
        output_index: index,
        content_index: 0,
        part: { type: 'output_text', text: '', annotations: [], logprobs: [] },
      });
    }
    out += this.event('response.output_text.delta', { item_id: m.id, output_index: index, content_index: 0, delta: plan.content[j], logprobs: [] });
    if (last) {
      const done = { type: 'output_text', text: m.text, annotations: [], logprobs: [] };
      out += this.event('response.output_text.done', { item_id: m.id, output_index: index, content_index: 0, text: m.text, logprobs: [] });
      out += this.event('response.content_part.done', { item_id: m.id, output_index: index, content_index: 0, part: done });
      out += this.event('response.output_item.done', { output_index: index, item: messageItemOf(m, status) });
    }
    return out;
  }

  /** Nothing generated at all: no item events. */
  /** response.completed (or response.incomplete when max_output_tokens cut it), with usage. */
  tail(): string {
    const response = responseObject(this.meta, this.plan, this.it, true);
    return this.event(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
  }
}
