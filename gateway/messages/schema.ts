// The messages request, validated with zod. Unknown fields are stripped (clients send fields we
// do not use, such as cache_control); a field we use with a bad value is a 400 naming it.
import { z } from 'zod';

const text = z.object({ type: z.literal('text'), text: z.string() });

const imageSource = z.discriminatedUnion('type', [
  z.object({ type: z.literal('base64'), media_type: z.string().min(1), data: z.string().min(1) }),
  z.object({ type: z.literal('url'), url: z.string().min(1) }),
]);
const image = z.object({ type: z.literal('image'), source: imageSource });

const toolUse = z.object({
  type: z.literal('tool_use'),
  id: z.string().min(1),
  name: z.string().min(1),
  input: z.record(z.string(), z.unknown()),
});

const toolResult = z.object({
  type: z.literal('tool_result'),
  tool_use_id: z.string().min(1),
  content: z.union([z.string(), z.array(z.discriminatedUnion('type', [text, image]))]).optional(),
  is_error: z.boolean().optional(),
});

const thinking = z.object({ type: z.literal('thinking'), thinking: z.string(), signature: z.string() });

/** Every content block type we accept; any other type is a 400 that names it. */
const contentBlock = z.discriminatedUnion('type', [text, image, toolUse, toolResult, thinking]);
export type ContentBlock = z.output<typeof contentBlock>;
export type ImageBlock = z.output<typeof image>;

const message = z.object({
  role: z.enum(['user', 'assistant', 'system']),
  content: z.union([z.string(), z.array(contentBlock)]),
});
export type InputMessage = z.output<typeof message>;

const tool = z.object({
  type: z.literal('custom').optional(),
  name: z.string().min(1).max(128),
  description: z.string().optional(),
  input_schema: z.record(z.string(), z.unknown()),
});

const toolChoice = z.discriminatedUnion('type', [
  z.object({ type: z.literal('auto'), disable_parallel_tool_use: z.boolean().optional() }),
  z.object({ type: z.literal('any'), disable_parallel_tool_use: z.boolean().optional() }),
  z.object({ type: z.literal('tool'), name: z.string().min(1), disable_parallel_tool_use: z.boolean().optional() }),
  z.object({ type: z.literal('none') }),
]);

const thinkingConfig = z.discriminatedUnion('type', [
  z.object({ type: z.literal('enabled'), budget_tokens: z.number().optional() }),
  z.object({ type: z.literal('adaptive'), display: z.enum(['summarized', 'omitted']).nullish() }),
  z.object({ type: z.literal('disabled') }),
]);

const fields = {
  model: z.string().min(1).max(256),
  messages: z.array(message).min(1),
  system: z.union([z.string(), z.array(text)]).optional(),
  temperature: z.number().min(0, 'must be between 0 and 1').max(1, 'must be between 0 and 1').optional(),
  top_p: z.number().min(0, 'must be between 0 and 1').max(1, 'must be between 0 and 1').optional(),
  top_k: z.number().int().min(0).optional(),
  stop_sequences: z.array(z.string()).optional(),
  stream: z.boolean().optional(),
  tools: z.array(tool).optional(),
  tool_choice: toolChoice.optional(),
  thinking: thinkingConfig.optional(),
  output_config: z.object({ effort: z.string().min(1).nullish() }).optional(),
  // Any string: Claude Code sends a JSON document as a string; it is only a sticky-routing key.
  metadata: z.object({ user_id: z.string().nullish() }).optional(),
};

/** POST /v1/messages */
export const messagesRequestSchema = z.object({ ...fields, max_tokens: z.number().int().min(1) });
/** POST /v1/messages/count_tokens: the same body; max_tokens may be left out. */
export const countTokensRequestSchema = z.object({ ...fields, max_tokens: z.number().int().min(1).optional() });

export type MessagesRequest = z.output<typeof countTokensRequestSchema>;

/** One readable line for a failed parse: the path of the first problem and what is wrong. */
export function describeIssue(error: z.ZodError, input: unknown): string {
  return describe(error.issues[0]!, [], input);
}

type Issue = z.core.$ZodIssue;

function describe(issue: Issue, base: PropertyKey[], input: unknown): string {
  const path = [...base, ...issue.path];
  if (issue.code === 'invalid_union') {
    if ('note' in issue && issue.note === 'No matching discriminator') {
      const value = valueAt(input, path);
      const what = path.includes('content') ? 'content block type' : `${String(path.find((p) => typeof p === 'string') ?? '')} type`.trim();
      return `${where(path.slice(0, -1))}unsupported ${what} ${JSON.stringify(value)}`;
    }
    // string-or-array unions: report the branch that matches the kind of value given.
    const branches = issue.errors;
    const matching = branches.find((b) => !(b.length === 1 && b[0]!.code === 'invalid_type' && b[0]!.path.length === 0));
    if (matching && matching[0]) return describe(matching[0], path, input);
  }
  return `${where(path)}${issue.message}`;
}

function where(path: PropertyKey[]): string {
  return path.length ? `${path.map(String).join('.')}: ` : '';
}

function valueAt(input: unknown, path: PropertyKey[]): unknown {
  let v = input;
  for (const p of path) {
    if (v === null || typeof v !== 'object') return undefined;
    v = (v as Record<PropertyKey, unknown>)[p];
  }
  return v;
}
