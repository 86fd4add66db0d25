// Routing for the KV cache (gateway/backends/router.ts, prefix-key.ts, prefix-table.ts): prefix
// units, the prefix router's choices on a synthetic workload (affinity, spread, bounded load,
// replicas' agreement, ejection, the memory bound), round-robin, the vLLM queue reader, and
// turns of conversations through UpstreamRegistry onto real sims.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { describe, it } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { startSim, type SimServer } from '../../sim/server.js';
import { Catalog } from '../../gateway/backends/model-catalog.js';
import { fnv1a, messageHash, mix, prefixUnits, SAMPLE } from '../../gateway/backends/prefix-key.js';
import { PrefixTable } from '../../gateway/backends/prefix-table.js';
import { chatRouteHint, responsesRouteHint, type RouteHint } from '../../gateway/backends/route-hint.js';
import { createRouter, PrefixRouter, type RoutedUpstream, type RouterOptions } from '../../gateway/backends/router.js';
import { LoadScraper, waitingRequests } from '../../gateway/backends/load-scraper.js';
import { requestUpstream, UpstreamRegistry } from '../../gateway/backends/upstreams.js';
import { waitFor } from '../helpers.js';
import { GatewayMetrics, REASON_KEY, REASON_LOAD, REASON_PREFIX, ROUTE_REASONS, RouteSeries } from '../../gateway/metrics.js';

const OPTS: RouterOptions = { routeEntries: 65_536, routeEpsilon: 0.25, routeMinCeiling: 4, routeKeepEpsilon: 1, routeMaxWaiting: 4, metricsIntervalMs: 0 };

/** A stand-in upstream: what the router reads, settable. */
class FakeUpstream implements RoutedUpstream {
  readonly seed: number;
  inflight = 0;
  ejections = 0;
  waiting = 0;
  waitingAt = 0;
  out = false;
  constructor(readonly url: string) {
    this.seed = fnv1a(url);
  }
  healthy(): boolean {
    return !this.out;
  }
  eject(): void {
    this.out = true;
    this.ejections++;
  }
}

interface Model {
  ups: FakeUpstream[];
  router: PrefixRouter;
  series: RouteSeries;
}

function model(n: number, opts: Partial<RouterOptions> = {}): Model {
  const ups = Array.from({ length: n }, (_, i) => new FakeUpstream(`http://10.0.0.${i + 1}:8000`));
  const series = new RouteSeries();
  const router = createRouter(
    'prefix',
    ups.map((u) => u.url),
    { ...OPTS, ...opts },
    series,
  ) as PrefixRouter;
  return { ups, router, series };
}

const SYSTEM = `You are a coding agent. ${'Follow the rules. '.repeat(500)}`;
const TOOLS = [
  { type: 'function', function: { name: 'read_file', description: 'Reads a file', parameters: {} } },
  { type: 'function', function: { name: 'run', description: 'Runs a command', parameters: {} } },
];

/** Turn t (1-based) of conversation c: the system prompt, then t user messages and t - 1 answers. */
function turn(c: number, t: number, system = SYSTEM): { messages: unknown[]; tools: unknown } {
  const messages: unknown[] = [{ role: 'system', content: system }];
  for (let k = 1; k <= t; k++) {
    messages.push({ role: 'user', content: `conversation ${c}, question ${k}: ${'context '.repeat(k * 10)}` });
    if (k < t) messages.push({ role: 'assistant', content: `answer ${k} to ${c}` });
  }
  return { messages, tools: TOOLS };
}

const PREFIX_MODEL = { router: model(2).router };
function hintOf(req: { messages: unknown[]; tools: unknown }, user?: string): RouteHint {
  return chatRouteHint(PREFIX_MODEL, req, user) as RouteHint;
}

/** Chooses, then sends: learns and counts one more in flight. */
function route(m: Model, hint: RouteHint | string | undefined): number {
  const i = m.router.choose(m.ups, hint, undefined, Date.now());
  assert.ok(i >= 0, 'a choice');
  m.router.learn(hint, m.ups, m.ups[i]!);
  m.ups[i]!.inflight++;
  return i;
}

/** A request ended. */
function done(m: Model, i: number): void {
  m.ups[i]!.inflight--;
}

describe('prefix units', () => {
  it('two requests that share their first k messages share h_1..h_k, and differ after', () => {
    const a = prefixUnits(1, turn(1, 3).messages, TOOLS)!;
    const b = prefixUnits(1, turn(1, 2).messages, TOOLS)!;
    // system+tools, then one unit per message.
    assert.equal(a.units.length, 1 + 5);
    assert.equal(b.units.length, 1 + 3);
    assert.deepEqual([...a.units.subarray(0, 4)], [...b.units]);
    assert.equal(a.firstTurn, 1);
    const other = prefixUnits(1, turn(2, 3).messages, TOOLS)!;
    assert.equal(other.units[0], a.units[0], 'the same system prompt and tools');
    assert.notEqual(other.units[1], a.units[1], 'another first question');
    const noTools = prefixUnits(1, turn(1, 3).messages, undefined)!;
    assert.notEqual(noTools.units[0], a.units[0], 'the tools are part of the first unit');
    // No system message and no tools: the first unit is the first message.
    const bare = prefixUnits(1, [{ role: 'user', content: 'hi' }], undefined)!;
    assert.equal(bare.units.length, 1);
    assert.equal(bare.firstTurn, 0);
    assert.equal(prefixUnits(1, [], undefined), undefined);
  });

  it('a message is hashed from its role, length, ends, parts and tool calls, at a bounded cost', () => {
    const long = 'x'.repeat(10 * SAMPLE) + 'y'.repeat(10 * SAMPLE);
    const middle = long.slice(0, 5 * SAMPLE) + 'z' + long.slice(5 * SAMPLE + 1);
    // A change in the middle of a long text is not read (approximate identity)...
    assert.equal(messageHash({ role: 'user', content: long }), messageHash({ role: 'user', content: middle }));
    // ...its length, ends, role, parts and calls are.
    assert.notEqual(messageHash({ role: 'user', content: long }), messageHash({ role: 'user', content: `${long}!` }));
    assert.notEqual(messageHash({ role: 'user', content: 'a' }), messageHash({ role: 'assistant', content: 'a' }));
    assert.notEqual(
      messageHash({ role: 'user', content: [{ type: 'text', text: 'a' }] }),
      messageHash({ role: 'user', content: [{ type: 'image_url', image_url: { url: 'data:a' } }] }),
    );
    const call = (id: string) => ({ role: 'assistant', content: null, tool_calls: [{ id, type: 'function', function: { name: 'run', arguments: '{}' } }] });
    assert.notEqual(messageHash(call('c1')), messageHash(call('c2')));
    // Anything a client can send hashes without throwing.
    for (const v of [null, 1, 'text', [], { content: [null, 1] }, { tool_calls: [null] }]) assert.equal(typeof messageHash(v), 'number');
  });

  it('chatRouteHint: a user id keys the conversation and seeds its units; without one, the first question keys it', () => {
    const req = turn(1, 2);
    const anon = hintOf(req);
    const later = hintOf(turn(1, 3));
    assert.equal(anon.user, undefined);
    assert.equal(anon.key, later.key, 'every turn has the same key');
    assert.equal(anon.minUnit, 1);
    const alice = hintOf(req, 'alice');
    assert.equal(alice.key, fnv1a('alice'));
    assert.equal(alice.minUnit, 0);
    assert.notEqual(alice.units[0], anon.units[0], "a user's units are the user's own");
    // Not routed by prefix: the user key as it was, nothing built.
    const leastLoaded = { router: undefined };
    assert.equal(chatRouteHint(leastLoaded, req, 'bob'), 'bob');
    assert.equal(chatRouteHint(leastLoaded, req, undefined), undefined);
    assert.equal(chatRouteHint(PREFIX_MODEL, { messages: 'not a list' }, 'bob'), 'bob');
    // Responses: instructions lead, a string input is one user message.
    const r = responsesRouteHint(PREFIX_MODEL, { instructions: 'be brief', input: 'hi' }, undefined) as RouteHint;
    assert.equal(r.units.length, 2);
    assert.equal(r.minUnit, 1);
  });
});

describe('prefix router', () => {
  it('sends every turn of a conversation to the same backend, by prefix after the first', () => {
    const m = model(4);
    for (let c = 0; c < 16; c++) {
      const first = route(m, hintOf(turn(c, 1)));
      done(m, first);
      for (let t = 2; t <= 8; t++) {
        const i = route(m, hintOf(turn(c, t)));
        done(m, i);
        assert.equal(i, first, `conversation ${c} turn ${t}`);
      }
    }
    const prefix = [...m.series.choices.values()].reduce((n, c) => n + c[REASON_PREFIX]!, 0);
    assert.equal(prefix, 16 * 7, 'turns after the first were routed by prefix');
    assert.ok(m.series.unitsMatched > 0 && m.series.unitsMatched < m.series.unitsSent);
  });

  it('spreads conversations that share a system prompt', () => {
    const m = model(4);
    const counts = [0, 0, 0, 0];
    for (let c = 0; c < 64; c++) {
      const i = route(m, hintOf(turn(c, 1)));
      done(m, i);
      counts[i]!++;
    }
    assert.ok(
      counts.every((n) => n >= 4 && n <= 32),
      `spread: ${counts}`,
    );
  });

  /** Sends `requests` hints at once (none ends) and checks every choice against the ceiling of its moment. */
  function burstWithin(m: Model, eps: number, hintAt: (k: number) => RouteHint, requests: number): void {
    for (let k = 1; k <= requests; k++) {
      // The backend chosen, with this request, never has more in flight than the ceiling of the
      // moment: max(routeMinCeiling, ceil((1 + eps) * (total in flight + 1) / backends)).
      const ceiling = Math.max(OPTS.routeMinCeiling, Math.ceil(((1 + eps) * k) / m.ups.length));
      const i = route(m, hintAt(k));
      assert.ok(m.ups[i]!.inflight <= ceiling, `request ${k}: ${m.ups.map((u) => u.inflight)}, ceiling ${ceiling}`);
      assert.ok(Math.max(...m.ups.map((u) => u.inflight)) <= ceiling);
    }
    const load = [...m.series.choices.values()].reduce((n, c) => n + c[REASON_LOAD]! + c[REASON_PREFIX]!, 0);
    assert.ok(load > 0, 'load moved requests');
  }

  it('a burst of new conversations on one hot system prompt stays within the bounded-load ceiling', () => {
    const m = model(4);
    const hot = `A new hot prompt. ${'Follow these rules. '.repeat(400)}`;
    // Conversations 1..200 (their first messages differ within prefix-key's SAMPLE characters).
    burstWithin(m, OPTS.routeEpsilon, (k) => hintOf(turn(k, 1, hot)), 200);
    const counts = m.ups.map((u) => u.inflight);
    assert.ok(Math.max(...counts) <= Math.ceil((1 + OPTS.routeEpsilon) * (200 / 4)), `spread: ${counts}`);
  });

  it('one conversation bursting stays where its prefix is up to the looser keep ceiling, then spreads', () => {
    const m = model(4);
    const hint = hintOf(turn(7, 3));
    // Below the floor, one backend takes the whole burst: no move at low load.
    for (let k = 1; k <= OPTS.routeMinCeiling; k++) assert.equal(m.ups[route(m, hint)]!.inflight, k);
    for (const u of m.ups) u.inflight = 0;
    burstWithin(m, OPTS.routeKeepEpsilon, () => hint, 200);
    assert.ok(m.ups.filter((u) => u.inflight > 0).length >= 2, 'spread');
  });

  it('two replicas that never talk agree on where a conversation goes', () => {
    // Two gateways, each with its own router and its own view of in-flight counts; 64
    // conversations of 8 turns, each turn through either replica (a fixed pseudo-random
    // order), up to 4 requests in flight per replica (8 on 4 backends). Sequential turns agree
    // always; under load, bounded load moves some turns (measured: 443 of 448 stay home; 289 with
    // a strict ceiling and no floor, routeMinCeiling 0).
    const replicas = [model(4), model(4)];
    const inflight: [Model, number][][] = [[], []];
    const home = new Map<number, number>();
    let agree = 0;
    let total = 0;
    let rnd = 12345;
    const next = () => (rnd = (Math.imul(rnd, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const turns: [number, number][] = [];
    for (let t = 1; t <= 8; t++) for (let c = 0; c < 64; c++) turns.push([c, t]);
    for (const [c, t] of turns) {
      const r = next() < 0.5 ? 0 : 1;
      const m = replicas[r]!;
      const i = route(m, hintOf(turn(c, t)));
      inflight[r]!.push([m, i]);
      if (inflight[r]!.length > 4) {
        const [mm, j] = inflight[r]!.shift()!;
        done(mm, j);
      }
      if (!home.has(c)) home.set(c, i);
      else {
        total++;
        if (home.get(c) === i) agree++;
      }
    }
    assert.ok(agree / total >= 0.9, `agreement ${agree}/${total}`);
  });

  it("an ejected backend's conversations move, and it comes back with its entries forgotten", () => {
    const m = model(3);
    const homes = new Map<number, number>();
    for (let c = 0; c < 30; c++) {
      const i = route(m, hintOf(turn(c, 1)));
      done(m, i);
      homes.set(c, i);
    }
    const victim = homes.get(0)!;
    const mine = [...homes].filter(([, i]) => i === victim).map(([c]) => c);
    m.ups[victim]!.eject();
    for (const c of mine) {
      const i = route(m, hintOf(turn(c, 2)));
      done(m, i);
      assert.notEqual(i, victim, 'moved off the ejected backend');
    }
    // Back in: nothing of what it was sent before is remembered.
    m.ups[victim]!.out = false;
    const bit = 1 << victim;
    for (const c of mine) assert.equal(m.router.table.get(hintOf(turn(c, 1)).units.at(-1)!) & bit, 0);
    // Every backend out: no choice (the registry then takes the one back soonest).
    for (const u of m.ups) u.out = true;
    assert.equal(m.router.choose(m.ups, hintOf(turn(0, 3)), undefined, Date.now()), -1);
  });

  it('the prefix table never holds more than its bound', () => {
    const bound = 256;
    const m = model(4, { routeEntries: bound });
    assert.ok(m.router.table.capacity <= bound);
    for (let c = 0; c < 500; c++) {
      for (let t = 1; t <= 4; t++) done(m, route(m, hintOf(turn(c, t))));
      assert.ok(m.router.table.size() <= bound);
    }
    assert.ok(m.router.table.size() > bound / 2, 'and it is used');
    const t = new PrefixTable(10);
    for (let h = 1; h < 1000; h++) t.add(h, 1);
    assert.ok(t.size() <= 10);
  });

  it("a user id alone keys the choice as 'least-loaded' does; a long vLLM queue counts as overloaded", () => {
    const m = model(3);
    const a = route(m, 'alice');
    done(m, a);
    assert.equal(route(m, 'alice'), a);
    done(m, a);
    assert.equal(m.series.upstream(m.ups[a]!.url)[REASON_KEY], 2);
    const fresh = model(3, { metricsIntervalMs: 1000 });
    const i = route(fresh, 'alice');
    done(fresh, i);
    fresh.ups[i]!.waiting = 10;
    fresh.ups[i]!.waitingAt = Date.now();
    assert.notEqual(route(fresh, 'alice'), i, 'its queue is long');
    // A stale reading is not used.
    fresh.ups[i]!.inflight = 0;
    fresh.ups[i]!.waitingAt = Date.now() - 10_000;
    for (const u of fresh.ups) u.inflight = 0;
    assert.equal(route(fresh, 'alice'), i);
  });

  it('round-robin rotates over the healthy backends', () => {
    const ups = [0, 1, 2].map((i) => new FakeUpstream(`http://h${i}`));
    const rr = createRouter(
      'round-robin',
      ups.map((u) => u.url),
      OPTS,
      new RouteSeries(),
    )!;
    assert.deepEqual(
      [0, 1, 2, 3].map(() => rr.choose(ups, 'alice', undefined, 0)),
      [0, 1, 2, 0],
    );
    ups[1]!.out = true;
    assert.deepEqual(
      [0, 1, 2].map(() => rr.choose(ups, undefined, undefined, 0)),
      [2, 0, 2],
    );
    assert.equal(createRouter('least-loaded', ['a', 'b'], OPTS, new RouteSeries()), undefined);
  });
});

describe('vLLM queue reader', () => {
  it('sums vllm:num_requests_waiting from a /metrics body, and a scrape round sets it on the upstream', async () => {
    const body = [
      '# HELP vllm:num_requests_waiting Number of requests waiting to be processed.',
      '# TYPE vllm:num_requests_waiting gauge',
      'vllm:num_requests_waiting{engine="0",model_name="m"} 3.0',
      'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0',
      'vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0',
      'vllm:num_requests_running{model_name="m"} 7.0',
    ].join('\n');
    assert.equal(waitingRequests(body), 5);
    assert.equal(waitingRequests('vllm:num_requests_running 1'), undefined);
    const server = createServer((req, res) => res.end(req.url === '/metrics' ? body : ''));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const port = (server.address() as { port: number }).port;
      const u = { url: `http://127.0.0.1:${port}/v1`, basePath: '', waiting: 0, waitingAt: 0 };
      const scraper = new LoadScraper(() => [u], 60_000);
      await scraper.round();
      scraper.stop();
      assert.equal(u.waiting, 5);
      assert.ok(u.waitingAt > 0);
    } finally {
      server.close();
    }
  });
});

describe('vLLM queue reader in the registry', () => {
  it("reads the queue of the upstreams of models routed by prefix, and of no other model's", async () => {
    const asked: string[] = [];
    const server = createServer((req, res) => {
      asked.push(`${req.headers.host}${req.url}`);
      res.end('vllm:num_requests_waiting{model_name="m"} 9\n');
    });
    // On every loopback address: 127.0.0.2 reaches it too, and its Host header tells it apart.
    await new Promise<void>((r) => server.listen(0, '0.0.0.0', r));
    const port = (server.address() as { port: number }).port;
    // Three spellings of the one server, so each is its own upstream.
    const a = `http://127.0.0.1:${port}`;
    const b = `http://127.0.0.1:${port}/v1`;
    const c = `http://127.0.0.2:${port}`;
    const registry = new UpstreamRegistry({ metricsIntervalMs: 50 });
    const catalog = new Catalog(registry, new GatewayMetrics());
    try {
      catalog.set([
        modelEntrySchema.parse({ name: 'routed', upstreams: [a, b] }),
        modelEntrySchema.parse({ name: 'spread', upstreams: [c, a], routing: 'least-loaded' }),
      ]);
      await waitFor(() => registry.get(a).waitingAt > 0 && registry.get(b).waitingAt > 0);
      assert.equal(registry.get(a).waiting, 9);
      assert.ok(!asked.some((x) => x.startsWith('127.0.0.2')), `asked: ${asked}`);
      assert.equal(registry.get(c).waitingAt, 0);
    } finally {
      await registry.close();
      server.close();
    }
  });
});

describe("'least-loaded' through UpstreamRegistry", () => {
  it('is the rule of before: rendezvous on the user key, else fewest in flight; a RouteHint gives its user key', async () => {
    const registry = new UpstreamRegistry();
    const catalog = new Catalog(registry, new GatewayMetrics());
    const urls = [1, 2, 3, 4].map((i) => `http://127.0.0.1:${40000 + i}`);
    try {
      catalog.set([modelEntrySchema.parse({ name: 'm', upstreams: urls, routing: 'least-loaded' })]);
      const state = catalog.get('m')!;
      assert.equal(state.router, undefined);
      for (const user of ['alice', 'bob', 'carol', 'dave', 'eve']) {
        // The rule as it was written before routing policies.
        const expected = urls.reduce((a, b) => (mix(fnv1a(user) ^ fnv1a(b)) > mix(fnv1a(user) ^ fnv1a(a)) ? b : a));
        assert.equal(registry.pick(state, user)!.url, expected);
        const hint = chatRouteHint({ router: model(2).router }, turn(1, 2), user);
        assert.equal(registry.pick(state, hint)!.url, expected);
      }
      state.upstreams[0]!.inflight = 3;
      state.upstreams[1]!.inflight = 1;
      state.upstreams[2]!.inflight = 2;
      state.upstreams[3]!.inflight = 5;
      assert.equal(registry.pick(state, undefined), state.upstreams[1]);
      assert.equal(registry.pick(state, hintOf(turn(1, 2))), state.upstreams[1], 'a hint without a user: fewest in flight');
      for (const u of state.upstreams) u.inflight = 0;
    } finally {
      await registry.close();
    }
  });
});

describe('prefix routing through UpstreamRegistry', () => {
  it('turns of conversations stay on one sim and hit its prefix cache; a closed sim is routed around', async () => {
    const logger = createLogger('silent');
    const sims: SimServer[] = [];
    for (let i = 0; i < 3; i++) sims.push(await startSim({ model: 'm', fast: true, logger, promptTokensDetails: true }));
    const registry = new UpstreamRegistry({ connectTimeoutMs: 1000 });
    const metrics = new GatewayMetrics();
    const catalog = new Catalog(registry, metrics);
    try {
      catalog.set([modelEntrySchema.parse({ name: 'm', upstreams: sims.map((s) => s.url) })]);
      const state = catalog.get('m')!;
      assert.equal(state.router?.policy, 'prefix');
      const ask = async (c: number, t: number) => {
        const body = { model: 'm', max_tokens: 2, ...turn(c, t, 'You are terse.') };
        const r = await requestUpstream(registry, state, chatRouteHint(state, body, undefined), JSON.stringify(body));
        assert.equal(r.status, 200);
        return JSON.parse(r.body.toString()) as { usage: { prompt_tokens_details?: { cached_tokens?: number } } };
      };
      const counts = () => sims.map((s) => s.stats.requests);
      for (let c = 0; c < 6; c++) {
        const before = counts();
        let cached = 0;
        for (let t = 1; t <= 4; t++) cached += (await ask(c, t)).usage.prompt_tokens_details?.cached_tokens ?? 0;
        const delta = counts().map((n, i) => n - before[i]!);
        assert.equal(delta.filter((n) => n === 4).length, 1, `conversation ${c} on one sim: ${delta}`);
        assert.ok(cached > 0, 'later turns found their prefix cached');
      }
      // The same catalog again (a resync): the router and what it learned are kept.
      const router = state.router;
      catalog.set([modelEntrySchema.parse({ name: 'm', upstreams: sims.map((s) => s.url) })]);
      assert.equal(catalog.get('m')!.router, router);
      // A sim goes away: every turn is still answered.
      await sims[0]!.close();
      for (let c = 0; c < 6; c++) await ask(c, 5);
      const text = metrics.render();
      for (const reason of ROUTE_REASONS) assert.match(text, new RegExp(`rc_gateway_route_choices_total\\{model="m",upstream="[^"]+",reason="${reason}"\\}`));
      assert.match(text, /rc_gateway_route_prefix_units_total\{model="m",kind="matched"\} [1-9]/);
    } finally {
      await registry.close();
      await Promise.all(sims.slice(1).map((s) => s.close()));
    }
  });
});
