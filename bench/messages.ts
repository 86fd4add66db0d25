// Benchmark of the messages translation (issue #4). Run: `node dist/bench/messages.js` after a
// build. Prints a table and writes JSON (path: argv[2], default
// messages-bench.json in the working directory).
//
// 1. tinybench, pure CPU: one upstream chunk through SseParser + StreamTranslator, and a whole
//    captured 20-chunk vLLM-style stream (continuous usage on every chunk) translated.
// 2. Side by side over HTTP: the same 20-token streamed request sent straight to the sim backend
//    (chat completions) and through the gateway's /v1/messages; wall time and this process's
//    CPU per stream (client + gateway + sim all run here, so the difference is the gateway's).
// Goal: at most 80 µs of gateway CPU per translated 20-chunk stream.
import { writeFileSync } from 'node:fs';
import { Bench } from 'tinybench';
import { request } from 'undici';
import { modelEntrySchema } from '../lib/config.js';
import { generateKey, hashKey } from '../lib/keys.js';
import { createLogger } from '../lib/log.js';
import { startSim, type SimServer } from '../sim/server.js';
import { memoryKeySource } from '../gateway/auth/keys.js';
import { createGateway, type Gateway } from '../gateway/server.js';
import { messagesRoutes } from '../gateway/messages/routes.js';
import { ThinkingSigner } from '../gateway/messages/signature.js';
import { SseParser } from '../gateway/messages/sse.js';
import { StreamTranslator } from '../gateway/messages/stream.js';

const CHUNKS = 20;

interface HttpRun {
  msPerStream: number;
  cpuUsPerStream: number;
}

export interface MessagesBenchResult {
  perChunkUs: number;
  perStreamUs: number;
  http: {
    direct: HttpRun;
    /** The same chat request relayed by the gateway untranslated (the core's cost alone). */
    gatewayChat: HttpRun;
    gateway: HttpRun;
    gatewayCpuUsPerStream: number;
  };
  goalUs: number;
}

const PROMPT = [{ role: 'user', content: 'Write a story about a lighthouse keeper.' }];
/** The chat request: a 20-token stream with continuous usage on every chunk (what the gateway asks a backend for). */
const CHAT_BODY = JSON.stringify({
  model: 'bench-model',
  max_tokens: CHUNKS,
  stream: true,
  ignore_eos: true,
  stream_options: { include_usage: true, continuous_usage_stats: true },
  messages: PROMPT,
});
const MESSAGES_BODY = JSON.stringify({ model: 'bench-model', max_tokens: CHUNKS, stream: true, messages: PROMPT });

/** The sim backend and a gateway with the messages routes in front of it, in this process, with one key. */
class BenchStack {
  private constructor(
    readonly sim: SimServer,
    readonly gateway: Gateway,
    readonly key: string,
  ) {}

  static async start(): Promise<BenchStack> {
    const logger = createLogger('silent');
    const sim = await startSim({ model: 'bench-model', fast: true, logger });
    const key = generateKey();
    const gateway = await createGateway({
      port: 0,
      logger,
      models: [modelEntrySchema.parse({ name: 'bench-model', upstreams: [sim.url] })],
      keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: 1 }]),
      routes: [messagesRoutes({ thinkingSecret: 'bench' })],
    });
    return new BenchStack(sim, gateway, key);
  }

  async close(): Promise<void> {
    await this.gateway.close();
    await this.sim.close();
  }
}

/** A real upstream stream, as the bytes arrived. */
async function captureStream(simUrl: string): Promise<Buffer[]> {
  const captured: Buffer[] = [];
  const r = await request(`${simUrl}/v1/chat/completions`, { method: 'POST', body: CHAT_BODY, headers: { 'content-type': 'application/json' } });
  for await (const c of r.body) captured.push(c as Buffer);
  return captured;
}

/** tinybench, pure CPU: one chunk, then the whole captured stream, through SseParser + StreamTranslator. */
async function translationBench(captured: Buffer[]): Promise<{ perChunkUs: number; perStreamUs: number; sink: number }> {
  const events = Buffer.concat(captured)
    .toString('utf8')
    .split('\n\n')
    .filter((e) => e.startsWith('data: {'));
  const oneChunk = Buffer.from(`${events[Math.min(5, events.length - 1)]!}\n\n`);
  const signer = new ThinkingSigner('bench');
  let sink = 0;
  const bench = new Bench({ time: 500, warmup: true });
  bench.add('translate one chunk (parse SSE + JSON + emit events)', () => {
    const t = new StreamTranslator({ model: 'bench-model', signer });
    const p = new SseParser((d) => {
      sink += t.pushData(d).length;
    });
    p.push(oneChunk);
  });
  bench.add(`translate a ${events.length}-event stream (${CHUNKS} tokens)`, () => {
    const t = new StreamTranslator({ model: 'bench-model', signer });
    let out = 0;
    const p = new SseParser((d) => {
      out += t.pushData(d).length;
    });
    for (const c of captured) p.push(c);
    p.end();
    sink += out;
  });
  await bench.run();
  console.table(bench.table());
  const meanUs = (i: number) => {
    const r = bench.tasks[i]!.result as unknown as { latency?: { mean: number }; mean?: number };
    return (r.latency?.mean ?? r.mean ?? NaN) * 1000;
  };
  return { perChunkUs: meanUs(0), perStreamUs: meanUs(1), sink };
}

/** Wall time and this process's CPU per stream over `streams` requests, after 20 unmeasured ones. */
async function timeStreams(url: string, body: string, headers: Record<string, string>, streams: number): Promise<HttpRun> {
  for (let i = 0; i < 20; i++) await drain(url, body, headers); // warm up
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  for (let i = 0; i < streams; i++) await drain(url, body, headers);
  const ms = performance.now() - t0;
  const cpu = process.cpuUsage(cpu0);
  return { msPerStream: ms / streams, cpuUsPerStream: (cpu.user + cpu.system) / streams };
}

function report(result: MessagesBenchResult, sink: number): void {
  const { direct, gatewayChat, gateway } = result.http;
  console.table({
    'backend directly': { 'ms/stream': direct.msPerStream.toFixed(3), 'CPU µs/stream': direct.cpuUsPerStream.toFixed(1) },
    'gateway /v1/chat/completions': { 'ms/stream': gatewayChat.msPerStream.toFixed(3), 'CPU µs/stream': gatewayChat.cpuUsPerStream.toFixed(1) },
    'gateway /v1/messages': { 'ms/stream': gateway.msPerStream.toFixed(3), 'CPU µs/stream': gateway.cpuUsPerStream.toFixed(1) },
  });
  console.log(
    `translation CPU per ${CHUNKS}-chunk stream: ${result.perStreamUs.toFixed(1)} µs (goal ≤ ${result.goalUs} µs); ` +
      `whole gateway CPU per stream over HTTP: ${result.http.gatewayCpuUsPerStream.toFixed(1)} µs (sink ${sink > 0 ? 'ok' : 'empty'})`,
  );
}

export async function runMessagesBench(streams = 300): Promise<MessagesBenchResult> {
  const stack = await BenchStack.start();
  try {
    const { sim, gateway: gw, key } = stack;
    const { perChunkUs, perStreamUs, sink } = await translationBench(await captureStream(sim.url));
    const direct = await timeStreams(`${sim.url}/v1/chat/completions`, CHAT_BODY, {}, streams);
    const viaChat = await timeStreams(`${gw.url}/v1/chat/completions`, CHAT_BODY, { authorization: `Bearer ${key}` }, streams);
    const viaGateway = await timeStreams(`${gw.url}/v1/messages`, MESSAGES_BODY, { 'x-api-key': key }, streams);
    const result: MessagesBenchResult = {
      perChunkUs,
      perStreamUs,
      http: { direct, gatewayChat: viaChat, gateway: viaGateway, gatewayCpuUsPerStream: viaGateway.cpuUsPerStream - direct.cpuUsPerStream },
      goalUs: 80,
    };
    report(result, sink);
    return result;
  } finally {
    await stack.close();
  }
}

async function drain(url: string, body: string, headers: Record<string, string>): Promise<void> {
  const r = await request(url, { method: 'POST', body, headers: { 'content-type': 'application/json', ...headers } });
  if (r.statusCode !== 200) throw new Error(`${url}: ${r.statusCode} ${await r.body.text()}`);
  for await (const _ of r.body) {
    /* drain */
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const result = await runMessagesBench();
  const out = process.argv[2] ?? 'messages-bench.json';
  writeFileSync(out, JSON.stringify(result, null, 2));
  console.log(`wrote ${out}`);
}
