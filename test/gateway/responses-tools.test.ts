// The tools of a /v1/responses request (gateway/responses/tools.ts) and the way back of namespace
// calls (gateway/responses/namespace-relay.ts), without a server: flat names that cannot collide
// and map back exactly, tools left out by type, 400s with the tool's path, input calls renamed,
// and a stream rewritten the same however the backend's reads cut it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { GatewayError } from '../../gateway/errors.js';
import type { ChatRelay } from '../../gateway/chat/relay.js';
import { NamespaceRelay, NamespaceRestorer } from '../../gateway/responses/namespace-relay.js';
import { prepareResponsesBody, withDroppedTools } from '../../gateway/responses/request.js';
import { planTools, UniqueNames, type ToolPlan } from '../../gateway/responses/tools.js';
import type { HeaderLines } from '../../lib/relay/http-pool.js';

const fn = (name: string, description = `does ${name}`) => ({ type: 'function', name, description, parameters: { type: 'object', properties: {} } });
const ns = (name: string, ...tools: unknown[]) => ({ type: 'namespace', name, description: `the ${name} tools`, tools });

function plan(o: Record<string, unknown>): ToolPlan {
  const p = planTools(o);
  assert.ok(!(p instanceof GatewayError), p instanceof GatewayError ? p.message : '');
  return p;
}

test('function tools only: nothing changes', () => {
  const tools = [fn('a'), fn('b')];
  const o = { tools, input: [{ role: 'user', content: 'hi' }] };
  const p = plan(o);
  assert.deepEqual(p, { changed: false, dropped: [], names: undefined });
  assert.equal(o.tools, tools);
});

test('a namespace becomes one function per function, <namespace>__<name>, its description first', () => {
  const o: Record<string, unknown> = {
    tools: [fn('shell'), ns('multi_agent_v1', fn('spawn_agent'), fn('wait_agent')), { type: 'web_search', external_web_access: false }],
  };
  const p = plan(o);
  assert.equal(p.changed, true);
  assert.deepEqual(p.dropped, ['web_search']);
  assert.deepEqual(
    (o.tools as { name: string }[]).map((t) => t.name),
    ['shell', 'multi_agent_v1__spawn_agent', 'multi_agent_v1__wait_agent'],
  );
  assert.equal((o.tools as { description: string }[])[1]!.description, 'the multi_agent_v1 tools\n\ndoes spawn_agent');
  assert.deepEqual(
    [...p.names!.byFlat],
    [
      ['multi_agent_v1__spawn_agent', { namespace: 'multi_agent_v1', name: 'spawn_agent' }],
      ['multi_agent_v1__wait_agent', { namespace: 'multi_agent_v1', name: 'wait_agent' }],
    ],
  );
  assert.equal(withDroppedTools({ a: '1' }, p)['x-rc-dropped-tools'], 'web_search');
});

test('flat names never collide: with a plain function, with each other, with odd characters', () => {
  const o: Record<string, unknown> = {
    tools: [
      ns('a', fn('b')), // a__b, but a plain function has that name (listed later)
      fn('a__b'),
      ns('a_', fn('b')), // a___b
      ns('a', fn('_b')), // a___b again
      ns('x.y', fn('z w')), // characters a name cannot have become _
      ns('x_y', fn('z_w')),
    ],
  };
  const p = plan(o);
  const names = (o.tools as { name: string }[]).map((t) => t.name);
  assert.deepEqual(names, ['a__b_2', 'a__b', 'a___b', 'a___b_2', 'x_y__z_w', 'x_y__z_w_2']);
  assert.equal(new Set(names).size, names.length);
  assert.deepEqual(Object.fromEntries(p.names!.byFlat), {
    a__b_2: { namespace: 'a', name: 'b' },
    a___b: { namespace: 'a_', name: 'b' },
    a___b_2: { namespace: 'a', name: '_b' },
    x_y__z_w: { namespace: 'x.y', name: 'z w' },
    x_y__z_w_2: { namespace: 'x_y', name: 'z_w' },
  });
});

test('20,000 functions of one name in one namespace: distinct flat names, made in a number of tries linear in their count', () => {
  const N = 20_000;
  const functions = Array.from({ length: N }, () => fn('f'));
  // Plain functions already hold some of the names the suffixes would give.
  const o: Record<string, unknown> = { tools: [fn('n__f_3'), fn('n__f_7'), ns('n', ...functions)] };
  const p = plan(o);
  const names = (o.tools as { name: string }[]).map((t) => t.name);
  assert.equal(names.length, N + 2);
  assert.equal(new Set(names).size, N + 2, 'every name distinct');
  assert.deepEqual(names.slice(0, 6), ['n__f_3', 'n__f_7', 'n__f', 'n__f_2', 'n__f_4', 'n__f_5']);
  assert.equal(names.at(-1), `n__f_${N + 2}`);
  assert.equal(p.names!.byFlat.size, N);

  // The count of tries: one per name plus one per name already taken (the old search tried
  // `_2`, `_3`... again for every function: N²/2, 200 million here).
  const u = new UniqueNames();
  u.reserve('g_3');
  for (let i = 0; i < N; i++) u.take('g');
  for (let i = 0; i < N; i++) u.take(`g_${i}`); // bases that are earlier names: each collides at most once more
  assert.equal(u.size, 2 * N + 1);
  assert.ok(u.probes <= 2 * N + 2 * (N + 1), `${u.probes} tries for ${2 * N} names`);
});

test('every known non-function type is left out and named once; a custom tool in a namespace too', () => {
  const hosted = ['web_search', 'web_search_preview', 'file_search', 'code_interpreter', 'computer_use_preview', 'image_generation', 'mcp', 'local_shell'];
  const o: Record<string, unknown> = {
    tools: [fn('f'), ...hosted.map((type) => ({ type })), { type: 'web_search' }, ns('n', fn('g'), { type: 'custom', name: 'patch' })],
  };
  const p = plan(o);
  assert.deepEqual(p.dropped, [...hosted, 'custom']);
  assert.deepEqual(
    (o.tools as { name: string }[]).map((t) => t.name),
    ['f', 'n__g'],
  );
  assert.equal(withDroppedTools({}, p)['x-rc-dropped-tools'], `${hosted.join(', ')}, custom`);
});

test('bad tools are 400 invalid_tool with the path as param', () => {
  const cases: [unknown, string][] = [
    [{ tools: [fn('a'), { type: 'teleport' }] }, 'tools[1].type'],
    [{ tools: 'web_search' }, 'tools'],
    [{ tools: [null] }, 'tools[0]'],
    [{ tools: [{ name: 'x' }] }, 'tools[0].type'],
    [{ tools: [{ type: 'namespace', tools: [] }] }, 'tools[0].name'],
    [{ tools: [{ type: 'namespace', name: 'n' }] }, 'tools[0].tools'],
    [{ tools: [ns('n', fn('a'), { type: 'web_search' })] }, 'tools[0].tools[1].type'],
    [{ tools: [ns('n', { type: 'function' })] }, 'tools[0].tools[0].name'],
    [{ tools: [fn('a'), { type: 'web_search' }], tool_choice: { type: 'web_search_preview' } }, 'tool_choice.type'],
  ];
  for (const [o, param] of cases) {
    const e = planTools(o as Record<string, unknown>);
    assert.ok(e instanceof GatewayError, JSON.stringify(o));
    assert.equal(e.status, 400);
    assert.equal(e.publicCode, 'invalid_tool');
    assert.equal(e.param, param, JSON.stringify(o));
    assert.equal(e.type, 'invalid_request_error');
  }
  const unknown = planTools({ tools: [{ type: 'teleport' }] }) as GatewayError;
  assert.match(unknown.message, /tools\[0\]\.type: unknown tool type "teleport"/);
});

test('previous_response_id and conversation are 400 unsupported_parameter', () => {
  for (const field of ['previous_response_id', 'conversation']) {
    const e = prepareResponsesBody({ input: 'x', [field]: 'resp_1' });
    assert.ok(e instanceof GatewayError);
    assert.equal(e.status, 400);
    assert.equal(e.publicCode, 'unsupported_parameter');
    assert.equal(e.param, field);
  }
  assert.ok(!(prepareResponsesBody({ input: 'x', previous_response_id: null, store: false }) instanceof GatewayError));
});

test('calls sent back with a namespace get the flat name the model called, and lose the field', () => {
  const call = { type: 'function_call', call_id: 'c1', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{}' };
  const other = { type: 'function_call', call_id: 'c2', name: 'shell', arguments: '{}' };
  const o: Record<string, unknown> = {
    tools: [fn('multi_agent_v1__spawn_agent'), ns('multi_agent_v1', fn('spawn_agent'))],
    input: [{ role: 'user', content: 'go' }, call, other, { type: 'function_call_output', call_id: 'c1', output: 'ok' }],
  };
  const p = plan(o);
  assert.equal(p.changed, true);
  const input = o.input as Record<string, unknown>[];
  assert.deepEqual(input[1], { type: 'function_call', call_id: 'c1', name: 'multi_agent_v1__spawn_agent_2', arguments: '{}' });
  assert.equal(input[2], other);
  // Without the namespace tool in this request: the plain flat form.
  const o2: Record<string, unknown> = { input: [{ ...call }] };
  assert.equal(plan(o2).changed, true);
  assert.equal((o2.input as { name: string }[])[0]!.name, 'multi_agent_v1__spawn_agent');
});

/** A backend's Responses stream with a call of `flat` (and text holding the name, which stays). */
function backendStream(flat: string): string {
  const item = { type: 'function_call', id: 'fc_1', call_id: 'call_1', name: flat, arguments: '', status: 'in_progress' };
  const response = (status: string, output: unknown[]) => ({ id: 'resp_1', object: 'response', status, output, tools: [{ type: 'function', name: flat }] });
  const ev = (type: string, fields: Record<string, unknown>) => `event: ${type}\ndata: ${JSON.stringify({ type, ...fields })}\n\n`;
  return (
    ev('response.created', { response: response('in_progress', []) }) +
    ev('response.output_text.delta', { item_id: 'm', delta: `I will call "${flat}" now, \u2028 fine` }) +
    ev('response.output_item.added', { output_index: 0, item }) +
    ev('response.function_call_arguments.delta', { item_id: 'fc_1', output_index: 0, delta: '{"a":1}' }) +
    `event: response.function_call_arguments.done\r\ndata: ${JSON.stringify({ type: 'response.function_call_arguments.done', item_id: 'fc_1', name: flat, arguments: '{"a":1}' })}\r\n\r\n` +
    ev('response.output_item.done', { output_index: 0, item: { ...item, arguments: '{"a":1}', status: 'completed' } }) +
    ev('response.completed', { response: response('completed', [{ ...item, arguments: '{"a":1}', status: 'completed' }]) })
  );
}

test('a stream is rewritten the same wherever the backend reads cut it', () => {
  const clientTools = [ns('multi_agent_v1', fn('spawn_agent'))];
  const o: Record<string, unknown> = { tools: structuredClone(clientTools) };
  const p = plan(o);
  const restorer = new NamespaceRestorer(p.names!);
  const input = Buffer.from(backendStream('multi_agent_v1__spawn_agent'));
  const run = (cuts: number[]): string => {
    const got: Buffer[] = [];
    const onData = (b: Buffer): boolean => {
      got.push(Buffer.from(b));
      return true;
    };
    const inner = { onHead() {}, onData, onEnd() {}, onError() {} } as unknown as ChatRelay;
    const relay = new NamespaceRelay(inner, restorer, true);
    relay.onHead(200, {} as HeaderLines);
    let from = 0;
    for (const c of [...cuts, input.length]) {
      relay.onData(input.subarray(from, c));
      from = c;
    }
    relay.onEnd();
    return Buffer.concat(got).toString('utf8');
  };
  const whole = run([]);
  const events = whole
    .split(/\r?\n\r?\n/)
    .filter(Boolean)
    .map((e) => JSON.parse(e.split(/\r?\n/)[1]!.slice(6)) as Record<string, any>);
  const byType = Object.fromEntries(events.map((e) => [e.type, e]));
  assert.deepEqual(byType['response.output_item.added']!.item, {
    type: 'function_call',
    id: 'fc_1',
    call_id: 'call_1',
    name: 'spawn_agent',
    namespace: 'multi_agent_v1',
    arguments: '',
    status: 'in_progress',
  });
  assert.equal(byType['response.output_item.done']!.item.namespace, 'multi_agent_v1');
  assert.equal(byType['response.function_call_arguments.done']!.name, 'spawn_agent');
  assert.equal(byType['response.completed']!.response.output[0].name, 'spawn_agent');
  assert.deepEqual(byType['response.completed']!.response.tools, clientTools);
  assert.deepEqual(byType['response.created']!.response.tools, clientTools);
  // The text that holds the name is the model's own: untouched, as are events without a call.
  assert.equal(byType['response.output_text.delta']!.delta, 'I will call "multi_agent_v1__spawn_agent" now, \u2028 fine');
  assert.ok(whole.includes('\r\n\r\n'), 'CRLF events keep their line ends');
  for (let cut = 1; cut < input.length; cut++) assert.equal(run([cut]), whole, `cut at ${cut}`);
  assert.equal(run([...Array(input.length - 1).keys()].map((i) => i + 1)), whole, 'one byte per read');
});

test('a non-stream body: calls restored; a body without a flat name is passed as the same bytes', () => {
  const p = plan({ tools: [ns('multi_agent_v1', fn('spawn_agent'))] });
  const restorer = new NamespaceRestorer(p.names!);
  const body = Buffer.from(
    JSON.stringify({
      object: 'response',
      output: [{ type: 'function_call', call_id: 'c', name: 'multi_agent_v1__spawn_agent', arguments: '{}' }],
      tools: [{ type: 'function', name: 'multi_agent_v1__spawn_agent' }],
    }),
  );
  const out = JSON.parse(String(restorer.body(body)));
  assert.deepEqual(out.output[0], { type: 'function_call', call_id: 'c', name: 'spawn_agent', namespace: 'multi_agent_v1', arguments: '{}' });
  assert.deepEqual(out.tools, [ns('multi_agent_v1', fn('spawn_agent'))]);
  const plain = Buffer.from('{"object":"response","output":[{"type":"message"}]}');
  assert.equal(restorer.body(plain), plain);
});
