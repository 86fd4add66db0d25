// The gateway in front of `rc sim --fast`, compared with the same sim directly, in one run:
// non-stream completions (20 tokens) and 20-chunk streams. The gateway's CPU µs/request is its
// own process's CPU time (goal: <= 25 µs non-stream, <= 50 µs per 20-chunk stream).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKey, hashKey } from '../../lib/keys.js';
import { randomId } from '../../lib/ids.js';
import { compare, ratiosTo, spawnRc, type Comparison, type LoadOptions, type LoadRequest, type SpawnedTarget, type Target } from '../load.js';
import type { LoadScenario } from './scenario.js';

export const MODEL = 'bench-model';
/** A chat completion of 20 tokens (`key`: through the gateway). */
export const completion = (stream: boolean, key?: string): LoadRequest => ({
  method: 'POST',
  path: '/v1/chat/completions',
  headers: key ? { authorization: `Bearer ${key}` } : {},
  body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Hello there, how are you?' }], max_tokens: 20, ignore_eos: true, stream }),
});

/** The messages protocol, streamed: translated by the gateway onto the same chat backend. */
export const messagesStream = (key: string): LoadRequest => ({
  method: 'POST',
  path: '/v1/messages',
  headers: { 'x-api-key': key },
  body: JSON.stringify({ model: MODEL, max_tokens: 20, stream: true, messages: [{ role: 'user', content: 'Hello there, how are you?' }] }),
});

/** Limits high enough not to refuse a benchmark. */
export const NO_LIMITS = { RC_MODEL_RPM: '1000000000', RC_MODEL_TPM: '100000000000', RC_MODEL_DAILY_TOKENS: '100000000000' };

/**
 * The benchmark key's account: not 1, which tests running at the same time on the same Redis
 * publish limit changes for over the shared event channel (a profile once saw rpm 1 mid-run).
 */
const BENCH_ACCOUNT_ID = 1_000_000 + Math.floor(Math.random() * 1_000_000);

/** The `rc gateway` arguments and environment for `backend` and one key (its files written in `dir`); gates in Redis when `redis` is given, else in memory. */
export function gatewayCommand(
  dir: string,
  backend: string,
  key: string,
  redis?: { url: string; prefix: string },
  upstreams: readonly string[] = [backend],
): { args: string[]; env: Record<string, string> } {
  const keysFile = join(dir, 'keys.json');
  writeFileSync(keysFile, JSON.stringify([{ keyHash: hashKey(key), accountId: BENCH_ACCOUNT_ID }]));
  const config = join(dir, `config-${randomId('', 6)}.json`);
  writeFileSync(config, JSON.stringify({ models: [{ name: MODEL, upstreams }] }));
  const gates: Record<string, string> = redis ? { REDIS_URL: redis.url, RC_GATE_KEY_PREFIX: redis.prefix } : { REDIS_URL: '' };
  return { args: ['gateway', '--port', '0', '--keys-file', keysFile], env: { RC_CONFIG: config, RC_METRICS_PORT: '0', ...NO_LIMITS, ...gates } };
}

/** `rc gateway` in front of `backend`, one key, no effective limits; gates in Redis when `redis` is given, else in memory. */
export async function startGateway(label: string, dir: string, backend: string, key: string, redis?: { url: string; prefix: string }): Promise<SpawnedTarget> {
  const { args, env } = gatewayCommand(dir, backend, key, redis);
  return spawnRc(label, args, { cpu: 0, env });
}

/** One comparison: the request through the gateway, then the backend row it is measured against. */
async function throughGateway(
  name: string,
  request: LoadRequest,
  direct: LoadRequest,
  gateway: Target,
  backend: Target,
  options: LoadOptions,
): Promise<Comparison> {
  const via = await compare({ name, request, targets: [gateway], options });
  const base = (await compare({ name, request: direct, targets: [backend], options })).results[0]!;
  const rows = [...via.results, base];
  return { name, request: via.request, results: rows, baseline: base.label, ratios: ratiosTo(base, rows) };
}

export const gatewayScenarios: LoadScenario[] = [
  {
    name: 'gateway',
    async run(options) {
      const dir = mkdtempSync(join(tmpdir(), 'rc-bench-gw-'));
      const sim = await spawnRc('backend (sim directly)', ['sim', '--fast', '--port', '0', '--model', MODEL], { cpu: 1 });
      try {
        const key = generateKey();
        const gateway = await startGateway('gateway -> sim', dir, sim.url, key);
        try {
          const results = [];
          for (const stream of [false, true]) {
            const name = stream ? 'gateway stream (20 chunks)' : 'gateway non-stream (20 tokens)';
            results.push(await throughGateway(name, completion(stream, key), completion(stream), gateway, sim, options));
          }
          // /v1/messages through the gateway against the chat stream straight from the backend.
          results.push(await throughGateway('gateway messages stream (max 20 tokens)', messagesStream(key), completion(true), gateway, sim, options));
          return results;
        } finally {
          await gateway.stop();
        }
      } finally {
        await sim.stop();
        rmSync(dir, { recursive: true, force: true });
      }
    },
  },
];
