// A chat-completions request's prompt as the backend's /tokenize takes it. The one builder for
// every count of a chat-shaped prompt: fitting and the gate's count on chat completions and on
// /v1/messages (after translation), and count_tokens, so each counts exactly what the backend
// renders (/v1/responses renders its input into chat messages first: responses/prompt.ts).

/** What /tokenize takes: the chat request's prompt part. */
export interface PromptParts {
  model: string;
  messages: unknown[];
  tools?: unknown[] | undefined;
  chat_template_kwargs?: Record<string, unknown> | undefined;
}

/** The fields of a chat-completions body (a parsed client body, or a translated request) the prompt is made of. */
export interface ChatPromptSource {
  model?: unknown;
  messages?: unknown;
  tools?: unknown;
  chat_template_kwargs?: unknown;
}

/**
 * The prompt of a chat request (the served name already in `model`); undefined when it has no
 * messages to count. Absent tools and template arguments stay out of the JSON sent.
 */
export function chatPrompt(o: ChatPromptSource): PromptParts | undefined {
  if (!Array.isArray(o.messages)) return undefined;
  const kwargs = o.chat_template_kwargs;
  return {
    model: o.model as string,
    messages: o.messages,
    tools: Array.isArray(o.tools) ? o.tools : undefined,
    chat_template_kwargs: kwargs !== null && typeof kwargs === 'object' ? (kwargs as Record<string, unknown>) : undefined,
  };
}
