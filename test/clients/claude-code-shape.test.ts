// Claude Code's first request (test/clients/shapes.ts), unmodified, on both models of the default
// catalog, through a real gateway in front of real sims: the raw request as the agent sends it
// (path ?beta=true, its headers), and the same through the official @anthropic-ai/sdk's beta API.
// Issue 15: effort "high" refused on sim-chat; max_tokens 32000 refused by sim-reasoner's backend.
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { createGate, type LimitGate } from '../../gateway/gates/index.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { startSim, type SimServer } from '../../sim/server.js';
import { CLAUDE_CODE_HEADERS, claudeCodeFirstRequest, langchainRequest, UNUSED_TOP_LEVEL_FIELDS, vercelAiSdkRequest } from './shapes.js';

const KEY = generateKey();
const CONTEXT = 32768;
/** Filler words that bring the first request to about 22,000 prompt tokens (the 22,025). */
const AGENT_SIZED = 14_600;
let sims: Record<string, SimServer>;
let gw: Gateway;
let client: Anthropic;
let gate: LimitGate;

before(async () => {
  const logger = createLogger('silent');
  sims = {
    'sim-chat': await startSim({ model: 'sim-chat', fast: true, logger, maxModelLen: CONTEXT, promptTokensDetails: true }),
    'sim-reasoner': await startSim({ model: 'sim-reasoner', reasoning: true, fast: true, logger, maxModelLen: CONTEXT, promptTokensDetails: true }),
  };
  gate = createGate(
    { modelRpm: 1000, modelTpm: 100_000_000, modelDailyTokens: 1_000_000_000, redisUrl: '', gateRedisTimeoutMs: 50, gateKeyPrefix: 'cc-shape:' },
    { logger },
  );
  gw = await createGateway({
    port: 0,
    logger,
    gate,
    // The default catalog's entries (lib/config.ts DEFAULT_SIM_MODELS): no maxContext, so the
    // gateway learns the context from the backend.
    models: [
      modelEntrySchema.parse({ name: 'sim-chat', upstreams: [sims['sim-chat']!.url] }),
      modelEntrySchema.parse({ name: 'sim-reasoner', upstreams: [sims['sim-reasoner']!.url], reasoning: true, efforts: ['high'] }),
    ],
    keySource: memoryKeySource([{ keyHash: hashKey(KEY), accountId: 1 }]),
    routes: [messagesRoutes({ thinkingSecret: 'test-secret', pingIntervalMs: 1000 })],
  });
  client = new Anthropic({ baseURL: `${gw.url}/api`, apiKey: KEY, maxRetries: 0 });
});

after(async () => {
  await gw?.close();
  await gate?.close();
  for (const s of Object.values(sims ?? {})) await s.close();
});

/** Posts like the agent does: /api/v1/messages?beta=true with its headers. */
async function postAsAgent(body: Record<string, unknown>): Promise<{ status: number; text: string }> {
  const r = await fetch(`${gw.url}/api/v1/messages?beta=true`, {
    method: 'POST',
    headers: { ...CLAUDE_CODE_HEADERS, 'content-type': 'application/json', 'x-api-key': KEY },
    body: JSON.stringify(body),
  });
  return { status: r.status, text: await r.text() };
}

/** The `data:` payloads of an SSE body, parsed. */
function events(text: string): { type: string; [k: string]: any }[] {
  return text
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => JSON.parse(l.slice(6)));
}

async function promptTokens(body: Record<string, unknown>): Promise<number> {
  const { stream: _s, max_tokens: _m, ...rest } = body;
  const r = await client.messages.countTokens(rest as never);
  return r.input_tokens;
}

for (const model of ['sim-chat', 'sim-reasoner'] as const) {
  test(`${model}: Claude Code's first request, as sent, streams an answer; max_tokens lowered to fit the context`, async () => {
    const body = claudeCodeFirstRequest({ model, systemWords: AGENT_SIZED });
    const n = await promptTokens(body);
    assert.ok(n > 20_000 && n + 32_000 > CONTEXT, `prompt of ${n} tokens`);
    const r = await postAsAgent(body);
    assert.equal(r.status, 200, r.text.slice(0, 500));
    const ev = events(r.text);
    assert.equal(ev[0]!.type, 'message_start');
    assert.equal(ev.at(-1)!.type, 'message_stop');
    assert.ok(!ev.some((e) => e.type === 'error'), r.text.slice(0, 500));
    const last = sims[model]!.stats.lastBody!;
    assert.equal(last.max_tokens, CONTEXT - n, 'max_tokens is what is left of the context');
    // effort high: mapped/sent on the reasoning model, ignored (not forwarded) on the other.
    assert.equal(last.reasoning_effort, model === 'sim-reasoner' ? 'high' : undefined);
    // the mid-conversation system message is kept in place; metadata.user_id is the sticky user.
    const msgs = last.messages as { role: string; content: unknown }[];
    assert.deepEqual(
      msgs.map((m) => m.role),
      ['system', 'user', 'system', 'user'],
    );
    assert.equal(last.user, (body.metadata as { user_id: string }).user_id);
    assert.equal((last.tools as unknown[]).length, 24);
    // Unknown top-level fields (context_management) are ignored, not forwarded.
    assert.equal(last.context_management, undefined);
    if (model === 'sim-reasoner') assert.ok(ev.some((e) => e.type === 'content_block_start' && e.content_block.type === 'thinking'));
  });

  test(`${model}: the same request through the official SDK's beta API (betas, stream, finalMessage)`, async () => {
    const { model: _m, ...rest } = claudeCodeFirstRequest({ model, systemWords: AGENT_SIZED });
    const stream = client.beta.messages.stream({ ...(rest as object), model, betas: CLAUDE_CODE_HEADERS['anthropic-beta']!.split(',') } as never);
    const msg = await stream.finalMessage();
    assert.equal(msg.role, 'assistant');
    assert.ok(['end_turn', 'tool_use'].includes(msg.stop_reason!), String(msg.stop_reason));
    assert.ok(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens ?? 0) > 20_000);
  });

  test(`${model}: a prompt alone over the context is the protocol's "prompt is too long" 400`, async () => {
    const body = claudeCodeFirstRequest({ model, systemWords: 26_000 });
    const n = await promptTokens(body);
    assert.ok(n >= CONTEXT);
    const requestsBefore = sims[model]!.stats.requests;
    const r = await postAsAgent(body);
    assert.equal(r.status, 400);
    const err = JSON.parse(r.text) as { type: string; error: { type: string; message: string } };
    assert.equal(err.type, 'error');
    assert.equal(err.error.type, 'invalid_request_error');
    assert.equal(err.error.message, `prompt is too long: ${n} tokens > ${CONTEXT - 1} maximum`);
    assert.equal(sims[model]!.stats.requests, requestsBefore, 'no completion reached the backend');
    // The SDK raises it as a BadRequestError with that message.
    await assert.rejects(
      client.messages.create({ ...(body as object), stream: false } as never, { timeout: 60_000 }),
      (e: unknown) => e instanceof Anthropic.BadRequestError && /^prompt is too long: \d+ tokens > \d+ maximum$/.test((e.error as any).error.message),
    );
  });
}

test('a lowered max_tokens that is reached ends with stop_reason max_tokens', async () => {
  // Room for 5 output tokens; the sim's natural answer is at least 16.
  const probe = claudeCodeFirstRequest({ model: 'sim-chat', systemWords: AGENT_SIZED, stream: false, prompt: 'Say hello.' });
  const n = await promptTokens(probe);
  const body = claudeCodeFirstRequest({ model: 'sim-chat', systemWords: AGENT_SIZED + (CONTEXT - 5 - n), stream: false, prompt: 'Say hello.' });
  const msg = (await client.messages.create(body as never, { timeout: 60_000 })) as Anthropic.Message;
  assert.equal(msg.stop_reason, 'max_tokens');
  assert.equal(msg.usage.output_tokens, 5);
  assert.equal(sims['sim-chat']!.stats.lastBody!.max_tokens, 5);
});

test('/tokenize is called only when the request might not fit; the context is learned once', async () => {
  const sim = sims['sim-chat']!;
  const small = { model: 'sim-chat', max_tokens: 100, messages: [{ role: 'user' as const, content: 'Hi' }] };
  await client.messages.create(small); // learns the context if not yet known
  const counted = sim.stats.tokenizeRequests;
  await client.messages.create(small);
  await client.messages.create({ ...small, max_tokens: 30_000 }, { timeout: 60_000 });
  assert.equal(sim.stats.tokenizeRequests, counted, 'bytes + max_tokens within the context: no count');
  assert.equal(sim.stats.lastBody!.max_tokens, 30_000);
  await client.messages.create({ ...small, max_tokens: 32_760 }, { timeout: 60_000 });
  assert.equal(sim.stats.tokenizeRequests, counted + 1, 'might not fit: one exact count');
  assert.ok((sim.stats.lastBody!.max_tokens as number) < 32_760);
});

test('prompt caching: a repeated request reports cache_read_input_tokens, input_tokens the uncached rest', async () => {
  const body = claudeCodeFirstRequest({ model: 'sim-chat', systemWords: 300, stream: false, prompt: 'Cache me.' });
  const sys0 = (body.system as { text: string }[])[0]!;
  sys0.text = `cache-test ${sys0.text}`; // a prefix no other test sent
  const n = await promptTokens(body);
  const first = (await client.messages.create(body as never, { timeout: 60_000 })) as Anthropic.Message;
  assert.equal(first.usage.cache_read_input_tokens, 0);
  assert.equal(first.usage.input_tokens, n);
  const second = (await client.messages.create(body as never, { timeout: 60_000 })) as Anthropic.Message;
  const cached = second.usage.cache_read_input_tokens!;
  assert.equal(cached, Math.floor((n - 1) / 16) * 16, 'whole 16-token blocks, the last token computed');
  assert.equal(second.usage.input_tokens, n - cached);
  assert.equal(second.usage.cache_creation_input_tokens, 0);

  // Streamed: message_delta carries the split (vLLM reports cached tokens in its final usage only,
  // so message_start counts the whole prompt as input_tokens).
  const r = await postAsAgent({ ...body, stream: true });
  const ev = events(r.text);
  const start = ev.find((e) => e.type === 'message_start')!.message.usage;
  assert.equal(start.input_tokens + start.cache_read_input_tokens, n);
  const delta = ev.find((e) => e.type === 'message_delta')!.usage;
  assert.equal(delta.cache_read_input_tokens, cached);
  assert.equal(delta.input_tokens, n - cached);
  // The SDK's accumulated message has the final split.
  const msg = await client.messages.stream({ ...(body as object), stream: undefined } as never).finalMessage();
  assert.equal(msg.usage.cache_read_input_tokens, cached);
  assert.equal(msg.usage.input_tokens, n - cached);
  // Metering: cached tokens count fully against the caps and show apart in model-usage.
  const usage = await gate.readUsage(1);
  const m = usage.by_model['sim-chat']!;
  assert.ok(m.cached_input_tokens >= 3 * cached, JSON.stringify(m));
  assert.ok(m.input_tokens >= 4 * n);
});

test('unknown top-level fields are ignored (accepted, not forwarded), for each client shape', async () => {
  const shapes = {
    'claude-code': claudeCodeFirstRequest({ model: 'sim-chat' }),
    'vercel-ai-sdk': vercelAiSdkRequest('sim-chat'),
    langchain: langchainRequest('sim-chat'),
  };
  for (const [name, shape] of Object.entries(shapes)) {
    const r = await postAsAgent({ ...shape, ...UNUSED_TOP_LEVEL_FIELDS });
    assert.equal(r.status, 200, `${name}: ${r.text.slice(0, 300)}`);
    assert.equal(events(r.text).at(-1)!.type, 'message_stop', name);
    const forwarded = sims['sim-chat']!.stats.lastBody!;
    for (const field of Object.keys(UNUSED_TOP_LEVEL_FIELDS)) assert.equal(forwarded[field], undefined, `${name}: ${field}`);
  }
});
