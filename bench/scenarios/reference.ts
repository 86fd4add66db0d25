// The gateway against nginx, the reference C relay, in one run, on the same backend and the same
// load: CPU per request of each gateway setup as a ratio to nginx's (issue 16). Setups:
// `rc gateway` with the in-memory gates, `rc gateway` with the gates in Redis (when Redis
// answers at REDIS_URL, default redis://127.0.0.1:6379), and the whole `npm start` process
// (`rc start`, whose embedded gateway is pointed at the same backend). Workloads: non-stream
// completions (20 tokens), 20-chunk chat streams, 20-token messages streams (nginx relays the
// chat stream there: it cannot translate), and paced streams (20 chunks 2 ms apart, as a GPU
// streams tokens), reported per relayed chunk too.
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { spawn } from 'node:child_process';
import { promisify } from 'node:util';
import { Redis } from 'ioredis';
import { generateKey } from '../../lib/keys.js';
import { randomId } from '../../lib/ids.js';
import {
  compare,
  FLOOR_RELAY,
  ratiosTo,
  UWS_FRONT,
  RC_CLI,
  spawnNode,
  spawnRc,
  stopper,
  type Comparison,
  type LoadOptions,
  type LoadRequest,
  type LoadResult,
  type SpawnedTarget,
  type Target,
} from '../load.js';
import { startNginx } from '../nginx.js';
import { ephemeralPlatformEnv } from '../platform-env.js';
import { completion, messagesStream, MODEL, NO_LIMITS, startGateway } from './gateway.js';
import type { LoadScenario } from './scenario.js';

const REDIS_URL = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
interface Setup extends Target {
  key: string;
}

/** The whole platform (`rc start`, what `npm start` runs) with the shared catalog on `backend`; a key made with `rc account create`. */
async function startPlatform(label: string, dir: string, backend: string): Promise<(SpawnedTarget & { key: string }) | undefined> {
  const config = join(dir, 'platform-config.json');
  writeFileSync(config, JSON.stringify({ models: [{ name: MODEL, upstreams: [backend] }] }));
  const env = {
    ...process.env,
    ...NO_LIMITS,
    ...ephemeralPlatformEnv(join(dir, 'platform')),
    RC_LOG_LEVEL: 'warn',
    REDIS_URL: '',
    RC_CONFIG: config,
  };
  const child = spawn('taskset', ['-c', '0', process.execPath, RC_CLI, 'start'], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const stop = stopper(child, exited, 10_000);
  const url = await new Promise<string | undefined>((resolve) => {
    const timer = setTimeout(() => resolve(undefined), 60_000);
    createInterface({ input: child.stdout! }).on('line', (line) => {
      const m = /model gateway\s+(http:\/\/\S+)\/v1/.exec(line);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    child.once('exit', () => resolve(undefined));
  });
  if (!url) {
    await stop();
    return undefined;
  }
  // Wait until the control plane accepts admin commands, then make a key.
  let key: string | undefined;
  for (let i = 0; i < 50 && !key; i++) {
    try {
      const { stdout } = await promisify(execFile)(
        process.execPath,
        [RC_CLI, 'account', 'create', '--email', `bench-${randomId('', 6)}@example.com`, '--verified'],
        { env },
      );
      key = (JSON.parse(stdout) as { api_token: string }).api_token;
    } catch {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  if (!key) {
    await stop();
    return undefined;
  }
  return { label, url, pid: child.pid!, child, key, stop };
}

async function redisAnswers(): Promise<Redis | undefined> {
  const r = new Redis(REDIS_URL, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000 });
  r.on('error', () => {});
  try {
    await r.connect();
    await r.ping();
    return r;
  } catch {
    r.disconnect();
    return undefined;
  }
}

/**
 * Rounds of each workload (env RC_BENCH_ROUNDS, default 1). On a shared machine the CPU time of
 * one target moves by a quarter and more between runs, most of it slow drift (other tenants):
 * with several rounds every target runs once per round, nginx last, and each target's row and
 * ratio are the medians over the rounds, each ratio taken against nginx of the same round.
 */
const ROUNDS = Math.max(1, Math.floor(Number(process.env.RC_BENCH_ROUNDS)) || 1);

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

/**
 * The rows and CPU ratios of several rounds (each: one result per target, the baseline's last):
 * each target's row is its round of median CPU per request (the lower middle one for an even
 * count; rounds without a CPU figure left out), and its ratio the median of its per-round ratios
 * to the baseline of the same round.
 */
export function medianOfRounds(rounds: LoadResult[][]): { rows: LoadResult[]; cpuRatios: Record<string, number> } {
  const first = rounds[0]!;
  const rows: LoadResult[] = [];
  const cpuRatios: Record<string, number> = {};
  for (let t = 0; t < first.length; t++) {
    const own = rounds.map((r) => r[t]!);
    const measured = own.filter((r) => r.cpuUsPerRequest !== null);
    const byCpu = (measured.length > 0 ? measured : own).sort((a, b) => a.cpuUsPerRequest! - b.cpuUsPerRequest!);
    rows.push(byCpu[(byCpu.length - 1) >> 1]!);
    const ratios = rounds
      .map((r) => {
        const cpu = r[t]!.cpuUsPerRequest;
        const base = r.at(-1)!.cpuUsPerRequest;
        return cpu !== null && base ? cpu / base : NaN;
      })
      .filter((x) => !Number.isNaN(x));
    cpuRatios[first[t]!.label] = ratios.length > 0 ? median(ratios) : NaN;
  }
  return { rows, cpuRatios };
}

/** Runs `request(setup)` against every setup and `nginxRequest` against nginx, ROUNDS times; nginx is the baseline. */
async function versusNginx(
  name: string,
  setups: Setup[],
  nginx: Target,
  request: (s: Setup) => LoadRequest,
  nginxRequest: LoadRequest,
  options: LoadOptions,
  chunks?: number,
): Promise<Comparison> {
  const rounds: LoadResult[][] = [];
  for (let i = 0; i < ROUNDS; i++) {
    const round: LoadResult[] = [];
    for (const s of setups) round.push(...(await compare({ name, request: request(s), targets: [s], options })).results);
    round.push((await compare({ name, request: nginxRequest, targets: [nginx], options })).results[0]!);
    rounds.push(round);
  }
  const { rows, cpuRatios } = medianOfRounds(rounds);
  const base = rows.at(-1)!;
  return {
    name: ROUNDS > 1 ? `${name}, median of ${ROUNDS}` : name,
    request: nginxRequest,
    results: rows,
    baseline: base.label,
    ratios: ratiosTo(base, rows),
    cpuRatios,
    ...(chunks ? { chunks } : {}),
  };
}

/** The targets of a run: the gateway setups, the floor and the front, nginx, and their paced twins. */
interface ReferenceTargets {
  nginx: Target;
  nginxPaced: Target;
  /** The gateway setups on the fast backend (memory gates; Redis gates and `npm start` when they come up). */
  setups: Setup[];
  /** The setups, then the floor relay and the uWS front. */
  withFloor: Setup[];
  /** The gateway (memory gates) and the floor relay on the paced backend. */
  pacedGateway: Setup;
  pacedFloor: Setup;
}

/**
 * One run of gateway-vs-nginx: its scratch directory, the Redis gates' key prefix, and what it
 * started, stopped in reverse order by close() (which also deletes the Redis keys and the directory).
 */
class ReferenceRun {
  private readonly dir = mkdtempSync(join(tmpdir(), 'rc-bench-ref-'));
  private readonly stops: (() => Promise<void>)[] = [];
  private redis: Redis | undefined;
  private readonly prefix = `rcbench:${randomId('', 8)}:`;

  /** Stops `target` at close(); returns it. */
  private started<T extends { stop(): Promise<void> }>(target: T): T {
    this.stops.push(() => target.stop());
    return target;
  }

  /** Starts the backends and every target; undefined when nginx cannot run here. */
  async startTargets(): Promise<ReferenceTargets | undefined> {
    const dir = this.dir;
    const sim = this.started(await spawnRc('backend (sim)', ['sim', '--fast', '--port', '0', '--model', MODEL], { cpu: 1 }));
    // 20 chunks 2 ms apart, first at once: token pacing of a GPU backend.
    const paced = this.started(
      await spawnRc('paced backend', ['sim', '--ttft-ms', '0', '--tokens-per-second', '500', '--port', '0', '--model', MODEL], { cpu: 1 }),
    );
    const nginx = await startNginx('nginx (1 process, proxy_pass)', sim.url, { cpu: 0 });
    if (!nginx) return undefined;
    this.started(nginx);
    const nginxPaced = this.started((await startNginx('nginx (1 process, proxy_pass)', paced.url, { cpu: 0 }))!);

    const key = generateKey();
    const setups: Setup[] = [];
    const memory = this.started(await startGateway('rc gateway (memory gates)', dir, sim.url, key));
    setups.push({ ...memory, key });
    this.redis = await redisAnswers();
    if (this.redis) {
      const withRedis = this.started(await startGateway('rc gateway (Redis gates)', dir, sim.url, key, { url: REDIS_URL, prefix: this.prefix }));
      setups.push({ ...withRedis, key });
    } else process.stdout.write(`no Redis at ${REDIS_URL}: the Redis-gates row is left out\n`);
    const platform = await startPlatform('npm start (whole platform)', dir, sim.url);
    if (platform) setups.push(this.started(platform));
    else process.stdout.write('rc start did not come up: the npm start row is left out\n');

    const pacedGateway = this.started(await startGateway('rc gateway (memory gates)', dir, paced.url, key));
    // The floor: what Node, V8 and uWS cost for the same two HTTP exchanges with no gateway work.
    const floor = this.started(await spawnNode('floor: uWS + net relay, no gateway work', FLOOR_RELAY, [sim.url], { cpu: 0 }));
    const pacedFloor = this.started(await spawnNode('floor: uWS + net relay, no gateway work', FLOOR_RELAY, [paced.url], { cpu: 0 }));
    // The front alone: uWS and one JS handler answering from memory, no backend exchange at all.
    const front = this.started(await spawnNode('front: uWS answering alone, no backend', UWS_FRONT, [sim.url], { cpu: 0 }));
    const withFloor = [...setups, { ...floor, key }, { ...front, key }];
    return { nginx, nginxPaced, setups, withFloor, pacedGateway: { ...pacedGateway, key }, pacedFloor: { ...pacedFloor, key } };
  }

  async close(): Promise<void> {
    for (const stop of this.stops.reverse()) await stop();
    if (this.redis) {
      const keys = await this.redis.keys(`${this.prefix}*`);
      if (keys.length) await this.redis.del(...keys);
      this.redis.disconnect();
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}

/** The five workloads, each against its setups and nginx. */
async function workloads(t: ReferenceTargets, options: LoadOptions): Promise<Comparison[]> {
  const { nginx, nginxPaced, setups, withFloor, pacedGateway, pacedFloor } = t;
  return [
    await versusNginx('chat non-stream (20 tokens)', withFloor, nginx, (s) => completion(false, s.key), completion(false), options),
    await versusNginx('chat stream (20 chunks)', withFloor, nginx, (s) => completion(true, s.key), completion(true), options, 20),
    await versusNginx('messages stream (20 tokens) vs nginx chat stream', setups, nginx, (s) => messagesStream(s.key), completion(true), options, 20),
    await versusNginx(
      'paced chat stream (20 chunks, 2 ms apart)',
      [pacedGateway, pacedFloor],
      nginxPaced,
      (s) => completion(true, s.key),
      completion(true),
      options,
      20,
    ),
    await versusNginx('paced messages stream (20 tokens, 2 ms apart)', [pacedGateway], nginxPaced, (s) => messagesStream(s.key), completion(true), options, 20),
  ];
}

export const referenceScenarios: LoadScenario[] = [
  {
    name: 'gateway-vs-nginx',
    async run(options) {
      const run = new ReferenceRun();
      try {
        const targets = await run.startTargets();
        if (!targets) {
          process.stdout.write('nginx cannot run here: gateway-vs-nginx skipped\n');
          return [];
        }
        return await workloads(targets, options);
      } finally {
        await run.close();
      }
    },
  },
];
