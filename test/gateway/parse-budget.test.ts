// The parse budget (gateway/request/parse-budget.ts, issue 44): the 20,000-function namespace
// tool that held the process for seconds is refused at the door with a 400 naming its setting,
// or, with the setting raised, flattened like any other; the largest bodies the defaults allow
// on chat, /v1/messages, count_tokens and /v1/responses are answered (a 200, or a 4xx in the
// route's shape, never a 5xx), one item over a cap is a 400 in the route's shape, and another
// client's requests sent alongside are all answered.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { MemoryBus } from '../../lib/bus.js';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { DEFAULT_PARSE_BUDGET } from '../../gateway/request/parse-budget.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { startSim, type SimServer } from '../../sim/server.js';
import { post } from './fixture.js';

const { maxTools, maxMessages, maxBlocks } = DEFAULT_PARSE_BUDGET;
const keyA = generateKey();
const keyB = generateKey();
let sim: SimServer;
let bus: MemoryBus;
let gateway: Gateway;
let raised: Gateway;

async function gatewayWith(limits: Parameters<typeof createGateway>[0]['limits']): Promise<Gateway> {
  return createGateway({
    port: 0,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url] })],
    keySource: memoryKeySource([
      { keyHash: hashKey(keyA), accountId: 1 },
      { keyHash: hashKey(keyB), accountId: 2 },
    ]),
    bus,
    logger: createLogger('silent'),
    limits,
    routes: [messagesRoutes()],
  });
}

before(async () => {
  sim = await startSim({ model: 'm', fast: true, logger: createLogger('silent') });
  bus = new MemoryBus();
  gateway = await gatewayWith(undefined);
  raised = await gatewayWith({ parseBudget: { ...DEFAULT_PARSE_BUDGET, maxTools: 30_000 } });
});
after(async () => {
  await gateway?.close();
  await raised?.close();
  await sim?.close();
  await bus?.close();
});

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });
const namespaceTool = (n: number) => ({
  type: 'namespace',
  name: 'n',
  description: 'many',
  tools: Array.from({ length: n }, () => ({ type: 'function', name: 'f', description: 'd', parameters: { type: 'object', properties: {} } })),
});

/** A chat-shaped error body. */
function chatError(json: any): { message: string; code: string } {
  assert.equal(typeof json?.error?.message, 'string', JSON.stringify(json)?.slice(0, 300));
  assert.equal(json.error.type, 'invalid_request_error');
  return json.error;
}
/** A messages-shaped error body. */
function messagesError(json: any): { message: string } {
  assert.equal(json?.type, 'error', JSON.stringify(json)?.slice(0, 300));
  assert.equal(typeof json.error.message, 'string');
  return json.error;
}

test("the 20,000-function namespace tool: a 400 naming RC_GATEWAY_MAX_TOOLS by default; with the setting raised, flattened and counted, then the model's own refusal", async () => {
  const body = JSON.stringify({ model: 'm', input: 'hi', max_output_tokens: 4, tools: [namespaceTool(20_000)] });
  const refused = await post(`${gateway.url}/v1/responses`, body, bearer(keyA));
  assert.equal(refused.status, 400);
  const e = chatError(refused.json);
  assert.equal(e.code, 'invalid_body');
  assert.match(e.message, new RegExp(`more than ${maxTools} tools.*RC_GATEWAY_MAX_TOOLS`));

  // Raised: past the door, the 20,000 functions are flattened (unique names) and the prompt is
  // counted; 20,000 tool definitions do not fit the model's context, which is the model's 400,
  // with the whole prompt counted, and no 5xx.
  const answered = await post(`${raised.url}/v1/responses`, body, bearer(keyA));
  assert.equal(answered.status, 400, answered.text.slice(0, 300));
  const overflow = chatError(answered.json);
  assert.equal(overflow.code, 'context_length_exceeded');
  const tokens = Number(/prompt is too long: (\d+) tokens/.exec(overflow.message)?.[1]);
  assert.ok(tokens > 20_000 * 10, `every function counted: ${overflow.message}`);
});

/** chat, messages, count_tokens and responses bodies with `messages` items, `blocks` blocks in all and `tools` tools. */
function bodies(messages: number, blocksEach: number, extraBlocks: number, tools: number) {
  const parts = (type: string, k: number) => Array.from({ length: k }, (_, j) => ({ type, text: j % 2 ? 'a' : 'b' }));
  const content = (type: string, i: number) => parts(type, blocksEach + (i < extraBlocks ? 1 : 0));
  const chatTools = Array.from({ length: tools }, (_, i) => ({ type: 'function', function: { name: `t${i}`, parameters: { type: 'object' } } }));
  const msgTools = Array.from({ length: tools }, (_, i) => ({ name: `t${i}`, input_schema: { type: 'object' } }));
  // Turns alternate and end on a user turn.
  const role = (i: number): string => ((messages - 1 - i) % 2 ? 'assistant' : 'user');
  return {
    chat: {
      model: 'm',
      max_tokens: 4,
      tools: chatTools,
      messages: Array.from({ length: messages }, (_, i) => ({ role: role(i), content: content('text', i) })),
    },
    messages: {
      model: 'm',
      max_tokens: 4,
      tools: msgTools,
      messages: Array.from({ length: messages }, (_, i) => ({ role: role(i), content: content('text', i) })),
    },
    count: {
      model: 'm',
      tools: msgTools,
      messages: Array.from({ length: messages }, (_, i) => ({ role: role(i), content: content('text', i) })),
    },
    responses: {
      model: 'm',
      max_output_tokens: 4,
      tools: [namespaceTool(tools - 1)],
      input: Array.from({ length: messages }, (_, i) => ({
        type: 'message',
        role: role(i),
        content: content(role(i) === 'user' ? 'input_text' : 'output_text', i),
      })),
    },
  };
}

/** Small chat requests of the other account, one after another until `done` settles: all must be answered 200. */
async function otherClient(done: Promise<unknown>): Promise<number> {
  let finished = false;
  void done.finally(() => {
    finished = true;
  });
  let answered = 0;
  do {
    const r = await post(
      `${gateway.url}/v1/chat/completions`,
      JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
      bearer(keyB),
    );
    assert.equal(r.status, 200, r.text.slice(0, 300));
    answered++;
  } while (!finished);
  return answered;
}

test("the largest bodies the defaults allow on every route are answered, while another client's requests are too", async () => {
  // At every cap at once: maxMessages messages, maxBlocks blocks, maxTools tools.
  const b = bodies(maxMessages, Math.floor(maxBlocks / maxMessages), maxBlocks % maxMessages, maxTools);
  const sends = [
    post(`${gateway.url}/v1/chat/completions`, JSON.stringify(b.chat), bearer(keyA)),
    post(`${gateway.url}/v1/messages`, JSON.stringify(b.messages), bearer(keyA)),
    post(`${gateway.url}/v1/messages/count_tokens`, JSON.stringify(b.count), bearer(keyA)),
    post(`${gateway.url}/v1/responses`, JSON.stringify(b.responses), bearer(keyA)),
  ];
  for (const body of [b.chat, b.messages, b.responses]) assert.ok(JSON.stringify(body).length < 8 * 1024 * 1024, 'within the body limit');
  const all = Promise.all(sends);
  const [others, [chat, messages, count, responses]] = await Promise.all([otherClient(all), all]);
  assert.ok(others >= 1);
  // Answered: a 200, or the model's own 4xx (a prompt this long overflows the sim's context), never the budget's.
  const answers: [string, Awaited<ReturnType<typeof post>>, (j: any) => { message: string }][] = [
    ['chat', chat!, chatError],
    ['messages', messages!, messagesError],
    ['count_tokens', count!, messagesError],
    ['responses', responses!, chatError],
  ];
  for (const [name, r, shape] of answers) {
    assert.ok(r.status === 200 || (r.status >= 400 && r.status < 500), `${name}: ${r.status} ${r.text.slice(0, 300)}`);
    if (r.status !== 200) assert.doesNotMatch(shape(r.json).message, /RC_GATEWAY_MAX_/, name);
  }
});

test('one item over a cap: 400 in the route shape naming the setting', async () => {
  const cases: [string, (j: any) => { message: string }, Record<string, unknown>, RegExp][] = [];
  const overMessages = bodies(maxMessages + 1, 0, 0, 1);
  const overBlocks = bodies(1000, Math.floor(maxBlocks / 1000), 1, 1);
  const overTools = bodies(1, 1, 0, maxTools + 1);
  for (const [over, setting] of [
    [overMessages, /RC_GATEWAY_MAX_MESSAGES/],
    [overBlocks, /RC_GATEWAY_MAX_BLOCKS/],
    [overTools, /RC_GATEWAY_MAX_TOOLS/],
  ] as const) {
    cases.push(['/v1/chat/completions', chatError, over.chat, setting]);
    cases.push(['/v1/messages', messagesError, over.messages, setting]);
    cases.push(['/v1/messages/count_tokens', messagesError, over.count, setting]);
    cases.push(['/v1/responses', chatError, over.responses, setting]);
  }
  for (const [path, shape, body, setting] of cases) {
    const r = await post(`${gateway.url}${path}`, JSON.stringify(body), bearer(keyA));
    assert.equal(r.status, 400, `${path}: ${r.text.slice(0, 200)}`);
    assert.match(shape(r.json).message, setting, path);
  }
});
