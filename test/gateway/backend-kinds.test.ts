// The gateway on each backend it fronts (issue 40, "Correct on every flavour"): count_tokens
// exact where the backend can count (vLLM and SGLang /tokenize, llama.cpp /apply-template then
// /tokenize), the documented estimate where it cannot (SGLang 0.5, asked once); the context
// window from /v1/models (SGLang's /tokenize max_model_len is its tokenizer's limit), the catalog's
// maxContext first; an over-context error in any backend's words answered on /v1/messages as
// `prompt is too long: N tokens > M maximum`; max tokens of 0 or less refused on every protocol;
// SGLang's and llama.cpp's queue metrics read by routing; message_start's input_tokens exact.
// A real gateway in front of small real HTTP backends that answer each server's bytes, taken
// from its source (backend-bytes.ts).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { readModelList, readPropsContext } from '../../gateway/backends/backend-kind.js';
import { readBackendError } from '../../gateway/backends/backend-error.js';
import { overflowMessage, readContextOverflow } from '../../gateway/backends/context-overflow.js';
import { waitingRequests } from '../../gateway/backends/load-scraper.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { waitFor } from '../helpers.js';
import {
  llamaApplyTemplate,
  llamaCompletion,
  llamaMetrics,
  llamaModels,
  llamaProps,
  llamaStream,
  llamaTokenize,
  llamaTokens,
  llamaTooLong,
  sglang05TokenizeRefusal,
  sglangCompletion,
  sglangMetrics,
  sglangModels,
  sglangStream,
  sglangTokenize,
  sglangTooLong,
  vllmModels,
  vllmNamedToolStream,
} from './backend-bytes.js';
import { post } from './fixture.js';
import { scriptedBackend, type Answer, type ScriptedBackend } from './scripted-backend.js';

const KEY = generateKey();
/** SGLang's own context, and the count its /tokenize gives every prompt. */
const SG_CONTEXT = 32768;
const SG_COUNT = 37;
const LLAMA_CTX = 8192;
const LLAMA_OLD_CTX = 4096;

let gw: Gateway;
let sg: ScriptedBackend;
let sg05: ScriptedBackend;
let llama: ScriptedBackend;
let llamaOld: ScriptedBackend;
let llamaBare: ScriptedBackend;
let vllm: ScriptedBackend;
let busy: ScriptedBackend;
let idle: ScriptedBackend;
/** What the generation route of sg and llama answers next (undefined: a normal answer). */
let sgAnswer: Answer | undefined;
let llamaAnswer: Answer | undefined;

function llamaRoutes(models: Answer | undefined): Record<string, Answer | ((b: string) => Answer)> {
  const routes: Record<string, Answer | ((b: string) => Answer)> = {
    'POST /apply-template': llamaApplyTemplate,
    'POST /tokenize': llamaTokenize,
    'GET /props': llamaProps(LLAMA_OLD_CTX),
    'POST /v1/chat/completions': (body) => {
      if (llamaAnswer) return llamaAnswer;
      return (JSON.parse(body) as { stream?: boolean }).stream ? llamaStream(['Hel', 'lo'], 11) : llamaCompletion('Hello', 11);
    },
  };
  if (models) routes['GET /v1/models'] = models;
  return routes;
}

before(async () => {
  sg = await scriptedBackend({
    'GET /v1/models': sglangModels('m', SG_CONTEXT),
    'POST /tokenize': sglangTokenize(SG_COUNT),
    'POST /v1/chat/completions': (body) =>
      sgAnswer ?? ((JSON.parse(body) as { stream?: boolean }).stream ? sglangStream(['o', 'k'], 23) : sglangCompletion('ok')),
  });
  sg05 = await scriptedBackend({
    'GET /v1/models': sglangModels('m', SG_CONTEXT),
    'POST /tokenize': sglang05TokenizeRefusal,
    'POST /v1/chat/completions': sglangCompletion('ok'),
  });
  llama = await scriptedBackend(llamaRoutes(llamaModels('m', LLAMA_CTX)));
  llamaOld = await scriptedBackend(llamaRoutes(llamaModels('m', undefined)));
  llamaBare = await scriptedBackend(llamaRoutes(undefined));
  vllm = await scriptedBackend({ 'GET /v1/models': vllmModels('m', 32768), 'POST /v1/chat/completions': vllmNamedToolStream('stop', 180) });
  busy = await scriptedBackend({
    'GET /v1/models': sglangModels('m', SG_CONTEXT),
    'GET /metrics': sglangMetrics(50),
    'POST /v1/chat/completions': sglangCompletion('busy'),
  });
  idle = await scriptedBackend({
    'GET /v1/models': sglangModels('m', SG_CONTEXT),
    'GET /metrics': sglangMetrics(0),
    'POST /v1/chat/completions': sglangCompletion('idle'),
  });
  gw = await createGateway({
    port: 0,
    logger: createLogger('silent'),
    models: [
      modelEntrySchema.parse({ name: 'sg', upstreams: [sg.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'sg-capped', upstreams: [sg.url], servedName: 'm', maxContext: 16384 }),
      modelEntrySchema.parse({ name: 'sg05', upstreams: [sg05.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'llama', upstreams: [llama.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'llama-old', upstreams: [llamaOld.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'llama-bare', upstreams: [llamaBare.url], servedName: 'm', maxContext: LLAMA_CTX }),
      modelEntrySchema.parse({ name: 'vllm', upstreams: [vllm.url], servedName: 'm' }),
      modelEntrySchema.parse({ name: 'pair', upstreams: [busy.url, idle.url], servedName: 'm' }),
    ],
    keySource: memoryKeySource([{ keyHash: hashKey(KEY), accountId: 1 }]),
    upstream: { metricsIntervalMs: 50 },
    routes: [messagesRoutes({ thinkingSecret: 'test-secret' })],
  });
});

after(async () => {
  await gw?.close();
  for (const b of [sg, sg05, llama, llamaOld, llamaBare, vllm, busy, idle]) await b?.close();
});

const ANTHROPIC = (extra: Record<string, string> = {}) => ({ 'x-api-key': KEY, 'anthropic-version': '2023-06-01', ...extra });
const OPENAI = { authorization: `Bearer ${KEY}` };
const HELLO = [{ role: 'user', content: 'Say hello to the whole wide world' }];

const countTokens = (model: string) => post(`${gw.url}/v1/messages/count_tokens`, JSON.stringify({ model, messages: HELLO }), ANTHROPIC());
const messages = (model: string, max: number, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}) =>
  post(`${gw.url}/v1/messages`, JSON.stringify({ model, max_tokens: max, messages: HELLO, ...extra }), ANTHROPIC(headers));
const chat = (model: string, body: Record<string, unknown>) =>
  post(`${gw.url}/v1/chat/completions`, JSON.stringify({ model, messages: HELLO, ...body }), OPENAI);

/** The count the scripted llama.cpp made of the last prompt it was asked to tokenize, checked to be the template's output with special tokens. */
function llamaCounted(b: ScriptedBackend): number {
  const applied = llamaApplyTemplate(JSON.stringify(b.last('POST /apply-template')));
  const tokenized = b.last('POST /tokenize') as { content: string; add_special: boolean };
  assert.equal(tokenized.content, (JSON.parse(applied.body) as { prompt: string }).prompt, 'the template the backend applied is what it tokenized');
  assert.equal(tokenized.add_special, true, 'with the special tokens its completion path adds');
  return llamaTokens(tokenized.content, true).length;
}

describe('count_tokens on every backend', () => {
  test('SGLang: its /tokenize count, exact', async () => {
    const r = await countTokens('sg');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, { input_tokens: SG_COUNT });
    assert.equal(r.headers.get('x-rc-token-count'), 'exact');
    assert.deepEqual(sg.last('POST /tokenize').messages, HELLO);
  });

  test('llama.cpp: its template applied by /apply-template, then tokenized by /tokenize, exact', async () => {
    const r = await countTokens('llama');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-rc-token-count'), 'exact');
    assert.deepEqual(llama.last('POST /apply-template').messages, HELLO);
    assert.deepEqual(r.json, { input_tokens: llamaCounted(llama) });
    assert.equal(llama.count('GET /v1/models'), 1);
  });

  test('llama.cpp without /v1/models: told apart by its /tokenize answer, then counted its way', async () => {
    const r = await countTokens('llama-bare');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.headers.get('x-rc-token-count'), 'exact');
    assert.deepEqual(r.json, { input_tokens: llamaCounted(llamaBare) });
    const again = await countTokens('llama-bare');
    assert.deepEqual(again.json, r.json);
    // The chat body went to /tokenize once (answered `{"tokens": []}`), then only content bodies.
    assert.equal(llamaBare.asked.get('POST /tokenize')!.filter((b) => b.includes('"messages"')).length, 1);
  });

  test('SGLang 0.5 (prompt-only /tokenize): the estimate, never an error, and /tokenize asked once', async () => {
    for (let i = 0; i < 3; i++) {
      const r = await countTokens('sg05');
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-rc-token-count'), 'estimate');
      // The documented estimate: ceil((messages JSON + tools JSON) characters / 4).
      assert.deepEqual(r.json, { input_tokens: Math.ceil(JSON.stringify(HELLO).length / 4) });
    }
    // A generation that would need a count (max_tokens past the context) does not ask again.
    const g = await messages('sg05', 40_000);
    assert.equal(g.status, 200, g.text);
    assert.equal(sg05.count('POST /tokenize'), 1);
  });
});

describe('the context window from /v1/models', () => {
  test("SGLang: max_tokens 40000 on its 32k context is fitted (not /tokenize's 131072), on chat and messages", async () => {
    const c = await chat('sg', { max_tokens: 40_000 });
    assert.equal(c.status, 200, c.text);
    assert.equal(sg.last('POST /v1/chat/completions').max_tokens, SG_CONTEXT - SG_COUNT);
    const m = await messages('sg', 40_000);
    assert.equal(m.status, 200, m.text);
    assert.equal(sg.last('POST /v1/chat/completions').max_tokens, SG_CONTEXT - SG_COUNT);
    assert.equal(sg.count('GET /v1/models'), 1, 'learned once');
  });

  test("the catalog's maxContext wins over the backend's", async () => {
    const c = await chat('sg-capped', { max_tokens: 40_000 });
    assert.equal(c.status, 200, c.text);
    assert.equal(sg.last('POST /v1/chat/completions').max_tokens, 16384 - SG_COUNT);
  });

  test("llama.cpp: meta.n_ctx of its /v1/models; an older server's /props n_ctx", async () => {
    const m = await messages('llama', 40_000);
    assert.equal(m.status, 200, m.text);
    assert.equal(llama.last('POST /v1/chat/completions').max_tokens, LLAMA_CTX - llamaCounted(llama));
    const old = await messages('llama-old', 40_000);
    assert.equal(old.status, 200, old.text);
    assert.equal(llamaOld.last('POST /v1/chat/completions').max_tokens, LLAMA_OLD_CTX - llamaCounted(llamaOld));
    assert.equal(llamaOld.count('GET /props'), 1);
  });

  test('llama.cpp: a prompt longer than its context is refused by the gateway, counted its way', async () => {
    const before = llama.count('POST /v1/chat/completions');
    const words = Array.from({ length: LLAMA_CTX }, (_, i) => `w${i}`).join(' ');
    const r = await post(
      `${gw.url}/v1/messages`,
      JSON.stringify({ model: 'llama', max_tokens: 10, messages: [{ role: 'user', content: words }] }),
      ANTHROPIC(),
    );
    assert.equal(r.status, 400, r.text);
    assert.deepEqual(r.json, {
      type: 'error',
      error: { type: 'invalid_request_error', message: `prompt is too long: ${llamaCounted(llama)} tokens > ${LLAMA_CTX - 1} maximum` },
    });
    assert.equal(llama.count('POST /v1/chat/completions'), before, 'no generation reached the backend');
  });
});

describe("an over-context error in the backend's words", () => {
  const cases: [string, () => void, string][] = [
    ['SGLang', () => (sgAnswer = sglangTooLong(40000, 32768)), 'sg'],
    ['llama.cpp', () => (llamaAnswer = llamaTooLong(8422, 8192)), 'llama'],
  ];
  for (const [name, arm, model] of cases) {
    test(`${name}: /v1/messages answers "prompt is too long: N tokens > M maximum", whole and streamed`, async () => {
      arm();
      try {
        const expected = name === 'SGLang' ? 'prompt is too long: 40000 tokens > 32767 maximum' : 'prompt is too long: 8422 tokens > 8191 maximum';
        for (const stream of [false, true]) {
          // Fitting off: the backend judges (its error is what is translated).
          const r = await messages(model, 100, { stream }, { 'x-rc-fit-max-tokens': '0' });
          assert.equal(r.status, 400, r.text);
          assert.deepEqual(r.json, { type: 'error', error: { type: 'invalid_request_error', message: expected } });
        }
        // Chat keeps the backend's own error.
        const c = await post(`${gw.url}/v1/chat/completions`, JSON.stringify({ model, messages: HELLO }), { ...OPENAI, 'x-rc-fit-max-tokens': '0' });
        assert.equal(c.status, 400);
        assert.match(c.json.error.message, name === 'SGLang' ? /is longer than the model's context length/ : /exceeds the available context size/);
      } finally {
        sgAnswer = undefined;
        llamaAnswer = undefined;
      }
    });
  }

  test('each wording read, and the two messages', () => {
    const read = (status: number, body: string) => readContextOverflow(readBackendError(status, body));
    const vllmOld = JSON.stringify({
      object: 'error',
      message:
        "This model's maximum context length is 32768 tokens. However, you requested 72000 tokens (32000 in the messages, 40000 in the completion). Please reduce the length of the messages or completion.",
      type: 'BadRequestError',
      param: null,
      code: 400,
    });
    assert.deepEqual(read(400, vllmOld), { promptTokens: 32000, context: 32768, maxTokens: 40000 });
    const vllmNew = JSON.stringify({
      error: {
        message:
          "This model's maximum context length is 32768 tokens. However, your request has 40000 input tokens. Please reduce the length of the input messages.",
        type: 'BadRequestError',
        param: null,
        code: 400,
      },
    });
    assert.deepEqual(read(400, vllmNew), { promptTokens: 40000, context: 32768, maxTokens: undefined });
    const vllmMax = JSON.stringify({
      error: {
        message:
          "'max_tokens' or 'max_completion_tokens' is too large: 32000. This model's maximum context length is 32768 tokens and your request has 15136 input tokens (32000 > 32768 - 15136).",
        type: 'BadRequestError',
        param: null,
        code: 400,
      },
    });
    const o = read(400, vllmMax)!;
    assert.deepEqual(o, { promptTokens: 15136, context: 32768, maxTokens: 32000 });
    assert.equal(
      overflowMessage(o),
      'input length and `max_tokens` exceed context limit: 15136 + 32000 > 32768, decrease input length or `max_tokens` and try again',
    );
    const sgMax = JSON.stringify({
      object: 'error',
      message:
        "Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total of 55136 tokens: 15136 tokens from the input messages and 40000 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.",
      type: 'BadRequestError',
      param: null,
      code: 400,
    });
    assert.deepEqual(read(400, sgMax), { promptTokens: 15136, context: 32768, maxTokens: 40000 });
    assert.deepEqual(read(400, sglangTooLong(40000, 32768).body), { promptTokens: 40000, context: 32768, maxTokens: undefined });
    assert.deepEqual(read(400, llamaTooLong(8422, 8192).body), { promptTokens: 8422, context: 8192, maxTokens: undefined });
    // The llama.cpp message alone (a proxy that kept only the text).
    assert.deepEqual(read(400, 'request (8422 tokens) exceeds the available context size (8192 tokens), try increasing it'), {
      promptTokens: 8422,
      context: 8192,
      maxTokens: undefined,
    });
    assert.equal(overflowMessage({ promptTokens: 8422, context: 8192, maxTokens: undefined }), 'prompt is too long: 8422 tokens > 8191 maximum');
    assert.equal(
      read(400, JSON.stringify({ object: 'error', message: 'max_tokens must be at least 1, got 0.', type: 'BadRequestError', code: 400 })),
      undefined,
    );
  });
});

describe('max tokens of 0 or less', () => {
  test("a 400 in each protocol's shape, nothing sent to the backend", async () => {
    const before = sg.count('POST /v1/chat/completions');
    for (const max of [0, -5]) {
      const m = await messages('sg', max);
      assert.equal(m.status, 400, m.text);
      assert.equal(m.json.type, 'error');
      assert.equal(m.json.error.type, 'invalid_request_error');
      for (const field of ['max_tokens', 'max_completion_tokens']) {
        const c = await chat('sg', { [field]: max });
        assert.equal(c.status, 400, c.text);
        assert.deepEqual(c.json, {
          error: { message: `${field}: must be at least 1, got ${max}`, type: 'invalid_request_error', param: field, code: 'invalid_body' },
        });
      }
      const r = await post(`${gw.url}/v1/responses`, JSON.stringify({ model: 'sg', input: 'hi', max_output_tokens: max }), OPENAI);
      assert.equal(r.status, 400, r.text);
      assert.deepEqual(r.json, {
        error: {
          message: `max_output_tokens: must be at least 1, got ${max}`,
          type: 'invalid_request_error',
          param: 'max_output_tokens',
          code: 'invalid_body',
        },
      });
    }
    assert.equal(sg.count('POST /v1/chat/completions'), before);
  });
});

describe('the load reader on SGLang and llama.cpp', () => {
  test('the queue gauge of each backend', () => {
    assert.equal(waitingRequests(sglangMetrics(50).body), 50);
    assert.equal(waitingRequests(llamaMetrics(3).body), 3);
    assert.equal(waitingRequests('sglang:num_running_reqs{model_name="m"} 8.0\n'), undefined);
  });

  test('a busy SGLang backend (50 queued) gets no new conversation while an idle one is there', async () => {
    const registry = gw.context.upstreams;
    await waitFor(() => registry.get(busy.url).waitingAt > 0 && registry.get(idle.url).waitingAt > 0);
    assert.equal(registry.get(busy.url).waiting, 50);
    for (let i = 0; i < 8; i++) {
      const r = await chat('pair', { messages: [{ role: 'user', content: `conversation ${i}: ${'context '.repeat(i * 7)}` }], max_tokens: 10 });
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(busy.count('POST /v1/chat/completions'), 0);
    assert.equal(idle.count('POST /v1/chat/completions'), 8);
  });
});

describe("message_start's input_tokens", () => {
  /** The usage of a messages stream's message_start and message_delta events. */
  async function streamUsage(model: string, max: number) {
    const r = await messages(model, max, { stream: true });
    assert.equal(r.status, 200, r.text);
    const events = r.text
      .split('\n')
      .filter((l) => l.startsWith('data: '))
      .map((l) => JSON.parse(l.slice(6)));
    return { start: events.find((e) => e.type === 'message_start').message.usage, delta: events.find((e) => e.type === 'message_delta').usage };
  }

  test("vLLM: the backend's count on its first chunk (continuous usage)", async () => {
    const u = await streamUsage('vllm', 100);
    assert.equal(u.start.input_tokens, 180);
    assert.equal(u.delta.input_tokens, 180);
  });

  test("SGLang (no usage on its first chunk, running usage on its content chunks): the backend's count", async () => {
    const u = await streamUsage('sg', 100);
    assert.equal(u.start.input_tokens, 23);
    assert.equal(u.delta.input_tokens, 23);
  });

  test("llama.cpp (usage only on its last chunk): the gateway's own count when it made one", async () => {
    const u = await streamUsage('llama', 40_000); // past the context: counted to fit
    assert.equal(u.start.input_tokens, llamaCounted(llama));
    assert.equal(u.delta.input_tokens, 11, "the backend's final usage in message_delta");
  });
});

describe('reading /v1/models and /props', () => {
  test('kind and context of each server', () => {
    assert.deepEqual(readModelList(JSON.parse(vllmModels('m', 32768).body), 'm'), { kind: 'vllm', context: 32768 });
    assert.deepEqual(readModelList(JSON.parse(sglangModels('m', 32768).body), 'm'), { kind: 'sglang', context: 32768 });
    assert.deepEqual(readModelList(JSON.parse(llamaModels('m', 8192).body), 'other-name'), { kind: 'llama.cpp', context: 8192 });
    assert.deepEqual(readModelList(JSON.parse(llamaModels('m', undefined).body), 'm'), { kind: 'llama.cpp', context: undefined });
    assert.equal(readPropsContext(JSON.parse(llamaProps(4096).body)), 4096);
    assert.equal(readModelList({ detail: 'Not Found' }, 'm'), undefined);
  });
});
