// `node dist/bench/routing/route-cost.js`: what routing by prefix costs a request, in
// instructions (callgrind, so not moved by this machine's noise): the route hint
// (chatRouteHint), the choice among 4 upstreams (PrefixRouter.choose) and learning, run in a
// loop on one request body, under callgrind for two loop counts; the difference over the
// difference of counts is one request's cost (start-up and JIT warm-up cancel out). Two bodies:
// the profile's chat request (one short message: bench:profile's `chat` workload) and an agent's
// (a 48 KB system prompt, 20 tools, 40 messages, 20 of them with a tool call).
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chatRouteHint } from '../../gateway/backends/route-hint.js';
import { createRouter, type PrefixRouter, type RoutedUpstream } from '../../gateway/backends/router.js';
import { fnv1a } from '../../gateway/backends/prefix-key.js';
import { DEFAULT_UPSTREAM_OPTIONS } from '../../gateway/backends/upstreams.js';
import { RouteSeries } from '../../gateway/metrics.js';
import { findValgrind, totalOf } from '../profile/callgrind.js';

/** The profile's chat request (bench/scenarios/gateway.ts `completion`). */
const CHAT = { model: 'bench-model', messages: [{ role: 'user', content: 'Hello there, how are you?' }], max_tokens: 20 };

/** An agent's request: a long system prompt, tools, and a history with tool calls. */
function agentBody(): Record<string, unknown> {
  const tools = Array.from({ length: 20 }, (_, i) => ({
    type: 'function',
    function: { name: `tool_${i}`, description: 'Does a thing. '.repeat(40), parameters: { type: 'object', properties: {} } },
  }));
  const messages: unknown[] = [{ role: 'system', content: 'You are a coding agent. '.repeat(2000) }];
  for (let t = 0; t < 20; t++) {
    messages.push({ role: 'user', content: `Step ${t}: ${'look at this file '.repeat(30)}` });
    messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: `call_${t}`, type: 'function', function: { name: 'tool_1', arguments: `{"path":"src/${t}.ts"}` } }],
    });
  }
  return { model: 'bench-model', messages, tools };
}

class Up implements RoutedUpstream {
  readonly seed: number;
  inflight = 0;
  ejections = 0;
  waiting = 0;
  waitingAt = 0;
  constructor(url: string) {
    this.seed = fnv1a(url);
  }
  healthy(): boolean {
    return true;
  }
}

/** The loop that callgrind counts: `n` requests of `body`, each one hinted, routed and learned. */
function loop(body: Record<string, unknown>, n: number): number {
  const urls = ['http://10.0.0.1:8000', 'http://10.0.0.2:8000', 'http://10.0.0.3:8000', 'http://10.0.0.4:8000'];
  const ups = urls.map((u) => new Up(u));
  const router = createRouter('prefix', urls, DEFAULT_UPSTREAM_OPTIONS, new RouteSeries()) as PrefixRouter;
  const model = { router };
  let sum = 0;
  for (let k = 0; k < n; k++) {
    const hint = chatRouteHint(model, body, undefined);
    const i = router.choose(ups, hint, undefined, 0);
    router.learn(hint, ups, ups[i]!);
    sum += i;
  }
  return sum;
}

/** Instructions of this script with `n` iterations of `which`, under callgrind. */
function count(valgrind: string, which: string, n: number): number {
  const dir = mkdtempSync(join(tmpdir(), 'rc-route-cost-'));
  try {
    execFileSync(
      valgrind,
      ['--tool=callgrind', `--callgrind-out-file=${join(dir, 'out.%p')}`, process.execPath, fileURLToPath(import.meta.url), which, String(n)],
      {
        stdio: 'ignore',
      },
    );
    return readdirSync(dir).reduce((s, f) => s + totalOf(readFileSync(join(dir, f), 'utf8')), 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const BODIES: Record<string, () => Record<string, unknown>> = { chat: () => CHAT, agent: agentBody };

if (import.meta.url === `file://${process.argv[1]}`) {
  const [which, n] = process.argv.slice(2);
  if (which !== undefined) loop(BODIES[which]!(), Number(n));
  else {
    const valgrind = findValgrind();
    if (!valgrind) throw new Error('valgrind is not installed');
    for (const name of Object.keys(BODIES)) {
      const few = 10_000;
      const many = 110_000;
      const perRequest = (count(valgrind, name, many) - count(valgrind, name, few)) / (many - few);
      console.log(`${name}: ${(perRequest / 1000).toFixed(2)}k instructions per request for the hint, the choice among 4 upstreams and learning`);
    }
  }
}
