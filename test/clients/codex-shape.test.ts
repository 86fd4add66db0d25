// A Codex-shaped /v1/responses exchange through the gateway (issue #28), with the official
// `openai` client: Codex CLI 0.169 (`wire_api = "responses"`) streams with `store: false`,
// `include: ["reasoning.encrypted_content"]`, `parallel_tool_calls: true`, seven function tools,
// the `multi_agent_v1` namespace tool and `{type: "web_search"}`. The sim (like vLLM) takes
// function tools only and answers 400 `tools.N.type` for anything else; the gateway flattens the
// namespace, leaves web_search out (x-rc-dropped-tools) and gives the model's call of a namespace
// function back as OpenAI writes it, `{type: "function_call", name, namespace}`.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import OpenAI from 'openai';
import type { ResponseInputItem, ResponseStreamEvent, Tool } from 'openai/resources/responses/responses';
import { modelEntrySchema } from '../../lib/config.js';
import { startFixture, type Fixture } from '../gateway/fixture.js';

let fx: Fixture;

before(async () => {
  fx = await startFixture({
    sims: [{ fast: true, reasoning: true }],
    models: (sims) => [modelEntrySchema.parse({ name: 'coder', upstreams: [sims[0]!.url], servedName: 'm', reasoning: true })],
  });
});
after(async () => {
  await fx?.close();
});

const params = (props: Record<string, unknown>, required: string[]) => ({ type: 'object', properties: props, required, additionalProperties: false });
const fn = (name: string, description: string, props: Record<string, unknown> = {}, required: string[] = []) => ({
  type: 'function' as const,
  name,
  description,
  strict: false,
  parameters: params(props, required),
});

/** Codex's default tools, in its order (shapes as it sends them). */
const CODEX_TOOLS = [
  fn('exec_command', 'Runs a command in a PTY', { cmd: { type: 'string' }, workdir: { type: 'string' } }, ['cmd']),
  fn('write_stdin', 'Writes characters to an exec session', { session_id: { type: 'number' }, chars: { type: 'string' } }, ['session_id']),
  fn('update_plan', 'Updates the task plan', { plan: { type: 'array', items: { type: 'object' } } }, ['plan']),
  fn('request_user_input', 'Asks the user', { question: { type: 'string' } }, ['question']),
  fn('apply_patch', 'Edits files with a patch', { input: { type: 'string' } }, ['input']),
  fn('view_image', 'Attaches a local image', { path: { type: 'string' } }, ['path']),
  fn('list_mcp_resources', 'Lists MCP resources', { server: { type: 'string' } }),
  {
    type: 'namespace' as const,
    name: 'multi_agent_v1',
    description: 'Sub-agents that work on part of the task in parallel.',
    tools: [
      fn('spawn_agent', 'Spawns a sub-agent', { message: { type: 'string' }, agent_type: { type: 'string' } }, ['message']),
      fn('wait_agent', 'Waits for sub-agents', { ids: { type: 'array', items: { type: 'string' } }, timeout_ms: { type: 'number' } }, ['ids']),
    ],
  },
  { type: 'web_search' as const, external_web_access: false },
] as unknown as Tool[];

const user = (text: string): ResponseInputItem => ({ type: 'message', role: 'user', content: [{ type: 'input_text', text }] });
const FIRST_TURN: ResponseInputItem[] = [
  {
    type: 'message',
    role: 'developer',
    content: [{ type: 'input_text', text: '<permissions instructions>sandbox: workspace-write</permissions instructions>' }],
  },
  // The sim calls the tool whose name the last user message mentions: the flat name the gateway offers.
  user('Explore the repository with a sub-agent: use multi_agent_v1__spawn_agent.'),
];

const codexRequest = (input: ResponseInputItem[]) => ({
  model: 'coder',
  instructions: 'You are Codex, a coding agent.',
  input,
  tools: CODEX_TOOLS,
  tool_choice: 'auto' as const,
  parallel_tool_calls: true,
  reasoning: { effort: 'medium' as const, summary: 'auto' as const },
  store: false,
  include: ['reasoning.encrypted_content' as const],
  prompt_cache_key: '0199e5a2-codex-session',
  stream: true as const,
});

async function drain(stream: AsyncIterable<ResponseStreamEvent>): Promise<ResponseStreamEvent[]> {
  const events: ResponseStreamEvent[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

test('a Codex turn streams; the namespace function is offered flat and its call comes back with its namespace; web_search is left out and named', async () => {
  const { data: stream, response } = await fx.client.responses.create(codexRequest(FIRST_TURN)).withResponse();
  const events = await drain(stream);
  assert.equal(response.headers.get('x-rc-dropped-tools'), 'web_search');
  assert.equal(events[0]!.type, 'response.created');
  assert.ok(
    events.some((e) => e.type === 'response.reasoning_text.delta'),
    'the model reasons',
  );
  const completed = events.at(-1)!;
  assert.equal(completed.type, 'response.completed');

  // What the backend got: function tools only, the namespace's as <namespace>__<name>, no web_search.
  const sent = fx.sims[0]!.stats.lastBody!;
  assert.deepEqual(
    (sent.tools as { type: string; name: string }[]).map((t) => `${t.type}:${t.name}`),
    [
      ...CODEX_TOOLS.slice(0, 7).map((t) => `function:${(t as { name: string }).name}`),
      'function:multi_agent_v1__spawn_agent',
      'function:multi_agent_v1__wait_agent',
    ],
  );
  assert.equal(sent.store, false);
  assert.deepEqual(sent.include, ['reasoning.encrypted_content']);
  assert.equal(sent.parallel_tool_calls, true);

  // The call, as OpenAI writes a namespace function's call, in every event that carries it.
  const added = events.find((e) => e.type === 'response.output_item.added' && e.item.type === 'function_call');
  const done = events.find((e) => e.type === 'response.output_item.done' && e.item.type === 'function_call');
  for (const e of [added, done]) {
    assert.ok(e && (e.type === 'response.output_item.added' || e.type === 'response.output_item.done') && e.item.type === 'function_call');
    assert.equal(e.item.name, 'spawn_agent');
    assert.equal(e.item.namespace, 'multi_agent_v1');
  }
  assert.ok(completed.type === 'response.completed');
  const call = completed.response.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call');
  assert.equal(call.name, 'spawn_agent');
  assert.equal(call.namespace, 'multi_agent_v1');
  assert.equal(typeof JSON.parse(call.arguments).message, 'string');
  // The response echoes the client's own tools, not the flattened list.
  assert.deepEqual(completed.response.tools, CODEX_TOOLS);

  // The tool round trip, as Codex sends it: the output items back (reasoning and the call with its
  // namespace), the call's output, and the user's next message.
  const reasoning = completed.response.output.filter((o) => o.type === 'reasoning');
  const second = await fx.client.responses
    .create(
      codexRequest([
        ...FIRST_TURN,
        ...(reasoning as ResponseInputItem[]),
        { type: 'function_call', call_id: call.call_id, name: call.name, namespace: call.namespace, arguments: call.arguments } as ResponseInputItem,
        { type: 'function_call_output', call_id: call.call_id, output: '{"agent_id":"agent-1","status":"spawned"}' },
        user('Thanks. Now summarize what you found.'),
      ]),
    )
    .withResponse();
  const events2 = await drain(second.data);
  const final = events2.at(-1)!;
  assert.ok(final.type === 'response.completed');
  const answer = final.response.output.find((o) => o.type === 'message');
  assert.ok(answer && answer.type === 'message' && answer.content.some((c) => c.type === 'output_text' && c.text.length > 0), 'a final answer');
  // The backend saw the call under the name the model called, without the namespace field.
  const sentInput = fx.sims[0]!.stats.lastBody!.input as Record<string, unknown>[];
  const sentCall = sentInput.find((i) => i.type === 'function_call')!;
  assert.equal(sentCall.name, 'multi_agent_v1__spawn_agent');
  assert.equal('namespace' in sentCall, false);
  assert.equal(second.response.headers.get('x-rc-dropped-tools'), 'web_search');
});

test('the same turn without streaming: the call has its namespace', async () => {
  const r = await fx.client.responses.create({ ...codexRequest(FIRST_TURN), stream: false });
  assert.equal(r.status, 'completed');
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call');
  assert.deepEqual([call.name, call.namespace], ['spawn_agent', 'multi_agent_v1']);
  assert.deepEqual(r.tools, CODEX_TOOLS);
});

test('a call of a plain function is untouched, even beside a namespace function of the same flat name', async () => {
  const tools = [fn('multi_agent_v1__spawn_agent', 'a plain function that happens to have the flat name'), ...CODEX_TOOLS.slice(7)] as unknown as Tool[];
  const r = await fx.client.responses.create({ model: 'coder', input: 'Call multi_agent_v1__spawn_agent please.', tools });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call && call.type === 'function_call');
  assert.equal(call.name, 'multi_agent_v1__spawn_agent');
  assert.equal(call.namespace, undefined);
  // The namespace function was offered under another name (made unique), and maps back exactly.
  const r2 = await fx.client.responses.create({ model: 'coder', input: 'Call multi_agent_v1__wait_agent please.', tools });
  const call2 = r2.output.find((o) => o.type === 'function_call');
  assert.ok(call2 && call2.type === 'function_call');
  assert.deepEqual([call2.name, call2.namespace], ['wait_agent', 'multi_agent_v1']);
});

test('an unknown tool type is a 400 naming the tool; previous_response_id is a 400 too', async () => {
  const tools = [...CODEX_TOOLS, { type: 'teleport', destination: 'mars' }] as unknown as Tool[];
  await assert.rejects(fx.client.responses.create({ model: 'coder', input: 'hi', tools }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, 'tools[9].type');
    assert.equal(e.code, 'invalid_tool');
    assert.equal(e.type, 'invalid_request_error');
    assert.match(e.message, /unknown tool type "teleport"/);
    return true;
  });
  await assert.rejects(fx.client.responses.create({ model: 'coder', input: 'hi', previous_response_id: 'resp_123' }), (e: unknown) => {
    assert.ok(e instanceof OpenAI.BadRequestError, String(e));
    assert.equal(e.param, 'previous_response_id');
    assert.equal(e.code, 'unsupported_parameter');
    return true;
  });
});
