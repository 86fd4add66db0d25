// A validated messages request -> the chat-completions request the backends speak.
//
// Decisions (see README.md): thinking blocks in history are checked (signature) and dropped,
// since vLLM chat templates do not take prior reasoning; `thinking.budget_tokens` is refused;
// stop_sequences are not forwarded; tool_result blocks become tool messages, in order.
import type { ModelEntry } from '../../lib/config.js';
import { resolveEffort } from '../effort.js';
import { invalidRequest } from './errors.js';
import type { ContentBlock, ImageBlock, InputMessage, MessagesRequest } from './schema.js';
import type { ThinkingSigner } from './signature.js';

export type ChatContentPart = { type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } };

export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export type ChatMessage =
  | { role: 'system'; content: string }
  | { role: 'user'; content: string | ChatContentPart[] }
  | { role: 'assistant'; content: string | null; tool_calls?: ChatToolCall[] }
  | { role: 'tool'; tool_call_id: string; content: string };

export interface ChatTool {
  type: 'function';
  function: { name: string; description?: string; parameters: Record<string, unknown> };
}

export type ChatToolChoice = 'auto' | 'required' | 'none' | { type: 'function'; function: { name: string } };

/** The chat-completions request sent upstream. */
export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  tools?: ChatTool[];
  tool_choice?: ChatToolChoice;
  parallel_tool_calls?: boolean;
  reasoning_effort?: string;
  chat_template_kwargs?: Record<string, unknown>;
  user?: string;
  stream?: boolean;
  stream_options?: { include_usage: boolean; continuous_usage_stats?: boolean };
}

export interface Translated {
  chat: ChatRequest;
  /** metadata.user_id: the sticky-routing key, when given. */
  stickyKey: string | undefined;
  /** False when the client turned thinking off: reasoning text is then not returned. */
  thinking: boolean;
}

/**
 * Translates `req` for `model`. Throws a 400 MessagesError for what the backend cannot honour
 * (budget_tokens, an unknown effort tier on a reasoning model, tools on a model without tools, a bad
 * thinking signature, misplaced blocks).
 */
export function toChatRequest(req: MessagesRequest, model: ModelEntry, signer: ThinkingSigner): Translated {
  const messages: ChatMessage[] = [];
  if (req.system !== undefined) {
    const system = typeof req.system === 'string' ? req.system : joinText(req.system);
    if (system) messages.push({ role: 'system', content: system });
  }
  for (let i = 0; i < req.messages.length; i++) translateMessage(req.messages[i]!, i, messages, signer);

  const chat: ChatRequest = { model: model.servedName ?? model.name, messages };
  if (req.max_tokens !== undefined) chat.max_tokens = req.max_tokens;
  if (req.temperature !== undefined) chat.temperature = req.temperature;
  if (req.top_p !== undefined) chat.top_p = req.top_p;
  if (req.top_k !== undefined) chat.top_k = req.top_k;

  if (req.tools?.length) {
    if (!model.tools) throw invalidRequest(`tools: model ${model.name} does not support tool calling`);
    chat.tools = req.tools.map((t) => ({
      type: 'function',
      function:
        t.description === undefined ? { name: t.name, parameters: t.input_schema } : { name: t.name, description: t.description, parameters: t.input_schema },
    }));
  }
  if (req.tool_choice) {
    const tc = req.tool_choice;
    if (tc.type !== 'none' && !chat.tools) throw invalidRequest('tool_choice: requires tools');
    if (tc.type === 'auto') chat.tool_choice = 'auto';
    else if (tc.type === 'any') chat.tool_choice = 'required';
    else if (tc.type === 'none') chat.tool_choice = 'none';
    else {
      if (!req.tools!.some((t) => t.name === tc.name)) throw invalidRequest(`tool_choice.name: no tool named ${JSON.stringify(tc.name)} in tools`);
      chat.tool_choice = { type: 'function', function: { name: tc.name } };
    }
    if (tc.type !== 'none' && tc.disable_parallel_tool_use) chat.parallel_tool_calls = false;
  }

  let thinking = true;
  if (req.thinking) {
    if (req.thinking.type === 'enabled' && req.thinking.budget_tokens !== undefined) {
      throw invalidRequest('thinking.budget_tokens: not supported by this gateway; use thinking {"type": "adaptive"} and output_config.effort');
    }
    if (req.thinking.type === 'disabled') {
      thinking = false;
      // Qwen3 / DeepSeek-style templates read enable_thinking; other templates ignore it.
      if (model.reasoning) chat.chat_template_kwargs = { enable_thinking: false };
    }
  }
  const effort = req.output_config?.effort;
  if (effort) {
    // gateway/effort.ts: ignored without reasoning, mapped to the nearest accepted tier, or refused.
    const r = resolveEffort(effort, model);
    if (r.kind === 'refuse') {
      throw invalidRequest(`output_config.effort: ${JSON.stringify(effort)} is not supported by model ${model.name} (accepted: ${r.accepted.join(', ')})`);
    }
    if (r.kind === 'send') chat.reasoning_effort = r.effort;
  }

  const userId = req.metadata?.user_id ?? undefined;
  if (userId) chat.user = userId;
  return { chat, stickyKey: userId || undefined, thinking };
}

function joinText(blocks: { text: string }[]): string {
  let s = '';
  for (let i = 0; i < blocks.length; i++) s += (i ? '\n' : '') + blocks[i]!.text;
  return s;
}

function imagePart(block: ImageBlock): ChatContentPart {
  const src = block.source;
  const url = src.type === 'base64' ? `data:${src.media_type};base64,${src.data}` : src.url;
  return { type: 'image_url', image_url: { url } };
}

function translateMessage(m: InputMessage, i: number, out: ChatMessage[], signer: ThinkingSigner): void {
  if (typeof m.content === 'string') {
    out.push(m.role === 'assistant' ? { role: 'assistant', content: m.content } : { role: m.role, content: m.content });
    return;
  }
  if (m.role === 'system') {
    const blocks = m.content;
    for (let j = 0; j < blocks.length; j++) {
      if (blocks[j]!.type !== 'text') throw invalidRequest(`messages.${i}.content.${j}: a system message takes only text blocks`);
    }
    out.push({ role: 'system', content: joinText(blocks as { text: string }[]) });
  } else if (m.role === 'assistant') {
    out.push(assistantMessage(m.content, i, signer));
  } else {
    userMessages(m.content, i, out);
  }
}

function assistantMessage(blocks: ContentBlock[], i: number, signer: ThinkingSigner): ChatMessage {
  let text = '';
  let calls: ChatToolCall[] | undefined;
  for (let j = 0; j < blocks.length; j++) {
    const b = blocks[j]!;
    switch (b.type) {
      case 'text':
        text += b.text;
        break;
      case 'tool_use':
        (calls ??= []).push({ id: b.id, type: 'function', function: { name: b.name, arguments: JSON.stringify(b.input) } });
        break;
      case 'thinking':
        // Checked, then dropped: chat templates do not take prior reasoning.
        if (!signer.verify(b.thinking, b.signature)) throw invalidRequest(`messages.${i}.content.${j}: invalid signature in thinking block`);
        break;
      default:
        throw invalidRequest(`messages.${i}.content.${j}: ${b.type} blocks are not allowed in assistant messages`);
    }
  }
  if (calls) return { role: 'assistant', content: text || null, tool_calls: calls };
  return { role: 'assistant', content: text };
}

function userMessages(blocks: ContentBlock[], i: number, out: ChatMessage[]): void {
  let parts: ChatContentPart[] = [];
  // Tool messages take text only: images inside tool results follow them as user content.
  let resultImages: ChatContentPart[] | undefined;
  const flush = () => {
    if (!parts.length) return;
    // A lone text part goes as a plain string: what every chat template handles.
    const only = parts.length === 1 ? parts[0]! : undefined;
    out.push({ role: 'user', content: only && only.type === 'text' ? only.text : parts });
    parts = [];
  };
  for (let j = 0; j < blocks.length; j++) {
    const b = blocks[j]!;
    switch (b.type) {
      case 'text':
        parts.push({ type: 'text', text: b.text });
        break;
      case 'image':
        parts.push(imagePart(b));
        break;
      case 'tool_result': {
        flush();
        let content = '';
        const c = b.content;
        if (typeof c === 'string') content = c;
        else if (c) {
          for (const r of c) {
            if (r.type === 'text') content += (content ? '\n' : '') + r.text;
            else (resultImages ??= []).push(imagePart(r));
          }
        }
        out.push({ role: 'tool', tool_call_id: b.tool_use_id, content: b.is_error ? `Error: ${content}` : content });
        break;
      }
      default:
        throw invalidRequest(`messages.${i}.content.${j}: ${b.type} blocks are not allowed in user messages`);
    }
  }
  if (resultImages) parts.push(...resultImages);
  flush();
}

/**
 * JSON.stringify(chat), written field by field in the order toChatRequest (then the stream's
 * relay: stream, stream_options) sets them, which is the order JSON.stringify follows; its
 * strings and client-given values (content parts, tools, tool calls) through JSON.stringify.
 * Node 20's JSON.stringify of the whole object walked every object's properties and looked each
 * one up for a toJSON: some 11k instructions under callgrind for a one-message request, against
 * about 5k here (test/gateway/messages/translate.test.ts holds the two equal).
 */
export function chatRequestJson(chat: ChatRequest): string {
  let s = `{"model":${JSON.stringify(chat.model)},"messages":[`;
  const messages = chat.messages;
  for (let i = 0; i < messages.length; i++) s += (i === 0 ? '' : ',') + messageJson(messages[i]!);
  s += ']';
  if (chat.max_tokens !== undefined) s += `,"max_tokens":${numberJson(chat.max_tokens)}`;
  if (chat.temperature !== undefined) s += `,"temperature":${numberJson(chat.temperature)}`;
  if (chat.top_p !== undefined) s += `,"top_p":${numberJson(chat.top_p)}`;
  if (chat.top_k !== undefined) s += `,"top_k":${numberJson(chat.top_k)}`;
  if (chat.tools !== undefined) s += `,"tools":${JSON.stringify(chat.tools)}`;
  if (chat.tool_choice !== undefined) s += `,"tool_choice":${JSON.stringify(chat.tool_choice)}`;
  if (chat.parallel_tool_calls !== undefined) s += `,"parallel_tool_calls":${chat.parallel_tool_calls}`;
  if (chat.chat_template_kwargs !== undefined) s += `,"chat_template_kwargs":${JSON.stringify(chat.chat_template_kwargs)}`;
  if (chat.reasoning_effort !== undefined) s += `,"reasoning_effort":${JSON.stringify(chat.reasoning_effort)}`;
  if (chat.user !== undefined) s += `,"user":${JSON.stringify(chat.user)}`;
  if (chat.stream !== undefined) s += `,"stream":${chat.stream}`;
  const so = chat.stream_options;
  if (so !== undefined) {
    s += `,"stream_options":{"include_usage":${so.include_usage}`;
    if (so.continuous_usage_stats !== undefined) s += `,"continuous_usage_stats":${so.continuous_usage_stats}`;
    s += '}';
  }
  return `${s}}`;
}

/** One chat message, its keys in the order translateMessage writes them. */
function messageJson(m: ChatMessage): string {
  const content = JSON.stringify(m.content);
  switch (m.role) {
    case 'tool':
      return `{"role":"tool","tool_call_id":${JSON.stringify(m.tool_call_id)},"content":${content}}`;
    case 'assistant':
      return m.tool_calls === undefined
        ? `{"role":"assistant","content":${content}}`
        : `{"role":"assistant","content":${content},"tool_calls":${JSON.stringify(m.tool_calls)}}`;
    default:
      return `{"role":"${m.role}","content":${content}}`;
  }
}

/** A number as JSON.stringify writes it (null when not finite). */
function numberJson(n: number): string {
  return Number.isFinite(n) ? String(n) : 'null';
}
