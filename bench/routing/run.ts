// `npm run bench:routing`: the routing benchmark of issue 31, every policy side by side in one run
// on the same agent-shaped traffic (bench/routing/traffic.ts) and the same engine
// (bench/routing/stack.ts). For each policy: fresh sims, the conversations (64 at once, 10 turns
// each), then the hot-prefix burst. Reported per policy, from the sims' own counters and the
// clients' clocks: the prefix-cache hit share (and its ratio to the oracle's), time to first token
// p50 and p99 (at the clients, overall and per protocol; and the sims' engine figure, free of this
// machine's event-loop lag), the whole run's time, load imbalance (max over mean of requests per sim) in the
// conversations and in the burst, and how often consecutive turns of a chat conversation, sent
// to alternating gateway replicas, reached the same sim (the replicas' agreement).
//
// Environment: RC_ROUTING_POLICIES (comma list, default all), RC_ROUTING_CONVERSATIONS,
// RC_ROUTING_TURNS, RC_ROUTING_PREFIX_TOKENS, RC_ROUTING_SIMS, RC_BENCH_RESULTS_DIR.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { percentile, type Outcome } from './client.js';
import { POLICIES, routingEngine, RoutingStack, type Engine, type Policy } from './stack.js';
import { burst, conversations, routingTraffic, type TrafficShape } from './traffic.js';

export interface PolicyResult {
  policy: Policy;
  requests: number;
  failed: number;
  /** The failures by status (0: no response), to tell a routing failure from an overloaded machine. */
  failures: Record<string, number>;
  /** Prompt tokens served from the sims' prefix caches, over all prompt tokens (conversations only). */
  hitShare: number;
  ttftP50Ms: number;
  ttftP99Ms: number;
  /**
   * Time to first token p50 of each protocol's conversations: chat completions (no user id: what
   * least-loaded spreads) and messages (with a user id: sticky under least-loaded too).
   */
  ttftP50ChatMs: number;
  ttftP50MessagesMs: number;
  /**
   * The sims' own time to first token (batch wait + computed prefill) p50 and p99, conversations
   * only: what the GPUs would give, apart from this machine's event-loop lag (client figures include it).
   */
  engineTtftP50Ms: number;
  engineTtftP99Ms: number;
  /** The sims' own time to first token p50 of the chat-completions conversations (their answers name it). */
  engineTtftP50ChatMs: number;
  totalS: number;
  /** Max over mean of requests per sim. */
  imbalance: number;
  burstImbalance: number;
  /** Consecutive turns of chat conversations that reached the same sim (undefined when unknown). */
  agreement: number | undefined;
}

const countBy = (xs: string[]): Record<string, number> => {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
};

const imbalance = (before: number[], after: number[]): number => {
  const d = after.map((a, i) => a - before[i]!);
  const mean = d.reduce((s, x) => s + x, 0) / d.length;
  return mean === 0 ? Number.NaN : Math.max(...d) / mean;
};

const ttfts = (outcomes: readonly Outcome[], protocol: Outcome['protocol'], engine = false): number[] =>
  outcomes.filter((o) => o.protocol === protocol).map((o) => (engine ? o.engineTtftMs : o.ttftMs));

/** Every conversation at once, each turn after the previous one's answer; turns alternate replicas. */
async function converse(stack: RoutingStack, shape: TrafficShape): Promise<{ outcomes: Outcome[]; agreement: number | undefined }> {
  const outcomes: Outcome[] = [];
  let same = 0;
  let pairs = 0;
  await Promise.all(
    conversations(shape).map(async (c) => {
      let previous: string | undefined;
      for (let t = 0; t < shape.turns; t++) {
        c.nextTurn(t);
        const o = await stack.send(c, c.id + t);
        outcomes.push(o);
        if (o.servedBy !== undefined && previous !== undefined) {
          pairs++;
          if (o.servedBy === previous) same++;
        }
        previous = o.servedBy;
      }
    }),
  );
  return { outcomes, agreement: pairs === 0 ? undefined : same / pairs };
}

export async function runPolicy(policy: Policy, shape: TrafficShape, engine: Engine): Promise<PolicyResult> {
  const stack = await RoutingStack.start(policy, engine);
  try {
    const t0 = performance.now();
    const { outcomes, agreement } = await converse(stack, shape);
    const totalS = (performance.now() - t0) / 1000;
    const cache = await stack.cacheCounters();
    const afterTalk = await stack.requestsPerSim();
    const hot = await Promise.all(burst(shape).map((c, i) => stack.send(c, i)));
    const all = [...outcomes, ...hot];
    return {
      policy,
      requests: all.length,
      failed: all.filter((o) => !o.ok).length,
      failures: countBy(all.filter((o) => !o.ok).map((o) => String(o.status))),
      hitShare: cache.queries === 0 ? 0 : cache.hits / cache.queries,
      ttftP50Ms: percentile(
        outcomes.map((o) => o.ttftMs),
        50,
      ),
      ttftP99Ms: percentile(
        outcomes.map((o) => o.ttftMs),
        99,
      ),
      engineTtftP50Ms: percentile(cache.firstTokenMs, 50),
      engineTtftP99Ms: percentile(cache.firstTokenMs, 99),
      engineTtftP50ChatMs: percentile(ttfts(outcomes, 'chat', true), 50),
      ttftP50ChatMs: percentile(ttfts(outcomes, 'chat'), 50),
      ttftP50MessagesMs: percentile(ttfts(outcomes, 'messages'), 50),
      totalS,
      imbalance: imbalance(
        afterTalk.map(() => 0),
        afterTalk,
      ),
      burstImbalance: imbalance(afterTalk, await stack.requestsPerSim()),
      agreement,
    };
  } finally {
    await stack.close();
  }
}

export async function runRouting(policies: readonly Policy[], shape: TrafficShape, engine: Engine): Promise<PolicyResult[]> {
  const results: PolicyResult[] = [];
  for (const p of policies) results.push(await runPolicy(p, shape, engine));
  return results;
}

const fmt = (x: number | undefined, digits = 2) => (x === undefined || Number.isNaN(x) ? '-' : x.toFixed(digits));

export function printRouting(results: readonly PolicyResult[]): void {
  const oracle = results.find((r) => r.policy === 'oracle');
  const today = results.find((r) => r.policy === 'least-loaded');
  console.log('\nrouting: agent-shaped conversations over a model served by several sims');
  console.table(
    results.map((r) => ({
      policy: r.policy,
      requests: r.requests,
      failed: r.failed
        ? `${r.failed} (${Object.entries(r.failures)
            .map(([s, n]) => `${n}x ${s}`)
            .join(', ')})`
        : 0,
      'hit share': fmt(r.hitShare, 3),
      'of oracle': oracle ? fmt(r.hitShare / oracle.hitShare) : '-',
      'ttft p50 ms': fmt(r.ttftP50Ms, 0),
      'ttft p99 ms': fmt(r.ttftP99Ms, 0),
      'p50 gain vs least-loaded': today ? fmt(today.ttftP50Ms / r.ttftP50Ms) : '-',
      'engine p50 ms': fmt(r.engineTtftP50Ms, 0),
      'engine p99 ms': fmt(r.engineTtftP99Ms, 0),
      'engine p50 gain': today ? fmt(today.engineTtftP50Ms / r.engineTtftP50Ms) : '-',
      'chat engine p50 ms': fmt(r.engineTtftP50ChatMs, 0),
      'chat engine p50 gain': today ? fmt(today.engineTtftP50ChatMs / r.engineTtftP50ChatMs) : '-',
      'chat p50 ms': fmt(r.ttftP50ChatMs, 0),
      'chat p50 gain': today ? fmt(today.ttftP50ChatMs / r.ttftP50ChatMs) : '-',
      'messages p50 ms': fmt(r.ttftP50MessagesMs, 0),
      'messages p50 gain': today ? fmt(today.ttftP50MessagesMs / r.ttftP50MessagesMs) : '-',
      'total s': fmt(r.totalS, 1),
      imbalance: fmt(r.imbalance),
      'burst imbalance': fmt(r.burstImbalance),
      'replicas agree': fmt(r.agreement, 3),
    })),
  );
}

function fromEnv(): { policies: Policy[]; shape: TrafficShape; engine: Engine } {
  const n = (name: string) => (process.env[name] ? Number(process.env[name]) : undefined);
  const policies = (process.env.RC_ROUTING_POLICIES?.split(',') ?? [...POLICIES]) as Policy[];
  for (const p of policies) if (!POLICIES.includes(p)) throw new Error(`RC_ROUTING_POLICIES: unknown policy ${p} (one of ${POLICIES.join(', ')})`);
  const shape = routingTraffic({
    ...(n('RC_ROUTING_CONVERSATIONS') ? { conversations: n('RC_ROUTING_CONVERSATIONS')!, burst: n('RC_ROUTING_CONVERSATIONS')! } : {}),
    ...(n('RC_ROUTING_TURNS') ? { turns: n('RC_ROUTING_TURNS')! } : {}),
    ...(n('RC_ROUTING_PREFIX_TOKENS') ? { prefixTokens: n('RC_ROUTING_PREFIX_TOKENS')! } : {}),
  });
  return { policies, shape, engine: routingEngine(n('RC_ROUTING_SIMS') ? { sims: n('RC_ROUTING_SIMS')! } : {}) };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { policies, shape, engine } = fromEnv();
  const results = await runRouting(policies, shape, engine);
  printRouting(results);
  const dir = resolve(process.env.RC_BENCH_RESULTS_DIR ?? 'bench/results');
  mkdirSync(dir, { recursive: true });
  const file = join(dir, `routing-${new Date().toISOString().replace(/[:.]/g, '-')}.json`);
  writeFileSync(file, `${JSON.stringify({ shape, engine, results }, null, 2)}\n`);
  console.log(`\nwrote ${file}`);
}
