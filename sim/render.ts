// Chat completion bodies and stream chunks, in the words of the flavour the sim speaks as
// (sim/flavours/): this module only gathers what a flavour needs (ChatAnswer) and keeps the
// stream renderer's old face for the micro-benchmarks (bench/micro/sim.ts).
import { flavourOf, type ChatAnswer, type ToolChoiceKind } from './flavours/index.js';
import type { SimFlavour } from './options.js';
import type { Plan } from './plan.js';
import type { ChatRequest } from './request.js';

/** How a request chose its tool (no tools: `none`). */
export function toolChoiceKind(req: Pick<ChatRequest, 'tools' | 'tool_choice'>): ToolChoiceKind {
  if (!req.tools?.length) return 'none';
  const c = req.tool_choice ?? 'auto';
  return typeof c === 'object' ? 'named' : c;
}

/**
 * The SSE events of one streamed completion as the default flavour (current vLLM) writes them,
 * cached tokens reported: `role()` (sent with the head), `token(i)`, `tail()` (finish, usage,
 * [DONE]). For benchmarks; the server goes through Flavour.events.
 */
export class StreamRenderer {
  readonly tokens: number;
  private readonly events;

  constructor(
    id: string,
    created: number,
    modelJson: string,
    plan: Plan,
    promptTokens: number,
    includeUsage: boolean,
    continuousUsage: boolean,
    cachedTokens = 0,
    flavour: SimFlavour = 'vllm',
  ) {
    const answer: ChatAnswer = {
      id,
      created,
      modelJson,
      plan,
      promptTokens,
      cachedTokens,
      toolChoice: plan.tool ? 'auto' : 'none',
      reportCached: true,
      reasoningParser: plan.reasoning.length > 0,
      stream: true,
      includeUsage,
      continuousUsage,
      firstTokenMs: 0,
      tokenMs: 0,
    };
    this.events = flavourOf(flavour).events(answer);
    this.tokens = this.events.tokens;
  }

  role(): string {
    return this.events.head();
  }

  token(i: number): string {
    return this.events.token(i);
  }

  tail(): string {
    return this.events.tail();
  }
}
