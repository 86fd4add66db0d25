// The prompt of a /v1/responses request as the backend's /tokenize takes it (chat messages and
// tools), for fitting max_output_tokens and for the gate's exact count (gateway/admission/model-call.ts).
// vLLM maps a Responses request onto its chat template the same way: instructions -> system,
// a string input -> one user message, message items -> messages (their text parts joined),
// function_call items -> an assistant message's tool_calls, function_call_output -> a tool
// message, function tools -> chat tools. Prior reasoning items become assistant text (a chat
// template may keep them; counting them can only overestimate, which the caps tolerate).
// Anything else (images, files, built-in tools, stored responses) cannot be rendered here:
// undefined, and the request is judged on its byte bound and by the backend. The parts are made
// by the one builder of a chat-shaped prompt (admission/prompt.ts).
import { chatPrompt, type PromptParts } from '../admission/prompt.js';

type Item = Record<string, unknown>;

/** Text of a Responses content (a string, or parts of which only text kinds are understood); undefined for other parts. */
function textOf(content: unknown): string | undefined {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return undefined;
  let out = '';
  for (const p of content as Item[]) {
    if (p === null || typeof p !== 'object') return undefined;
    const t = p.type;
    if ((t === 'input_text' || t === 'output_text' || t === 'text' || t === 'summary_text' || t === 'reasoning_text') && typeof p.text === 'string')
      out += p.text;
    else return undefined;
  }
  return out;
}

const ROLES = new Set(['user', 'assistant', 'system', 'developer']);

/** The chat prompt of a Responses request body `o` (`model` already the served name), or undefined. */
export function responsesPrompt(o: Record<string, unknown>): PromptParts | undefined {
  if (o.previous_response_id != null) return undefined; // part of the prompt is stored in a backend
  const messages: Item[] = [];
  if (typeof o.instructions === 'string' && o.instructions !== '') messages.push({ role: 'system', content: o.instructions });
  const input = o.input;
  if (typeof input === 'string') messages.push({ role: 'user', content: input });
  else if (Array.isArray(input)) {
    for (const item of input as Item[]) {
      if (item === null || typeof item !== 'object') return undefined;
      const type = item.type ?? 'message';
      if (type === 'function_call') {
        if (typeof item.name !== 'string' || typeof item.arguments !== 'string') return undefined;
        const call = { id: String(item.call_id ?? ''), type: 'function', function: { name: item.name, arguments: item.arguments } };
        const last = messages.at(-1);
        if (last?.role === 'assistant' && Array.isArray(last.tool_calls)) (last.tool_calls as unknown[]).push(call);
        else messages.push({ role: 'assistant', content: null, tool_calls: [call] });
      } else if (type === 'function_call_output') {
        const text = textOf(item.output);
        if (text === undefined) return undefined;
        messages.push({ role: 'tool', tool_call_id: String(item.call_id ?? ''), content: text });
      } else if (type === 'reasoning') {
        const text = (textOf(item.content ?? []) ?? '') + (textOf(item.summary ?? []) ?? '');
        if (text !== '') messages.push({ role: 'assistant', content: text });
      } else if (type === 'message') {
        const text = textOf(item.content);
        if (text === undefined || typeof item.role !== 'string' || !ROLES.has(item.role)) return undefined;
        messages.push({ role: item.role, content: text });
      } else return undefined;
    }
  } else return undefined;
  let tools: unknown[] | undefined;
  if (Array.isArray(o.tools) && o.tools.length) {
    tools = [];
    for (const t of o.tools as Item[]) {
      if (t === null || typeof t !== 'object' || t.type !== 'function' || typeof t.name !== 'string') return undefined;
      tools.push({ type: 'function', function: { name: t.name, description: t.description ?? undefined, parameters: t.parameters ?? undefined } });
    }
  }
  return chatPrompt({ model: o.model, messages, tools });
}
