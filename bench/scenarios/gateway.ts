// The gateway in front of `rc sim --fast`, compared with the same sim directly, in one run:
// non-stream completions (20 tokens) and 20-chunk streams. The gateway's CPU µs/request is its
// own process's CPU time (goal: <= 25 µs non-stream, <= 50 µs per 20-chunk stream).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKey, hashKey } from '../../lib/keys.js';
import { compare, spawnRc, type LoadRequest } from '../load.js';
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

export const gatewayScenarios: LoadScenario[] = [
  {
    name: 'gateway',
    async run(options) {
      const dir = mkdtempSync(join(tmpdir(), 'rc-bench-gw-'));
      const sim = await spawnRc('backend (sim directly)', ['sim', '--fast', '--port', '0', '--model', MODEL], { cpu: 1 });
      try {
        const key = generateKey();
        const keysFile = join(dir, 'keys.json');
        writeFileSync(keysFile, JSON.stringify([{ keyHash: hashKey(key), accountId: 1 }]));
        const config = join(dir, 'config.json');
        writeFileSync(config, JSON.stringify({ models: [{ name: MODEL, upstreams: [sim.url] }] }));
        // No REDIS_URL: the in-memory gates, limits high enough not to refuse the benchmark.
        const gateway = await spawnRc('gateway -> sim', ['gateway', '--port', '0', '--keys-file', keysFile], {
          cpu: 0,
          env: { RC_CONFIG: config, REDIS_URL: '', RC_MODEL_RPM: '1000000000', RC_MODEL_TPM: '100000000000', RC_MODEL_DAILY_TOKENS: '100000000000' },
        });
        try {
          const results = [];
          for (const stream of [false, true]) {
            const name = stream ? 'gateway stream (20 chunks)' : 'gateway non-stream (20 tokens)';
            const viaGateway = await compare({ name, request: completion(stream, key), targets: [gateway], options });
            const direct = await compare({ name, request: completion(stream), targets: [sim], options });
            // One comparison: gateway row, then the backend row it is measured against.
            const base = direct.results[0]!;
            const rows = [...viaGateway.results, base];
            results.push({
              name,
              request: viaGateway.request,
              results: rows,
              baseline: base.label,
              ratios: Object.fromEntries(rows.map((r) => [r.label, base.rps > 0 ? r.rps / base.rps : NaN])),
            });
          }
          // /v1/messages through the gateway against the chat stream straight from the backend.
          const name = 'gateway messages stream (max 20 tokens)';
          const viaMessages = await compare({ name, request: messagesStream(key), targets: [gateway], options });
          const direct = await compare({ name, request: completion(true), targets: [sim], options });
          const base = direct.results[0]!;
          const rows = [...viaMessages.results, base];
          results.push({
            name,
            request: viaMessages.request,
            results: rows,
            baseline: base.label,
            ratios: Object.fromEntries(rows.map((r) => [r.label, base.rps > 0 ? r.rps / base.rps : NaN])),
          });
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
