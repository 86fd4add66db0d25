// Issue #27 item 7: caps hold whatever the input's bytes-to-tokens ratio. A prompt of commas is a
// token per byte (in the sim's tokenizer as in real ones); admission used to estimate bytes / 4,
// so two such prompts in parallel were both admitted on a daily cap of 20,000 and charged 64,060.
// Now the gate reserves a true bound of the input (2 x body bytes + 256) or, when that bound
// bites, the backend's /tokenize count: usage never passes the cap (or the token bucket) by more
// than one request's output. On both gate stores (memory, Redis), on chat completions, messages
// and responses. Real gateway, real sim (with a context large enough that fitting max_tokens
// does not count the prompt first: the gate's own recount is what is tested), FakeClock.
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { modelEntrySchema } from '../../../lib/config.js';
import { generateKey, hashKey } from '../../../lib/keys.js';
import { createLogger } from '../../../lib/log.js';
import { startSim, type SimServer } from '../../../sim/server.js';
import { createGateway } from '../../../gateway/server.js';
import { memoryKeySource } from '../../../gateway/auth/keys.js';
import { messagesRoutes } from '../../../gateway/messages/routes.js';
import { counters } from '../../../gateway/gates/metrics.js';
import { makeGate, type Limits, type StoreKind, type TestGate } from './fixtures.js';
import { post } from '../fixture.js';
import { waitFor } from '../../helpers.js';

const BIG = 1_000_000_000;
const ACCOUNT = 9;
/** Large enough for 32,000 commas and for the bound not to fill it (no count for fitting). */
const CONTEXT = 200_000;
const OUT = 16;

interface Setup {
  g: TestGate;
  sim: SimServer;
  url: string;
  bearer: Record<string, string>;
  xApiKey: Record<string, string>;
  settled(): Promise<{ tokens_used: number; tokens_reserved: number }>;
}

async function setup(t: TestContext, kind: StoreKind, limits: Limits): Promise<Setup | undefined> {
  const g = await makeGate(t, kind, limits);
  if (!g) return undefined;
  const logger = createLogger('silent');
  const sim = await startSim({ model: 'm', logger, fast: true, maxModelLen: CONTEXT });
  const key = generateKey();
  const gateway = await createGateway({
    port: 0,
    logger,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url], maxContext: CONTEXT })],
    keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: ACCOUNT }]),
    gate: g.gate,
    routes: [messagesRoutes()],
  });
  t.after(async () => {
    await gateway.close();
    await sim.close();
  });
  return {
    g,
    sim,
    url: gateway.url,
    bearer: { authorization: `Bearer ${key}` },
    xApiKey: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    settled: async () =>
      (await waitFor(async () => {
        const u = await g.gate.readUsage(ACCOUNT);
        return u.tokens_reserved === 0 ? u : undefined;
      }))!,
  };
}

const commas = (n: number) => ','.repeat(n);

type Call = [url: string, body: string, headers: Record<string, string>];
/** The same attack on each protocol: path, body, headers. */
const PROTOCOLS: Record<'chat' | 'messages' | 'responses', (s: Setup, n: number) => Call> = {
  chat: (s: Setup, n: number) => [
    `${s.url}/v1/chat/completions`,
    JSON.stringify({ model: 'm', max_tokens: OUT, messages: [{ role: 'user', content: commas(n) }] }),
    s.bearer,
  ],
  messages: (s: Setup, n: number) => [
    `${s.url}/v1/messages`,
    JSON.stringify({ model: 'm', max_tokens: OUT, messages: [{ role: 'user', content: commas(n) }] }),
    s.xApiKey,
  ],
  responses: (s: Setup, n: number) => [`${s.url}/v1/responses`, JSON.stringify({ model: 'm', max_output_tokens: OUT, input: commas(n) }), s.bearer],
};

/** Two requests at once; their statuses. */
async function pair(s: Setup, protocol: keyof typeof PROTOCOLS, n: number): Promise<{ status: number; text: string }[]> {
  const [url, body, headers] = PROTOCOLS[protocol](s, n);
  return Promise.all([post(url, body, headers), post(url, body, headers)]);
}

for (const kind of ['memory', 'redis'] as const) {
  for (const protocol of ['chat', 'messages', 'responses'] as const) {
    test(`${kind} store, ${protocol}: two parallel prompts of 32,000 commas on a daily cap of 20,000 are refused; usage stays within the cap`, async (t) => {
      const s = await setup(t, kind, { rpm: BIG, tpm: BIG, daily: 20_000 });
      if (!s) return;
      const before = s.sim.stats.tokenizeRequests;
      const rs = await pair(s, protocol, 32_000);
      // On the old code both were admitted (8,016 estimated each) and 64,060 were charged.
      for (const r of rs) assert.equal(r.status, 429, r.text);
      assert.match(rs[0]!.text, /rate limit/i);
      const u = await s.settled();
      assert.ok(u.tokens_used <= 20_000 + OUT, `used ${u.tokens_used} of 20,000`);
      assert.equal(s.sim.stats.requests, 0, 'no completion reached the backend');
      assert.ok(s.sim.stats.tokenizeRequests > before, 'the bound bit: the prompts were counted');
    });

    test(`${kind} store, ${protocol}: of two parallel prompts of 12,000 commas on a daily cap of 20,000 one passes, usage stays within the cap`, async (t) => {
      const s = await setup(t, kind, { rpm: BIG, tpm: BIG, daily: 20_000 });
      if (!s) return;
      const rs = await pair(s, protocol, 12_000);
      const statuses = rs.map((r) => r.status).sort();
      // Old code: both admitted (3,016 estimated each), about 24,000 charged.
      assert.deepEqual(statuses, [200, 429], rs.map((r) => r.text.slice(0, 200)).join(' | '));
      const refused = rs.find((r) => r.status === 429)!;
      assert.match(refused.text, protocol === 'messages' ? /rate_limit_error/ : /daily_token_cap_exceeded/);
      const u = await s.settled();
      assert.ok(u.tokens_used > 12_000, `used ${u.tokens_used}: the admitted prompt was charged its real size`);
      assert.ok(u.tokens_used <= 20_000 + OUT, `used ${u.tokens_used} of 20,000`);
    });
  }

  test(`${kind} store: token bucket (tpm 20,000), parallel prompts of 8,000 commas stay within the bucket on every protocol`, async (t) => {
    const s = await setup(t, kind, { rpm: BIG, tpm: 20_000, daily: BIG });
    if (!s) return;
    // The FakeClock stands still: the bucket never refills, so whatever passes is within 20,000.
    // Three protocols, two requests each: 6 x 8,000 commas; old code admitted at 2,016 each.
    const rs = (await Promise.all((['chat', 'messages', 'responses'] as const).map((p) => pair(s, p, 8_000)))).flat();
    for (const r of rs) assert.ok(r.status === 200 || r.status === 429, r.text.slice(0, 300));
    assert.ok(rs.some((r) => r.status === 200));
    const u = await s.settled();
    assert.ok(u.tokens_used <= 20_000 + OUT, `used ${u.tokens_used} with a bucket of 20,000`);
    // And the bucket of 32,000-comma prompts (each larger than the whole bucket): refused.
    const big = await pair(s, 'chat', 32_000);
    for (const r of big) assert.equal(r.status, 429, r.text);
    assert.ok((await s.settled()).tokens_used <= 20_000 + OUT);
  });

  test(`${kind} store: with plenty of allowance the bound is admitted as it is (no /tokenize round trip)`, async (t) => {
    const s = await setup(t, kind, { rpm: BIG, tpm: BIG, daily: BIG });
    if (!s) return;
    const recounts = counters.recounts;
    for (const p of ['chat', 'messages', 'responses'] as const) {
      const [url, body, headers] = PROTOCOLS[p](s, 2_000);
      const r = await post(url, body, headers);
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(s.sim.stats.tokenizeRequests, 0);
    assert.equal(counters.recounts, recounts);
  });
}
