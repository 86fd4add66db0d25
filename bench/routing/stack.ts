// What one policy of the routing benchmark runs against: N sims of one model with bounded KV
// caches and realistic prefill (one worker thread, sim-worker.ts), and either two gateway
// replicas routing with the policy (a worker thread each, gateway-worker.ts; turns of a
// conversation alternate between them, as behind a round-robin balancer), or the oracle: the
// benchmark itself asks every sim how much of the prompt it holds (`POST /rc/cache-probe`,
// sim-only) and sends the request straight to the best one. The clients run on the main thread.
import { request } from 'undici';
import { generateKey } from '../../lib/keys.js';
import { streamOnce, type Outcome } from './client.js';
import type { GatewayWorkerData } from './gateway-worker.js';
import type { SimCounters } from './sim-worker.js';
import { MODEL, type Conversation } from './traffic.js';
import { WorkerHost } from './worker-host.js';

/** The gateway's routing policies (catalog `routing`), and the oracle that knows every cache. */
export type Policy = 'round-robin' | 'least-loaded' | 'prefix' | 'oracle';
export const POLICIES: readonly Policy[] = ['round-robin', 'least-loaded', 'prefix', 'oracle'];

/** The sims' engine in the benchmark: a cache that cannot hold every conversation everywhere. */
export interface Engine {
  sims: number;
  kvCacheBlocks: number;
  prefillTokensPerSecond: number;
  ttftMs: number;
  tokensPerSecond: number;
  maxNumSeqs: number;
}

export const routingEngine = (o: Partial<Engine> = {}): Engine => ({
  sims: 8,
  // 192k tokens of KV cache per sim, a 70B-class model's budget on its GPUs (as the prefill speed
  // below): the shared prefix plus the histories of the conversations routed to one sim fit
  // (about 60k tokens); every conversation's history on every sim, what balance-only routing
  // makes, does not (about 360k).
  kvCacheBlocks: 12_000,
  // A larger model than the sim's default 8B (a 70B-class model's prefill on one GPU): prefill,
  // what prefix caching saves, is then most of a turn's time to first token, as on real agents.
  prefillTokensPerSecond: 2500,
  ttftMs: 20,
  tokensPerSecond: 200,
  maxNumSeqs: 16,
  ...o,
});

export class RoutingStack {
  private readonly inflight: number[];
  private turn = 0;

  private constructor(
    readonly policy: Policy,
    private readonly sims: WorkerHost<string[], SimCounters[]>,
    private readonly gateways: WorkerHost<string, null>[],
    private readonly key: string,
  ) {
    this.inflight = sims.ready.map(() => 0);
  }

  static async start(policy: Policy, engine: Engine): Promise<RoutingStack> {
    const sims = await WorkerHost.start<string[], SimCounters[]>('./sim-worker.js', engine);
    const key = generateKey();
    const gateways: WorkerHost<string, null>[] = [];
    if (policy !== 'oracle') {
      const data: GatewayWorkerData = { upstreams: sims.ready, routing: policy, key };
      for (let r = 0; r < 2; r++) gateways.push(await WorkerHost.start<string, null>('./gateway-worker.js', data));
    }
    return new RoutingStack(policy, sims, gateways, key);
  }

  /** Sends the conversation's current turn; `replica` picks the gateway (ignored by the oracle). */
  async send(c: Conversation, replica: number): Promise<Outcome> {
    if (this.policy === 'oracle') return this.sendOracle(c);
    const gw = this.gateways[replica % this.gateways.length]!.ready;
    if (c.protocol === 'messages')
      return streamOnce('messages', `${gw}/v1/messages`, { 'x-api-key': this.key, 'anthropic-version': '2023-06-01' }, c.messagesBody());
    return streamOnce('chat', `${gw}/v1/chat/completions`, { authorization: `Bearer ${this.key}` }, c.chatBody());
  }

  /** The oracle: the sim holding the most of this prompt (ties: the fewest in flight, then the next in turn). */
  private async sendOracle(c: Conversation): Promise<Outcome> {
    const urls = this.sims.ready;
    const body = c.chatBody();
    const probe = JSON.stringify({ model: MODEL, messages: body.messages, tools: body.tools });
    const held = await Promise.all(
      urls.map(async (url) => {
        const r = await request(`${url}/rc/cache-probe`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: probe });
        return ((await r.body.json()) as { cached_tokens: number }).cached_tokens;
      }),
    );
    const start = this.turn++ % urls.length;
    let best = start;
    for (let k = 1; k < urls.length; k++) {
      const i = (start + k) % urls.length;
      if (held[i]! > held[best]! || (held[i] === held[best] && this.inflight[i]! < this.inflight[best]!)) best = i;
    }
    this.inflight[best]!++;
    try {
      return await streamOnce(c.protocol, `${urls[best]!}/v1/chat/completions`, {}, body);
    } finally {
      this.inflight[best]!--;
    }
  }

  /** Requests each sim has received so far. */
  async requestsPerSim(): Promise<number[]> {
    return (await this.sims.stats()).map((s) => s.requests);
  }

  /**
   * Prompt tokens queried and served from the sims' prefix caches so far (their own counters), and
   * the engine times to first token of every generation so far.
   */
  async cacheCounters(): Promise<{ queries: number; hits: number; firstTokenMs: number[] }> {
    let queries = 0;
    let hits = 0;
    const firstTokenMs: number[] = [];
    for (const s of await this.sims.stats()) {
      queries += s.prefixCacheQueries;
      hits += s.prefixCacheHits;
      firstTokenMs.push(...s.firstTokenMs);
    }
    return { queries, hits, firstTokenMs };
  }

  async close(): Promise<void> {
    for (const g of this.gateways) await g.close();
    await this.sims.close();
  }
}
