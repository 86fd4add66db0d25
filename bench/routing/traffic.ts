// Agent-shaped traffic for the routing benchmark (issue 31): conversations that share one long
// system-and-tools prefix (a coding agent's: about 12k tokens) and grow turn by turn, half sent
// through chat completions without a user id, half through the messages protocol with one; and a
// burst of requests that share one hot prefix. Every text is made of 8-letter words, which the
// sim's tokenizer counts as one token each (sim/tokenizer.ts), so sizes are exact in sim tokens.

export const MODEL = 'routing-bench';

/** The shape of the traffic; `routingTraffic()` gives the defaults. */
export interface TrafficShape {
  conversations: number;
  turns: number;
  /** Tokens of the shared system prompt (the tools add a few hundred more). */
  prefixTokens: number;
  /**
   * Tokens of each user turn and of each assistant reply kept in the history: an agent's turn is
   * a tool result (a file excerpt, a command's output) and a short reply with the next call.
   */
  userTokens: number;
  replyTokens: number;
  /** Requests of the hot-prefix burst, sent at once. */
  burst: number;
}

export const routingTraffic = (o: Partial<TrafficShape> = {}): TrafficShape => ({
  conversations: 64,
  turns: 10,
  prefixTokens: 12_000,
  userTokens: 400,
  replyTokens: 150,
  burst: 64,
  ...o,
});

/** `n` words of 8 letters from `seed`: deterministic, distinct per seed. */
export function words(seed: number, n: number): string {
  const out: string[] = [];
  let x = (seed * 2654435761) >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    let w = '';
    for (let k = 0; k < 8; k++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      w += String.fromCharCode(97 + ((x >>> 0) % 26));
    }
    out.push(w);
  }
  return out.join(' ');
}

/** Four tools of an agent, in chat-completions form. */
const TOOLS = ['read_file', 'write_file', 'run_command', 'search_code'].map((name, i) => ({
  name,
  description: words(9000 + i, 40),
  parameters: { type: 'object', properties: { path: { type: 'string', description: words(9100 + i, 12) } }, required: ['path'] },
}));

export interface Turn {
  role: 'user' | 'assistant';
  text: string;
}

/** One conversation: its protocol, its user id (messages only) and its history so far. */
export class Conversation {
  readonly history: Turn[] = [];
  constructor(
    readonly id: number,
    readonly protocol: 'chat' | 'messages',
    readonly system: string,
    private readonly shape: TrafficShape,
  ) {}

  get userId(): string | undefined {
    return this.protocol === 'messages' ? `user-${this.id}` : undefined;
  }

  /** Adds the next user turn (after the previous reply, when there was one). */
  nextTurn(turn: number): void {
    if (turn > 0) this.history.push({ role: 'assistant', text: words(this.id * 1000 + turn * 2 + 1, this.shape.replyTokens) });
    this.history.push({ role: 'user', text: words(this.id * 1000 + turn * 2, this.shape.userTokens) });
  }

  /** The chat-completions body of the current turn (also the oracle's and the probe's form). */
  chatBody(stream = true): Record<string, unknown> {
    return {
      model: MODEL,
      stream,
      max_tokens: this.shape.replyTokens,
      ignore_eos: true,
      tools: TOOLS.map((t) => ({ type: 'function', function: t })),
      messages: [{ role: 'system', content: this.system }, ...this.history.map((t) => ({ role: t.role, content: t.text }))],
    };
  }

  /** The messages-protocol body of the current turn, with `metadata.user_id`. */
  messagesBody(): Record<string, unknown> {
    return {
      model: MODEL,
      stream: true,
      max_tokens: this.shape.replyTokens,
      system: this.system,
      tools: TOOLS.map((t) => ({ name: t.name, description: t.description, input_schema: t.parameters })),
      metadata: { user_id: this.userId },
      messages: this.history.map((t) => ({ role: t.role, content: t.text })),
    };
  }
}

/** The conversations of a run: all share one system prompt; even ids speak chat, odd ones messages. */
export function conversations(shape: TrafficShape): Conversation[] {
  const system = words(1, shape.prefixTokens);
  return Array.from({ length: shape.conversations }, (_, i) => new Conversation(i, i % 2 === 0 ? 'chat' : 'messages', system, shape));
}

/** The hot-prefix burst: one new system prompt, each request with a user turn of its own (chat, no user id). */
export function burst(shape: TrafficShape): Conversation[] {
  const system = words(2, shape.prefixTokens);
  return Array.from({ length: shape.burst }, (_, i) => {
    const c = new Conversation(100_000 + i, 'chat', system, shape);
    c.nextTurn(0);
    return c;
  });
}
