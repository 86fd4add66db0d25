// What the sim accepts, validated with zod, and the errors for what it refuses (their bodies
// are the flavour's: sim/flavours/). Unknown request fields are ignored (as vLLM does, with a
// warning we do not print).
import { z } from 'zod';
import { MAX_JSON_DEPTH } from '../lib/http.js';

/** An error answer in a server's own words: status and body (each flavour writes its own). */
export interface ErrorAnswer {
  status: number;
  body: string;
}

/**
 * A request the sim refuses, with its HTTP status; the body is the flavour's (Flavour.error), or
 * `answer` where the server words this refusal its own way (the context window errors).
 */
export class SimRequestError extends Error {
  readonly code = 'RC_ERR_SIM_BAD_REQUEST';
  constructor(
    readonly status: number,
    message: string,
    readonly param: string | null = null,
    readonly answer?: ErrorAnswer,
  ) {
    super(message);
  }
}

/** The 400 for a body that is not a JSON object (or nests too deep to be read safely). */
export const NOT_AN_OBJECT = `Request body is not a valid JSON object (nesting at most ${MAX_JSON_DEPTH} levels)`;

/** vLLM's 404 for a request naming a model other than the served one (no name: the served one). */
export const unknownModel = (served: string, name: string | null | undefined): SimRequestError | undefined =>
  name != null && name !== served ? new SimRequestError(404, `The model \`${name}\` does not exist.`, 'model') : undefined;

const textPart = z.looseObject({ type: z.string(), text: z.string().optional() });
const content = z.union([z.string(), z.array(textPart)]).nullish();
const toolCall = z.looseObject({
  id: z.string().optional(),
  type: z.string().optional(),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

export const messageSchema = z.looseObject({
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool']),
  content,
  name: z.string().optional(),
  tool_calls: z.array(toolCall).nullish(),
  tool_call_id: z.string().optional(),
});

export const toolSchema = z.looseObject({
  type: z.literal('function').default('function'),
  function: z.looseObject({
    name: z.string().min(1).max(256),
    description: z
      .string()
      .nullish()
      .transform((v) => v ?? undefined),
    parameters: z.record(z.string(), z.unknown()).optional(),
    strict: z.boolean().nullish(),
  }),
});

const toolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) }),
]);

export const EFFORTS = ['none', 'minimal', 'low', 'medium', 'high', 'xhigh'] as const;
export type Effort = (typeof EFFORTS)[number];

const maxTokens = z.number().int().min(1).nullish();

export const chatRequestSchema = z.looseObject({
  model: z.string().nullish(),
  messages: z.array(messageSchema).min(1),
  stream: z.boolean().nullish(),
  stream_options: z
    .looseObject({
      include_usage: z.boolean().nullish(),
      continuous_usage_stats: z.boolean().nullish(),
    })
    .nullish(),
  max_tokens: maxTokens,
  max_completion_tokens: maxTokens,
  min_tokens: z.number().int().min(0).nullish(),
  ignore_eos: z.boolean().nullish(),
  seed: z.number().int().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  n: z.number().int().nullish(),
  stop: z.union([z.string(), z.array(z.string())]).nullish(),
  user: z.string().nullish(),
  tools: z.array(toolSchema).nullish(),
  tool_choice: toolChoice.nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  reasoning_effort: z.enum(EFFORTS).nullish(),
  chat_template_kwargs: z.looseObject({ enable_thinking: z.boolean().optional() }).nullish(),
});
export type ChatRequest = z.output<typeof chatRequestSchema>;

/** /tokenize with `messages` (rendered with the chat template). */
export const tokenizeChatSchema = z.looseObject({
  model: z.string().nullish(),
  messages: z.array(messageSchema),
  tools: z.array(toolSchema).nullish(),
  add_generation_prompt: z.boolean().default(true),
  return_token_strs: z.boolean().nullish(),
});
/** /tokenize with a plain `prompt`. */
export const tokenizePromptSchema = z.looseObject({
  model: z.string().nullish(),
  prompt: z.string(),
  add_special_tokens: z.boolean().default(true),
  return_token_strs: z.boolean().nullish(),
});

/** Parses `body` with `schema`, or throws a 400 SimRequestError naming the first bad field. */
export function validate<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const r = schema.safeParse(body);
  if (r.success) return r.data;
  const issue = deepestIssue(r.error.issues);
  const path = issue.path.map(String).join('.');
  throw new SimRequestError(400, `${path || 'body'}: ${issue.message}`, path || null);
}

// For unions zod reports "invalid input" at the union; the nested issue is clearer.
function deepestIssue(issues: z.core.$ZodIssue[]): z.core.$ZodIssue {
  const first = issues[0]!;
  if (first.code === 'invalid_union' && first.errors.length) {
    const nested = first.errors.map((errs) => errs[0]).filter((e): e is z.core.$ZodIssue => !!e);
    const best = nested.find((e) => e.code !== 'invalid_type' || e.path.length > 0) ?? nested[0];
    if (best) return { ...best, path: [...first.path, ...best.path] };
  }
  return first;
}

/** Checks what the schema cannot: request-level rules vLLM enforces (throws SimRequestError). */
export function checkChatRequest(req: ChatRequest): void {
  if (req.n != null && req.n !== 1) throw new SimRequestError(400, 'n: the sim generates exactly one choice (n must be 1)', 'n');
  if (req.stream_options && !req.stream) throw new SimRequestError(400, 'Stream options can only be defined when `stream=True`.', 'stream_options');
  if (req.tool_choice != null && req.tool_choice !== 'none' && !req.tools?.length) {
    throw new SimRequestError(400, 'When using `tool_choice`, `tools` must be set.', 'tool_choice');
  }
  if (
    typeof req.tool_choice === 'object' &&
    req.tool_choice &&
    !req.tools?.some((t) => t.function.name === (req.tool_choice as { function: { name: string } }).function.name)
  ) {
    throw new SimRequestError(400, `Tool choice function name '${req.tool_choice.function.name}' not found in tools`, 'tool_choice');
  }
  const max = req.max_completion_tokens ?? req.max_tokens;
  if (req.min_tokens != null && max != null && req.min_tokens > max) {
    throw new SimRequestError(400, `min_tokens must be less than or equal to max_tokens=${max}, got ${req.min_tokens}.`, 'min_tokens');
  }
}
