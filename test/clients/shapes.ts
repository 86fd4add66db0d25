// Request shapes of real agentic clients, written from what they send (issue 15), used as
// fixtures by the gateway's client tests. Deterministic: the same call gives the same bytes.

/** The 24 tools Claude Code declares on its first request (names as the client sends them). */
export const CLAUDE_CODE_TOOLS = [
  'Task',
  'Bash',
  'Glob',
  'Grep',
  'ExitPlanMode',
  'Read',
  'Edit',
  'Write',
  'NotebookEdit',
  'WebFetch',
  'TodoWrite',
  'WebSearch',
  'BashOutput',
  'KillShell',
  'Skill',
  'SlashCommand',
  'AskUserQuestion',
  'EnterPlanMode',
  'LSP',
  'MultiEdit',
  'LS',
  'ListMcpResourcesTool',
  'ReadMcpResourceTool',
  'mcp__ide__getDiagnostics',
] as const;

const WORDS = ['the', 'agent', 'reads', 'files', 'before', 'editing', 'them', 'and', 'runs', 'tests', 'after', 'each', 'change', 'keeping', 'answers', 'short'];

/** About `n` words of prose (the sim's tokenizer counts about one token per word). */
export function prose(n: number, seed = 0): string {
  let s = '';
  for (let i = 0; i < n; i++) s += (i ? ' ' : '') + WORDS[(i * 7 + seed) % WORDS.length];
  return s;
}

function tool(name: string, i: number): Record<string, unknown> {
  return {
    name,
    description: `${name}: ${prose(120, i)}`,
    input_schema: {
      $schema: 'http://json-schema.org/draft-07/schema#',
      type: 'object',
      additionalProperties: false,
      properties: {
        command: { type: 'string', description: 'What to run or read' },
        timeout: { type: 'number', description: 'Optional timeout in milliseconds' },
        description: { type: 'string', description: 'Five to ten words saying what this does' },
      },
      required: ['command'],
    },
  };
}

export interface ClaudeCodeShapeOptions {
  model: string;
  /** Words of filler in the third system block: sets the prompt's size. Default 200. */
  systemWords?: number;
  /** The user's prompt. */
  prompt?: string;
  stream?: boolean;
  maxTokens?: number;
}

/**
 * Claude Code's first request (`claude -p`, default settings): thinking adaptive, effort high,
 * max_tokens 32000, 24 tools, three system blocks with cache_control, a system message in the
 * middle of `messages`, context_management, metadata.user_id as a JSON string, stream.
 * It is posted to `<base>/v1/messages?beta=true` with CLAUDE_CODE_HEADERS.
 */
export function claudeCodeFirstRequest(o: ClaudeCodeShapeOptions): Record<string, unknown> {
  const cache = { type: 'ephemeral' };
  return {
    model: o.model,
    max_tokens: o.maxTokens ?? 32000,
    thinking: { type: 'adaptive' },
    output_config: { effort: 'high' },
    system: [
      { type: 'text', text: 'x-anthropic-billing-header: cc_version=2.0.50; cc_entrypoint=sdk-cli' },
      { type: 'text', text: "You are Claude Code, Anthropic's official CLI for Claude.", cache_control: cache },
      { type: 'text', text: prose(o.systemWords ?? 200, 3), cache_control: cache },
    ],
    messages: [
      { role: 'user', content: [{ type: 'text', text: `<system-reminder>\n${prose(40, 5)}\n</system-reminder>` }] },
      { role: 'system', content: 'The working directory is /tmp/project. Today is 2026-11-22.' },
      { role: 'user', content: [{ type: 'text', text: o.prompt ?? 'Say hello in one short sentence.', cache_control: cache }] },
    ],
    tools: CLAUDE_CODE_TOOLS.map(tool).map((t, i) => (i === CLAUDE_CODE_TOOLS.length - 1 ? { ...t, cache_control: cache } : t)),
    context_management: { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
    metadata: { user_id: JSON.stringify({ device_id: 'a'.repeat(64), account_uuid: '', session_id: '0b7d2c2e-55f4-4f0a-9c8e-2f8d7c1e9a11' }) },
    stream: o.stream ?? true,
  };
}

/** The headers Claude Code sends besides the key. */
export const CLAUDE_CODE_HEADERS: Record<string, string> = {
  'anthropic-version': '2023-06-01',
  'anthropic-beta': 'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,fine-grained-tool-streaming-2025-05-14',
  'anthropic-dangerous-direct-browser-access': 'true',
  'x-app': 'cli',
  'user-agent': 'claude-cli/2.0.50 (external, sdk-cli)',
  'x-stainless-lang': 'js',
};

/** The Vercel AI SDK's anthropic provider (`streamText` with a tool). */
export function vercelAiSdkRequest(model: string): Record<string, unknown> {
  return {
    model,
    max_tokens: 4096,
    system: [{ type: 'text', text: 'You are a helpful assistant.' }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'What is the weather in Paris?' }] }],
    tools: [
      {
        name: 'weather',
        description: 'Weather in a city',
        input_schema: {
          type: 'object',
          properties: { city: { type: 'string' } },
          required: ['city'],
          additionalProperties: false,
          $schema: 'http://json-schema.org/draft-07/schema#',
        },
      },
    ],
    tool_choice: { type: 'auto' },
    stream: true,
  };
}

/** LangChain's ChatAnthropic (`.stream()` with bound tools). */
export function langchainRequest(model: string): Record<string, unknown> {
  return {
    model,
    max_tokens: 2048,
    messages: [{ role: 'user', content: 'Tell me a short joke.' }],
    temperature: 0.7,
    tools: [
      {
        name: 'calculator',
        description: 'Evaluates arithmetic',
        input_schema: { type: 'object', properties: { expression: { type: 'string' } }, required: ['expression'] },
      },
    ],
    stream: true,
  };
}

/** Top-level fields the messages protocol has (or clients add) that the gateway does not use. */
export const UNUSED_TOP_LEVEL_FIELDS: Record<string, unknown> = {
  context_management: { edits: [{ type: 'clear_tool_uses_20250919' }] },
  container: null,
  mcp_servers: [],
  service_tier: 'auto',
  inference_geo: 'us',
  speed: 'standard',
  some_future_field: { anything: [1, 2, 3] },
};
