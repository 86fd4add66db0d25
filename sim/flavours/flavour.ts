// What differs between the servers the sim speaks as (vLLM's eras, SGLang's, llama.cpp): the
// format decisions, one module per family (vllm.ts, sglang.ts, llama-cpp.ts), behind this one
// interface, so that the routes, the stream and the engine stay the same for all of them.
// sim/README.md "Flavours" has the table of what differs and the source each row was read from.
import type { Plan } from '../plan.js';
import type { SimFlavour } from '../options.js';
import type { ErrorAnswer } from '../request.js';

export type { ErrorAnswer };

/** How the request chose its tool: `none` also stands for "no tools". */
export type ToolChoiceKind = 'none' | 'auto' | 'required' | 'named';

/** Everything a flavour needs to write one chat completion, whole or streamed. */
export interface ChatAnswer {
  id: string;
  /** Unix seconds. */
  created: number;
  /** The `model` field, as JSON (each server decides what it echoes: `modelFor`). */
  modelJson: string;
  plan: Plan;
  promptTokens: number;
  /** Prompt tokens served from the prefix cache. */
  cachedTokens: number;
  toolChoice: ToolChoiceKind;
  /** The server's cached-token report is on (vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report). */
  reportCached: boolean;
  /** The served model reasons (vLLM: a --reasoning-parser is configured). */
  reasoningParser: boolean;
  stream: boolean;
  includeUsage: boolean;
  continuousUsage: boolean;
  /** The pace, for the timings llama.cpp reports: ms to the first token, ms per token after it. */
  firstTokenMs: number;
  tokenMs: number;
}

/** The events of one streamed chat completion. */
export interface ChatEvents {
  /** Token events (one per planned token). */
  readonly tokens: number;
  /** Sent with the response head, before any token ('' for a server that sends nothing before its first token). */
  head(): string;
  /** The event(s) carrying token `i` (0-based). */
  token(i: number): string;
  /** Everything after the last token: the finish chunk, the usage chunk when asked for, `data: [DONE]`. */
  tail(): string;
}

/** A request the server refuses for its context window, in the server's words. */
export interface ContextRefusal {
  /** The prompt alone fills the window. */
  promptTooLong(promptTokens: number, maxModelLen: number): ErrorAnswer;
  /** max_tokens exceeds the room left; undefined: the server does not refuse, it generates until the window is full. */
  maxTokensTooLarge(maxTokens: number, promptTokens: number, maxModelLen: number): ErrorAnswer | undefined;
}

export interface Flavour extends ContextRefusal {
  readonly name: SimFlavour;
  /** TCP_NODELAY on the server's sockets by default. */
  readonly noDelay: boolean;
  /** GET /metrics answers by default (vLLM: always; SGLang: --enable-metrics; llama.cpp: --metrics). */
  readonly metricsByDefault: boolean;
  /** A stream's response head goes out with its first token, not when it starts running (llama.cpp). */
  readonly headWithFirstToken: boolean;
  /** The connection is closed after a stream (llama.cpp). */
  readonly closeAfterStream: boolean;
  /** Extra headers on a streamed answer. */
  readonly streamHeaders: readonly (readonly [string, string])[];
  /** The served model is checked against the request's `model` (404 otherwise). */
  readonly checksModel: boolean;
  /** A new completion id. */
  completionId(): string;
  /** The `model` field this server echoes for a request naming `requested` (JSON-encoded). */
  modelFor(served: string, requested: string | null | undefined): string;
  /** The non-stream body. */
  body(a: ChatAnswer): string;
  /** The stream's events. */
  events(a: ChatAnswer): ChatEvents;
  /** An error body for `status` with `message` (`param`: the offending field, where the server names one). */
  error(status: number, message: string, param?: string | null): ErrorAnswer;
  /** What a stream carries when generation fails part way: the error event and what follows it. */
  streamError(status: number, message: string): string;
  /** GET /v1/models. */
  models(served: string, maxModelLen: number, created: number): string;
  /** GET /health's body ('' for an empty 200). */
  readonly healthBody: string;
}

/** JSON string of a string (for splicing into hand-built chunks). */
export const q = (s: string): string => JSON.stringify(s);
