// `npm run bench:profile`: instructions per request of the gateway, the floor relay and nginx, each
// under callgrind in front of the same `rc sim --fast` (which runs natively), for an exact number
// of requests; then the gateway's costliest functions with JIT code named. Slow (valgrind runs a
// process some 50 times slower): about a minute per target and workload. See bench/README.md.
//
// Targets: gateway (memory gates), gateway-redis (gates in Redis at REDIS_URL), gateway-prefix4
// (memory gates, the model's 4 upstreams routed by prefix: what routing costs, against gateway),
// floor (the JS relay with no gateway work), front (uWS answering from memory, no backend
// exchange), nginx.
// Environment: RC_PROFILE_TARGETS (default gateway,floor,nginx), RC_PROFILE_WORKLOADS (default
// chat,sdk-chat,stream,messages), RC_PROFILE_REQUESTS (3000 measured), RC_PROFILE_WARMUP (10000 before:
// fewer leave V8's compiler threads busy in the counted interval),
// RC_PROFILE_CONNECTIONS (8), RC_PROFILE_TOP (20 functions listed; 0: none), RC_PROFILE_TOP_OF
// (gateway: the target whose functions are listed), RC_PROFILE_INCLUSIVE (1: the list counts what
// each function calls too), RC_PROFILE_PACED (1: the backend paces its chunks 2 ms apart; use few
// connections and requests, a stream then takes 40 ms), RC_PROFILE_KEEP (1: keep the callgrind
// files and JIT maps, for callgrind_annotate --tree=caller and the like), RC_PROFILE_FLAVOUR
// (sim: the default; or a comma-separated list of vllm-0.10.1, vllm-0.10.2, vllm-0.11.1, vllm,
// sglang-0.5, sglang, llama.cpp: the backend replays that server's bytes,
// bench/profile/replay-backend.ts, and every target is profiled once per flavour; not paced).
// RC_PROFILE_REP_MOVSB (1: glibc's memcpy keeps its `rep movsb` for large copies, which callgrind
// counts one instruction a byte; by default the targets copy with the vector loop: callgrind.ts).
import { mkdtempSync, rmSync } from 'node:fs';
import { Redis } from 'ioredis';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generateKey } from '../../lib/keys.js';
import { randomId } from '../../lib/ids.js';
import { FLOOR_RELAY, RC_CLI, spawnNode, spawnRc, UWS_FRONT, type LoadRequest } from '../load.js';
import { findNginx, nginxCommand } from '../nginx.js';
import { completion, gatewayCommand, messagesStream, MODEL } from '../scenarios/gateway.js';
import { startUnderCallgrind, type CallgrindTarget, type Counts, type FunctionCost } from './callgrind.js';
import { sendExactly } from './exact-client.js';
import { FLAVOURS, isFlavour } from '../../test/gateway/messages/flavours.js';

const env = process.env;
/** replay-backend.ts, compiled next to this file. */
const REPLAY_BACKEND = fileURLToPath(new URL('./replay-backend.js', import.meta.url));
const requests = Number(env.RC_PROFILE_REQUESTS) || 3000;
const warmup = Number(env.RC_PROFILE_WARMUP) || 10_000;
const connections = Number(env.RC_PROFILE_CONNECTIONS) || 8;
const top = env.RC_PROFILE_TOP === undefined ? 20 : Number(env.RC_PROFILE_TOP);
const topOf = env.RC_PROFILE_TOP_OF ?? 'gateway';
const inclusive = env.RC_PROFILE_INCLUSIVE === '1';
const paced = env.RC_PROFILE_PACED === '1';
const keep = env.RC_PROFILE_KEEP === '1';
const targets = (env.RC_PROFILE_TARGETS ?? 'gateway,floor,nginx').split(',');
/** gateway-redis: the gates' keys live under a prefix of their own, deleted at the end. */
const REDIS_URL = env.REDIS_URL || 'redis://127.0.0.1:6379';
const redisPrefix = `rcprofile:${randomId('', 8)}:`;
const workloads = (env.RC_PROFILE_WORKLOADS ?? 'chat,sdk-chat,stream,messages').split(',');
/** The backends' bytes: `sim` (rc sim) or a real server's (replay-backend.ts). */
const flavours = (env.RC_PROFILE_FLAVOUR || 'sim').split(',');

/** The headers the official openai SDK (JS, 5.x) adds to a request: 15 in all with ours, where wrk sends 4. */
const SDK_HEADERS: Record<string, string> = {
  accept: 'application/json',
  'user-agent': 'OpenAI/JS 5.23.0',
  'x-stainless-lang': 'js',
  'x-stainless-package-version': '5.23.0',
  'x-stainless-os': 'Linux',
  'x-stainless-arch': 'x64',
  'x-stainless-runtime': 'node',
  'x-stainless-runtime-version': 'v20.20.2',
  'x-stainless-retry-count': '0',
  'x-stainless-timeout': '600',
  'accept-encoding': 'gzip, deflate',
};
const withSdkHeaders = (r: LoadRequest): LoadRequest => ({ ...r, headers: { ...SDK_HEADERS, ...r.headers } });

/** A workload: what the gateway is sent (with its key) and what a plain relay is sent instead. */
const WORKLOADS: Record<string, { gateway: (key: string) => LoadRequest; relay: LoadRequest }> = {
  chat: { gateway: (key) => completion(false, key), relay: completion(false) },
  // The same request as the SDKs send it: each header costs the gateway a call from uWS into JS.
  'sdk-chat': { gateway: (key) => withSdkHeaders(completion(false, key)), relay: withSdkHeaders(completion(false)) },
  stream: { gateway: (key) => completion(true, key), relay: completion(true) },
  // A relay cannot translate: it relays the chat stream the gateway translates from.
  messages: { gateway: messagesStream, relay: completion(true) },
};

interface Row {
  flavour: string;
  workload: string;
  target: string;
  counts: Counts;
}

async function startTarget(name: string, dir: string, backend: string, key: string): Promise<CallgrindTarget> {
  const node = [process.execPath, '--perf-basic-prof'];
  if (name === 'gateway') {
    const { args, env: extra } = gatewayCommand(dir, backend, key);
    return startUnderCallgrind('rc gateway (memory gates)', [...node, RC_CLI, ...args], extra, { kind: 'json-url' }, dir);
  }
  if (name === 'gateway-redis') {
    const { args, env: extra } = gatewayCommand(dir, backend, key, { url: REDIS_URL, prefix: redisPrefix });
    // Under callgrind the gateway runs some 50 times slower: the default 50 ms wait for Redis is
    // 1 ms of a native gateway's time, and a Redis descheduled on the loaded machine sent
    // admissions to the memory gates (for a second after each timeout), which the Redis row
    // then counted. Its instructions are Redis deciding.
    return startUnderCallgrind(
      'rc gateway (Redis gates)',
      [...node, RC_CLI, ...args],
      { ...extra, RC_GATE_REDIS_TIMEOUT_MS: '2000' },
      { kind: 'json-url' },
      dir,
    );
  }
  if (name === 'gateway-prefix4') {
    // Four spellings of the one backend's URL that the registry keeps apart (it drops one trailing
    // slash; the request path drops them all, and /v1): four upstreams to the router, with their
    // own seeds and pools, one process behind them, so only the choice differs from 'gateway'.
    const b = backend.replace(/\/+$/, '');
    const { args, env: extra } = gatewayCommand(dir, backend, key, undefined, [b, `${b}//`, `${b}/v1`, `${b}/v1//`]);
    return startUnderCallgrind('rc gateway (4 upstreams, prefix routing)', [...node, RC_CLI, ...args], extra, { kind: 'json-url' }, dir);
  }
  if (name === 'front') return startUnderCallgrind('front: uWS answering alone', [...node, UWS_FRONT, backend], {}, { kind: 'json-url' }, dir);
  if (name === 'floor') return startUnderCallgrind('floor: uWS + net relay', [...node, FLOOR_RELAY, backend], {}, { kind: 'json-url' }, dir);
  if (name === 'nginx') {
    const bin = findNginx();
    if (!bin) throw new Error('nginx is not installed and could not be');
    const { args, url } = await nginxCommand(dir, backend);
    return startUnderCallgrind('nginx (1 process)', [bin, ...args], {}, { kind: 'port', url }, dir);
  }
  throw new Error(`Unknown target ${name}`);
}

async function deleteKeys(url: string, pattern: string): Promise<void> {
  const redis = new Redis(url, { maxRetriesPerRequest: 1 });
  try {
    const keys = await redis.keys(pattern);
    if (keys.length) await redis.del(...keys);
  } finally {
    redis.disconnect();
  }
}

async function profile(name: string, backend: string, flavour: string): Promise<{ rows: Row[]; top: Map<string, FunctionCost[]> }> {
  const dir = mkdtempSync(join(tmpdir(), `rc-profile-${name}-`));
  const key = generateKey();
  const rows: Row[] = [];
  const tops = new Map<string, FunctionCost[]>();
  const target = await startTarget(name, dir, backend, key);
  try {
    for (const w of workloads) {
      const spec = WORKLOADS[w]!;
      const request = name.startsWith('gateway') ? spec.gateway(key) : spec.relay;
      const send = async (n: number): Promise<void> => {
        const r = await sendExactly(target.url, request, n, connections);
        if (r.failed > 0) throw new Error(`${target.label}, ${w}: ${r.failed} of ${n} responses failed; the first: ${r.firstFailure}`);
      };
      process.stdout.write(`  ${target.label}: ${w} (${flavour}), ${warmup} warm-up then ${requests} counted requests\n`);
      await send(warmup);
      const counts = await target.measure(() => send(requests), requests);
      rows.push({ flavour, workload: w, target: target.label, counts });
      if (name === topOf && top > 0) tops.set(flavours.length > 1 ? `${w} (${flavour})` : w, await target.topFunctions(top, inclusive));
    }
  } finally {
    await target.stop(keep);
    if (keep) process.stdout.write(`  kept: ${dir} (callgrind files; the JIT map is /tmp/perf-${target.pid}.map)\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
  return { rows, top: tops };
}

// Names are checked before anything starts: a target under callgrind takes a minute to get to them.
const TARGETS = ['gateway', 'gateway-redis', 'gateway-prefix4', 'floor', 'front', 'nginx'];
for (const t of targets) if (!TARGETS.includes(t)) throw new Error(`Unknown target ${t}: ${TARGETS.join(', ')}`);
for (const w of workloads) if (!WORKLOADS[w]) throw new Error(`Unknown workload ${w}: ${Object.keys(WORKLOADS).join(', ')}`);
for (const f of flavours) if (f !== 'sim' && !isFlavour(f)) throw new Error(`Unknown flavour ${f}: sim, ${FLAVOURS.join(', ')}`);
if (paced && flavours.some((f) => f !== 'sim')) throw new Error('RC_PROFILE_PACED needs the sim (RC_PROFILE_FLAVOUR=sim): the replayed flavours are not paced');

/** The backend of one flavour: the sim, or the replay of a server's bytes. */
function startBackend(flavour: string): Promise<{ url: string; stop(): Promise<void> }> {
  if (flavour !== 'sim') return spawnNode(`replay ${flavour}`, REPLAY_BACKEND, ['--flavour', flavour, '--port', '0'], { cpu: 1 });
  // Paced: 20 chunks 2 ms apart, the first at once, as a GPU streams tokens (one backend read per chunk).
  const pacing = paced ? ['--ttft-ms', '0', '--tokens-per-second', '500'] : ['--fast'];
  return spawnRc('sim', ['sim', ...pacing, '--port', '0', '--model', MODEL], { cpu: 1 });
}

const rows: Row[] = [];
const tops = new Map<string, FunctionCost[]>();
try {
  for (const flavour of flavours) {
    const backend = await startBackend(flavour);
    try {
      for (const name of targets) {
        process.stdout.write(`profiling ${name} under callgrind (backend: ${flavour}) ...\n`);
        const r = await profile(name, backend.url, flavour);
        rows.push(...r.rows);
        for (const [w, list] of r.top) tops.set(w, list);
      }
    } finally {
      await backend.stop();
    }
  }
} finally {
  if (targets.includes('gateway-redis')) await deleteKeys(REDIS_URL, `${redisPrefix}*`);
}

const k = (n: number): string => `${(n / 1000).toFixed(1)}k`;
process.stdout.write(`\ninstructions per request (callgrind, user space only; ${requests} requests, ${connections} connections)\n`);
process.stdout.write(
  `${'backend'.padEnd(13)}${'workload'.padEnd(10)}${'target'.padEnd(28)}${'main thread'.padStart(12)}${'all threads'.padStart(13)}${'x nginx'.padStart(9)}${'x floor'.padStart(9)}\n`,
);
for (const r of rows) {
  const same = (b: Row) => b.flavour === r.flavour && b.workload === r.workload;
  const nginx = rows.find((b) => same(b) && b.target.startsWith('nginx'));
  const floor = rows.find((b) => same(b) && b.target.startsWith('floor'));
  const xNginx = nginx ? `${(r.counts.allPerRequest / nginx.counts.allPerRequest).toFixed(2)}x` : '-';
  const xFloor = floor ? `${(r.counts.mainPerRequest / floor.counts.mainPerRequest).toFixed(2)}x` : '-';
  process.stdout.write(
    `${r.flavour.padEnd(13)}${r.workload.padEnd(10)}${r.target.padEnd(28)}${k(r.counts.mainPerRequest).padStart(12)}${k(r.counts.allPerRequest).padStart(13)}${xNginx.padStart(9)}${xFloor.padStart(9)}\n`,
  );
}
for (const [w, list] of tops) {
  process.stdout.write(`\n${topOf}, ${w}: the main thread's costliest functions (${inclusive ? 'inclusive' : 'own'} instructions per request)\n`);
  for (const f of list) process.stdout.write(`${String(f.perRequest).padStart(8)}  ${f.name.slice(0, 150)}\n`);
}
