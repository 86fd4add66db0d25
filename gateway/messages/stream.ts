// The streaming translator: a state machine fed with parsed chat-completions chunks (as vLLM
// streams them) that returns the messages protocol's server-sent events, as text ready to write.
//
// Sequence: message_start (with the real input_tokens, from the chunk's continuous usage),
// then for each block content_block_start, its deltas, content_block_stop (a thinking block
// gets its signature_delta just before its stop), then message_delta (stop_reason and usage),
// then message_stop. Blocks open only when they have content; indices are contiguous.
// A backend error ends the stream with an `error` event.
import { randomFillSync, type Hmac } from 'node:crypto';
import { type ChunkFields, NO_USAGE, textChunk, type TextChunk, usageOf } from './chunk-parse.js';
import { randomId } from '../../lib/ids.js';
import { errorTypeForStatus, type MessagesErrorType } from './errors.js';
import type { ThinkingSigner } from './signature.js';
import { gateUsage, messagesUsage, stopReason, type ChatUsage } from './translate-response.js';

export interface ChatChunkToolCall {
  index?: number;
  id?: string | null;
  function?: { name?: string | null; arguments?: string | null } | null;
}

export interface ChatChunk {
  choices?: {
    delta?: {
      content?: string | null;
      reasoning_content?: string | null;
      reasoning?: string | null;
      tool_calls?: ChatChunkToolCall[] | null;
    } | null;
    finish_reason?: string | null;
  }[];
  usage?: ChatUsage | null;
  /** vLLM reports a failure inside the stream as `{"error": {...}}` (older: `{"object": "error", ...}`). */
  error?: { message?: string; code?: number | string } | string;
  object?: string;
  message?: string;
  code?: number | string;
}

export const PING_EVENT = 'event: ping\ndata: {"type":"ping"}\n\n';
/** An SSE comment: keeps proxies from cutting a silent stream before message_start. */
export const KEEPALIVE_COMMENT = ': keep-alive\n\n';

const enum Block {
  None,
  Thinking,
  Text,
  Tool,
}

export interface StreamOptions {
  /** The catalog name the client asked for. */
  model: string;
  signer: ThinkingSigner;
  /** False when the client disabled thinking: reasoning deltas are dropped. */
  thinking?: boolean;
  /** input_tokens for message_start when the first chunk carries no usage (a count or estimate). */
  inputTokens?: number;
  /**
   * Text tokens in a row for the open text block are held and given as one text_delta event, by
   * takeText() or before anything else is produced (the relay takes them at the end of each backend
   * read: the tokens of one read reach the client together anyway). Off: one event per token.
   */
  mergeText?: boolean;
}

export function sseError(type: MessagesErrorType, message: string): string {
  return `event: error\ndata: {"type":"error","error":{"type":${JSON.stringify(type)},"message":${JSON.stringify(message)}}}\n\n`;
}

export class StreamTranslator {
  /** True once message_stop or an error event has been produced. */
  done = false;
  /** True once message_start has been produced. */
  started = false;
  private readonly model: string;
  private readonly signer: ThinkingSigner;
  private readonly thinking: boolean;
  private readonly fallbackInputTokens: number;
  private readonly mergeText: boolean;
  /** Text for the open text block not produced yet (mergeText). */
  private heldText = '';
  /** Some of heldText is not known to need no escape (only pushChunk's plain texts are known). */
  private heldMayEscape = false;
  private usage: ChatUsage | undefined;
  /**
   * The last chunk whose usage is still in its read's text (pushChunk): the text and where the
   * chunk's event ends in it (-1: none), read when asked: currentUsage(). Two fields, not the
   * chunk's object: the read's text, the same for all its chunks, is stored once per read (each
   * store of a new object into the translator is a write barrier's slow path).
   */
  private usageText = '';
  private usageEnd = -1;
  private finish: string | null | undefined;
  private nextIndex = 0;
  private open = Block.None;
  private openIndex = -1;
  private hmac: Hmac | undefined;
  /** Our block index and id for each upstream tool-call index. */
  private toolBlocks: { index: number; id: string | undefined }[] = [];

  constructor(opts: StreamOptions) {
    this.model = opts.model;
    this.signer = opts.signer;
    this.thinking = opts.thinking ?? true;
    this.fallbackInputTokens = opts.inputTokens ?? 0;
    this.mergeText = opts.mergeText ?? false;
  }

  /** Usage seen so far (for the gate), or undefined when the backend reported none. */
  get reportedUsage(): { inputTokens: number; outputTokens: number; cachedTokens: number } | undefined {
    const usage = this.currentUsage();
    return usage ? gateUsage(usage) : undefined;
  }

  /** One `data:` payload of the upstream stream (a JSON chunk or `[DONE]`). */
  pushData(data: string): string {
    if (this.done) return '';
    if (data === '[DONE]') return this.end();
    const text = textChunk(data);
    if (text !== undefined) return this.pushText(text);
    return this.pushParsed(data);
  }

  /** pushData of a payload known not to be a plain chunk (textChunk would not read it). */
  pushOther(data: string): string {
    if (this.done) return '';
    if (data === '[DONE]') return this.end();
    return this.pushParsed(data);
  }

  /**
   * pushData of a plain chunk already read (textChunksAt). `plain`: its text is known to need no
   * escape in JSON (it was read without escapes from an all-ASCII read).
   */
  pushChunk(c: ChunkFields, plain = false): string {
    if (this.done) return '';
    if (c.usage !== NO_USAGE) {
      if (this.usageText !== c.text) this.usageText = c.text;
      this.usageEnd = c.end;
    }
    return this.pushFields(c.content, c.finish, plain);
  }

  /** The usage reported last: a chunk's usage read once asked for. */
  private currentUsage(): ChatUsage | undefined {
    if (this.usageEnd >= 0) {
      this.usage = usageOf(this.usageText, this.usageEnd);
      this.usageEnd = -1;
      this.usageText = '';
    }
    return this.usage;
  }

  private pushParsed(data: string): string {
    let chunk: ChatChunk;
    try {
      chunk = JSON.parse(data) as ChatChunk;
    } catch {
      return this.fail('api_error', 'The model backend sent a malformed stream chunk');
    }
    return this.push(chunk);
  }

  /**
   * A plain text-token chunk, as push() would take the same chunk parsed: the usage, then the
   * text (no reasoning, tool calls or error can be in this shape), then the finish reason.
   */
  private pushText(c: TextChunk): string {
    if (c.usage !== undefined) {
      this.usage = c.usage;
      this.usageEnd = -1;
    }
    return this.pushFields(c.content, c.finish, false);
  }

  /** A plain chunk's text and finish reason, its usage taken. */
  private pushFields(content: string | undefined, finish: string | null, plain: boolean): string {
    if (finish) this.finish = finish; // read only at the end: setting it before the text changes nothing
    if (!content) return this.started ? '' : this.startOnceCounted();
    return this.pushContent(content, plain);
  }

  /**
   * A text token, on every path (plain chunks and parsed ones alike, so the tokens of one read
   * merge whatever their chunks' shapes). Most chunks: one token into the open text block: held
   * (mergeText), else one event and no concatenation around it.
   */
  private pushContent(content: string, plain: boolean): string {
    if (this.mergeText) {
      // The block opens at once; its first token is held too, so a read's tokens are one event.
      let out = '';
      if (this.open !== Block.Text) out = (this.started ? '' : this.start()) + this.openBlock(Block.Text, '{"type":"text","text":""}');
      this.heldText += content;
      if (!plain) this.heldMayEscape = true;
      return out;
    }
    if (this.started) return this.textDelta(content);
    const out = this.start();
    return out + this.textDelta(content);
  }

  /** The held text (mergeText) as one text_delta event of the open text block, or ''. */
  takeText(): string {
    const text = this.heldText;
    if (text === '') return '';
    this.heldText = '';
    if (!this.heldMayEscape) return textDeltaHead(this.openIndex) + text + TEXT_DELTA_TAIL;
    this.heldMayEscape = false;
    return textDeltaEvent(this.openIndex, text);
  }

  /** One parsed upstream chunk. */
  push(chunk: ChatChunk): string {
    if (this.done) return '';
    if (chunk.error !== undefined || chunk.object === 'error') return this.backendError(chunk);
    if (chunk.usage) {
      this.usage = chunk.usage;
      this.usageEnd = -1;
    }
    const choice = chunk.choices?.[0];
    if (!this.started && !chunk.usage?.prompt_tokens && !carriesOutput(choice)) {
      if (choice?.finish_reason) this.finish = choice.finish_reason;
      return ''; // message_start waits for the prompt's count (startOnceCounted)
    }
    // Held text stays held while only text follows (below); what else this chunk holds, opens or ends gives it out first.
    let out = this.started ? '' : this.start();
    if (!choice) return out;
    const delta = choice.delta;
    if (delta) {
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      // Anything but text gives the held text out first, in its order.
      if ((reasoning && this.thinking) || delta.tool_calls) out += this.takeText();
      if (reasoning && this.thinking) {
        if (this.open !== Block.Thinking) {
          out += this.openBlock(Block.Thinking, '{"type":"thinking","thinking":"","signature":""}');
          this.hmac = this.signer.begin();
        }
        this.hmac!.update(reasoning, 'utf8');
        out += `event: content_block_delta\ndata: {"type":"content_block_delta","index":${this.openIndex},"delta":{"type":"thinking_delta","thinking":${jsonString(reasoning)}}}\n\n`;
      }
      if (delta.content) out += this.pushContent(delta.content, false);
      if (delta.tool_calls) for (const tc of delta.tool_calls) out += this.toolFragment(tc);
    }
    if (choice.finish_reason) this.finish = choice.finish_reason;
    return out;
  }

  /** The upstream stream is complete ([DONE], or its end after a finish reason): close everything. */
  end(): string {
    if (this.done) return '';
    let out = this.started ? '' : this.start();
    out += this.closeBlock();
    const usage = this.currentUsage();
    const u = messagesUsage(usage);
    if (!usage) u.input_tokens = this.fallbackInputTokens;
    out += `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"${stopReason(this.finish, this.toolBlocks.length > 0)}","stop_sequence":null},"usage":${usageJson(u)}}\n\n`;
    out += 'event: message_stop\ndata: {"type":"message_stop"}\n\n';
    this.done = true;
    return out;
  }

  /** Ends the stream with an error event (backend failure, cut connection). */
  fail(type: MessagesErrorType, message: string): string {
    if (this.done) return '';
    const text = this.takeText();
    this.done = true;
    return text + sseError(type, message);
  }

  /** Whether the upstream has sent its finish reason (a stream cut after it is still complete). */
  get finished(): boolean {
    return this.finish !== undefined && this.finish !== null;
  }

  /**
   * message_start for a chunk without output, only once the backend reported the prompt's count:
   * SGLang's first chunk (the role) carries no usage, its content chunks do
   * (continuous_usage_stats), and the output comes in the same step, so waiting for it costs
   * nothing and gives message_start the exact input_tokens. A backend that never reports usage
   * early (llama.cpp) gets message_start with its first output, as before.
   */
  private startOnceCounted(): string {
    return this.currentUsage()?.prompt_tokens ? this.start() : '';
  }

  private start(): string {
    this.started = true;
    const usage = this.currentUsage();
    const u = messagesUsage(usage);
    if (!usage?.prompt_tokens) u.input_tokens = this.fallbackInputTokens;
    return `event: message_start\ndata: {"type":"message_start","message":{"id":"${messageId()}","type":"message","role":"assistant","model":${modelJson(this.model)},"content":[],"stop_reason":null,"stop_sequence":null,"usage":${usageJson(u)}}}\n\n`;
  }

  /** A text token's events: the text block's start when it is not open yet, then its delta. */
  private textDelta(text: string): string {
    if (this.open === Block.Text) return textDeltaEvent(this.openIndex, text);
    const start = this.openBlock(Block.Text, '{"type":"text","text":""}');
    return start + textDeltaEvent(this.openIndex, text);
  }

  private openBlock(kind: Block, contentBlock: string): string {
    const out = this.closeBlock();
    this.open = kind;
    this.openIndex = this.nextIndex++;
    return `${out}event: content_block_start\ndata: {"type":"content_block_start","index":${this.openIndex},"content_block":${contentBlock}}\n\n`;
  }

  private closeBlock(): string {
    if (this.open === Block.None) return '';
    let out = this.takeText();
    if (this.open === Block.Thinking) {
      const signature = this.hmac!.digest('base64');
      this.hmac = undefined;
      out = `event: content_block_delta\ndata: {"type":"content_block_delta","index":${this.openIndex},"delta":{"type":"signature_delta","signature":"${signature}"}}\n\n`;
    }
    out += `event: content_block_stop\ndata: {"type":"content_block_stop","index":${this.openIndex}}\n\n`;
    this.open = Block.None;
    this.openIndex = -1;
    return out;
  }

  private toolFragment(tc: ChatChunkToolCall): string {
    const k = tc.index ?? 0;
    const id = tc.id || undefined;
    let known = this.toolBlocks[k];
    let out = '';
    // A new call: an index not seen yet, or a new id on a seen index.
    if (!known || (id !== undefined && known.id !== undefined && id !== known.id)) {
      const name = tc.function?.name ?? '';
      out = this.openBlock(Block.Tool, `{"type":"tool_use","id":${JSON.stringify(id ?? randomId('toolu_'))},"name":${JSON.stringify(name)},"input":{}}`);
      known = { index: this.openIndex, id };
      this.toolBlocks[k] = known;
    }
    const args = tc.function?.arguments;
    if (args) {
      out += `event: content_block_delta\ndata: {"type":"content_block_delta","index":${known.index},"delta":{"type":"input_json_delta","partial_json":${jsonString(args)}}}\n\n`;
    }
    return out;
  }

  private backendError(chunk: ChatChunk): string {
    const e = chunk.error;
    const message = typeof e === 'string' ? e : (e?.message ?? chunk.message ?? 'The model backend failed');
    const code = Number(typeof e === 'object' ? e.code : chunk.code);
    return this.fail(Number.isInteger(code) && code >= 400 ? errorTypeForStatus(code) : 'api_error', message);
  }
}

/** Whether a chunk's choice carries something for the client (text, reasoning, a tool call, the finish). */
function carriesOutput(choice: NonNullable<ChatChunk['choices']>[number] | undefined): boolean {
  if (!choice) return false;
  const d = choice.delta;
  return !!(choice.finish_reason || d?.content || d?.reasoning_content || d?.reasoning || d?.tool_calls?.length);
}

// JSON.stringify of the model name (about 1k instructions a call) once per name in a row: the
// streams of one model follow each other.
let lastModel = '';
let lastModelJson = '""';
function modelJson(model: string): string {
  if (model !== lastModel) {
    lastModelJson = JSON.stringify(model);
    lastModel = model;
  }
  return lastModelJson;
}

// Message ids as randomId('msg_') makes them (12 random bytes, base64url), with the random bytes
// drawn from a pool filled 128 ids at a time: one randomFillSync per stream cost about 1 µs. The
// pool is encoded once when it is filled: 12 bytes are 16 base64 characters without padding, so
// each id's characters are a slice of the pool's text (a toString per id, a call into Node's C++,
// cost about 1k instructions under callgrind).
const ID_BYTES = 12;
const ID_CHARS = 16;
const IDS_PER_POOL = 128;
const idPool = Buffer.alloc(ID_BYTES * IDS_PER_POOL);
let idText = '';
let idOffset = 0;
function messageId(): string {
  if (idOffset >= idText.length) {
    randomFillSync(idPool);
    idText = idPool.toString('base64url');
    idOffset = 0;
  }
  const id = idText.slice(idOffset, idOffset + ID_CHARS);
  idOffset += ID_CHARS;
  return `msg_${id}`;
}

/**
 * JSON.stringify of a string. A token's text is a few characters that need no escape, and for
 * those a scan of the characters is several times cheaper than the JSON.stringify call; anything
 * to escape (quote, backslash, control character, surrogate) goes to JSON.stringify.
 */
export function jsonString(s: string): string {
  return needsNoEscape(s) ? `"${s}"` : JSON.stringify(s);
}

/** Whether JSON.stringify leaves `s` as it is between its quotes: no quote, backslash, control character or surrogate. */
function needsNoEscape(s: string): boolean {
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c === 0x22 || c === 0x5c || (c >= 0xd800 && c <= 0xdfff)) return false;
  }
  return true;
}

// A text token's content_block_delta event is the same text around the token for every token of a
// block: that text is built once per block index (for the first indices; a stream rarely has
// more) and the event is then two concatenations, not a template of five parts per token.
const TEXT_DELTA_HEADS_KEPT = 16;
const textDeltaHeads: string[] = [];
const TEXT_DELTA_TAIL = '"}}\n\n';

/** The text_delta event of block `index` up to and with the text's opening quote. */
function textDeltaHead(index: number): string {
  const kept = textDeltaHeads[index];
  if (kept !== undefined) return kept;
  const head = `event: content_block_delta\ndata: {"type":"content_block_delta","index":${index},"delta":{"type":"text_delta","text":"`;
  if (index < TEXT_DELTA_HEADS_KEPT) textDeltaHeads[index] = head;
  return head;
}

/** The text_delta event of `text` in block `index`, byte for byte as JSON.stringify would write its data. */
export function textDeltaEvent(index: number, text: string): string {
  const head = textDeltaHead(index);
  if (needsNoEscape(text)) return head + text + TEXT_DELTA_TAIL;
  // JSON.stringify's quotes replace the head's and the tail's.
  return `${head.slice(0, -1)}${JSON.stringify(text)}}}\n\n`;
}

function usageJson(u: { input_tokens: number; output_tokens: number; cache_creation_input_tokens: number; cache_read_input_tokens: number }): string {
  return `{"input_tokens":${u.input_tokens},"output_tokens":${u.output_tokens},"cache_creation_input_tokens":${u.cache_creation_input_tokens},"cache_read_input_tokens":${u.cache_read_input_tokens}}`;
}
