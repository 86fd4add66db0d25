// First-token latency against backends that leave Nagle on and backends that turn it off (issue
// 40: "a backend without TCP_NODELAY costs 40 ms"), each straight and through `rc gateway`, in one
// run. Run: `node scripts/build.mjs && node dist/bench/first-token.js`.
//
// The backends are Python's http.server (python3 on PATH), as a user would write one: the head in
// one write, then each SSE event a small write of its own), one with TCP_NODELAY set on each
// accepted socket. (cpp-httplib leaves Nagle on by default, CPPHTTPLIB_TCP_NODELAY false; current
// llama.cpp builds it with CPPHTTPLIB_TCP_NODELAY=1, read in ggml-org/llama.cpp
// vendor/cpp-httplib/CMakeLists.txt, so a llama-server built from source sets it.) A client opens a fresh connection per request (as curl does), writes the request and
// times the first token's bytes; each target gets blocks of 10 requests back to back, the targets
// taking turns block by block, so each sees the same machine. Three more rows time the backend client (lib/relay/http-pool.ts) alone, in this
// process, on the Nagle-on backend: one connection reused at once (what the pool did before issue
// 40), connections that always rest before reuse, and the default: reused at once until the
// backend has shown a delayed-ACK stall, resting from then on (the stall happens in the warm-up).
//
// Environment: RC_BENCH_REQUESTS (default 200 per target, after 20 warm-up rounds),
// RC_BENCH_TOKENS (default 20 per stream), RC_BENCH_GAP_MS (between tokens, default 1).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { generateKey, hashKey } from '../lib/keys.js';
import { HttpPool } from '../lib/relay/http-pool.js';
import { spawnRc, stopper, type SpawnedTarget } from './load.js';

const REQUESTS = Number(process.env.RC_BENCH_REQUESTS) || 200;
const WARMUP = 20;
const BLOCK = 10;
const TOKENS = Number(process.env.RC_BENCH_TOKENS) || 20;
const GAP_MS = process.env.RC_BENCH_GAP_MS === undefined ? 1 : Number(process.env.RC_BENCH_GAP_MS);
/** The first token's text, as the backend writes it (and the gateway relays it, byte for byte). */
const FIRST = '"content":"t0 "';

const BACKEND_PY = String.raw`
import socket, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
NODELAY = sys.argv[1] == 'nodelay'
TOKENS = int(sys.argv[2])
GAP = float(sys.argv[3]) / 1000
def event(delta, finish):
    return ('data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":%s,"finish_reason":%s}]}\n\n' % (delta, finish)).encode()
class Handler(BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'
    def log_message(self, *args): pass
    def setup(self):
        super().setup()
        if NODELAY: self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    def do_GET(self):
        self.send_response(200)
        self.send_header('content-length', '0')
        self.end_headers()
    def do_POST(self):
        self.rfile.read(int(self.headers.get('content-length', 0)))
        self.send_response(200)
        self.send_header('content-type', 'text/event-stream')
        self.send_header('transfer-encoding', 'chunked')
        self.end_headers()
        for i in range(TOKENS):
            if i and GAP: time.sleep(GAP)
            d = event('{"content":"t%d "}' % i, 'null')
            self.wfile.write(b'%x\r\n%s\r\n' % (len(d), d))
        d = event('{}', '"stop"') + b'data: [DONE]\n\n'
        self.wfile.write(b'%x\r\n%s\r\n0\r\n\r\n' % (len(d), d))
server = ThreadingHTTPServer(('127.0.0.1', 0), Handler)
print('{"url":"http://127.0.0.1:%d"}' % server.server_address[1], flush=True)
server.serve_forever()
`;

interface Backend {
  url: string;
  child: ChildProcess;
  stop(): Promise<void>;
}

async function startBackend(script: string, nodelay: boolean): Promise<Backend> {
  const child = spawn('python3', [script, nodelay ? 'nodelay' : 'nagle', String(TOKENS), String(GAP_MS)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const line = await new Promise<string>((resolve, reject) => {
    child.once('error', (err) => reject(new Error(`python3 is needed for this benchmark: ${err.message}`)));
    child.once('exit', (code) => reject(new Error(`the Python backend exited with ${code}`)));
    createInterface({ input: child.stdout! }).once('line', resolve);
  });
  return { url: (JSON.parse(line) as { url: string }).url, child, stop: stopper(child, exited) };
}

const body = (model: string) => JSON.stringify({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: TOKENS, stream: true });

/**
 * Milliseconds from connecting to the first token, on a fresh connection, read to its end (a
 * client that left early would have the gateway drop its backend connection, and every request
 * would find a fresh one).
 */
function firstTokenMs(url: string, model: string, key?: string): Promise<number> {
  const u = new URL(url);
  const payload = body(model);
  const head =
    `POST /v1/chat/completions HTTP/1.1\r\nhost: ${u.host}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(payload)}\r\n` +
    `${key ? `authorization: Bearer ${key}\r\n` : ''}connection: close\r\n\r\n`;
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let seen = '';
    const socket = net.connect({ host: u.hostname, port: Number(u.port) }, () => {
      socket.setNoDelay(true);
      socket.write(head + payload);
    });
    socket.setEncoding('latin1');
    let ms = -1;
    socket.on('data', (text: string) => {
      if (ms >= 0) return;
      seen += text;
      if (seen.includes(FIRST)) ms = performance.now() - t0;
    });
    socket.on('error', reject);
    socket.on('close', () => (ms < 0 ? reject(new Error(`${url}: closed before the first token: ${seen.slice(0, 300)}`)) : resolve(ms)));
  });
}

/** Milliseconds from the pool's request to the first token (the response is read to its end). */
function poolFirstTokenMs(pool: HttpPool): Promise<number> {
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let ms = -1;
    let seen = '';
    pool.request('/v1/chat/completions', body('m'), {
      onHead() {},
      onData(chunk) {
        if (ms < 0) {
          seen += chunk.toString('latin1');
          if (seen.includes(FIRST)) ms = performance.now() - t0;
        }
        return true;
      },
      onEnd: () => (ms < 0 ? reject(new Error('no first token')) : resolve(ms)),
      onError: reject,
    });
  });
}

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

const dir = mkdtempSync(join(tmpdir(), 'rc-first-token-'));
const script = join(dir, 'backend.py');
writeFileSync(script, BACKEND_PY);
const stops: (() => Promise<void>)[] = [];
try {
  const nagle = await startBackend(script, false);
  stops.push(nagle.stop);
  const nodelay = await startBackend(script, true);
  stops.push(nodelay.stop);

  const key = generateKey();
  const keysFile = join(dir, 'keys.json');
  writeFileSync(keysFile, JSON.stringify([{ keyHash: hashKey(key), accountId: 1_000_000 + Math.floor(Math.random() * 1_000_000) }]));
  const config = join(dir, 'config.json');
  // No max_tokens fitting (it would ask the backends' /tokenize, which these do not serve).
  const model = (name: string, upstream: string) => ({ name, upstreams: [upstream], maxContext: 32_768, fitMaxTokens: false });
  writeFileSync(config, JSON.stringify({ models: [model('nagle', nagle.url), model('nodelay', nodelay.url)] }));
  const gateway: SpawnedTarget = await spawnRc('rc gateway', ['gateway', '--port', '0', '--keys-file', keysFile], {
    cpu: 0,
    env: {
      RC_CONFIG: config,
      RC_METRICS_PORT: '0',
      REDIS_URL: '',
      RC_MODEL_RPM: '1000000000',
      RC_MODEL_TPM: '100000000000',
      RC_MODEL_DAILY_TOKENS: '100000000000',
    },
  });
  stops.push(gateway.stop);

  const poolOptions = { connections: 64, connectTimeoutMs: 5000, headersTimeoutMs: 60_000, bodyTimeoutMs: 60_000, keepAliveTimeoutMs: 4000 };
  const atOnce = new HttpPool(nagle.url, { ...poolOptions, reuseAfterMs: 0 });
  const rested = new HttpPool(nagle.url, { ...poolOptions, restBeforeReuse: 'always' });
  const onStall = new HttpPool(nagle.url, poolOptions);
  stops.push(
    () => atOnce.destroy(),
    () => rested.destroy(),
    () => onStall.destroy(),
  );

  const targets: { label: string; run: () => Promise<number>; ms: number[] }[] = [
    { label: 'Nagle on, direct', run: () => firstTokenMs(nagle.url, 'm'), ms: [] },
    { label: 'Nagle on, through the gateway', run: () => firstTokenMs(gateway.url, 'nagle', key), ms: [] },
    { label: 'Nagle off, direct', run: () => firstTokenMs(nodelay.url, 'm'), ms: [] },
    { label: 'Nagle off, through the gateway', run: () => firstTokenMs(gateway.url, 'nodelay', key), ms: [] },
    { label: 'Nagle on, HttpPool, one connection reused at once', run: () => poolFirstTokenMs(atOnce), ms: [] },
    { label: 'Nagle on, HttpPool, connections rested before reuse', run: () => poolFirstTokenMs(rested), ms: [] },
    { label: 'Nagle on, HttpPool, resting once a stall was seen (the default)', run: () => poolFirstTokenMs(onStall), ms: [] },
  ];
  // Blocks of back-to-back requests per target, the targets taking turns block by block: back to
  // back, as on a busy gateway, a pooled connection is reused within milliseconds of its last
  // response (requests taking turns one by one would leave every connection resting).
  for (let round = 0; round < (WARMUP + REQUESTS) / BLOCK; round++) {
    for (const t of targets) {
      for (let i = 0; i < BLOCK; i++) {
        const ms = await t.run();
        if (round * BLOCK >= WARMUP) t.ms.push(ms);
      }
    }
  }

  const rows = targets.map((t) => {
    const s = [...t.ms].sort((a, b) => a - b);
    return { label: t.label, p50: quantile(s, 0.5), p90: quantile(s, 0.9) };
  });
  const width = Math.max(...rows.map((r) => r.label.length));
  process.stdout.write(`\nfirst token, ms (${REQUESTS} requests per target, ${TOKENS} tokens ${GAP_MS} ms apart; a fresh client connection each)\n`);
  process.stdout.write(`${'target'.padEnd(width)}    p50     p90\n`);
  for (const r of rows) process.stdout.write(`${r.label.padEnd(width)}  ${r.p50.toFixed(2).padStart(5)}  ${r.p90.toFixed(2).padStart(6)}\n`);
  const cost = (via: number, direct: number) => rows[via]!.p50 - rows[direct]!.p50;
  const on = cost(1, 0);
  const off = cost(3, 2);
  process.stdout.write(
    `\nthe gateway's cost at p50: Nagle on +${on.toFixed(2)} ms, Nagle off +${off.toFixed(2)} ms; ` +
      `goal: Nagle on within 2 ms of Nagle off: ${on - off <= 2 ? 'met' : 'NOT met'} (${(on - off).toFixed(2)} ms)\n`,
  );
} finally {
  for (const stop of stops.reverse()) await stop().catch(() => {});
  rmSync(dir, { recursive: true, force: true });
}
