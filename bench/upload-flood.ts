// Issue 44 measurement: clients that declare 8 MiB bodies and withhold the last byte, against a
// gateway in a process of its own, with the upload limits off and at their defaults
// (lib/upload-limits.ts). Reports the gateway process's RSS growth, how many uploads it held and
// refused, and whether another account's request was answered meanwhile. JSON in
// bench/results/upload-flood.json.
//
//   node dist/bench/upload-flood.js [clients=192]
import { spawn } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { generateKey } from '../lib/keys.js';

const MiB = 1024 * 1024;
const KEY_A = generateKey();
const KEY_B = generateKey();
const BODY = 8 * MiB;

async function server(limitsJson: string, keyA: string, keyB: string): Promise<void> {
  const { MemoryBus } = await import('../lib/bus.js');
  const { createLogger } = await import('../lib/log.js');
  const { hashKey } = await import('../lib/keys.js');
  const { modelEntrySchema } = await import('../lib/config.js');
  const { startSim } = await import('../sim/server.js');
  const { memoryKeySource } = await import('../gateway/auth/keys.js');
  const { createGateway } = await import('../gateway/server.js');
  const logger = createLogger('silent');
  const sim = await startSim({ model: 'm', logger, fast: true });
  const gateway = await createGateway({
    port: 0,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url] })],
    keySource: memoryKeySource([
      { keyHash: hashKey(keyA), accountId: 1 },
      { keyHash: hashKey(keyB), accountId: 2 },
    ]),
    bus: new MemoryBus(),
    logger,
    limits: limitsJson ? { uploads: JSON.parse(limitsJson) } : {},
  });
  const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 0) * 1024;
  process.stdout.write(`${JSON.stringify({ url: gateway.url, rss: rss() })}\n`);
  createInterface({ input: process.stdin }).on('line', () => process.stdout.write(`${JSON.stringify({ rss: rss() })}\n`));
}

function upload(port: number, key: string, size: number, withhold: number): { socket: Socket; reply: () => string } {
  let reply = '';
  const socket = connect({ host: '127.0.0.1', port });
  const head = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"pad":"';
  socket.on('connect', () => {
    socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: ${size}\r\n\r\n`,
    );
    const body = Buffer.from(head + 'x'.repeat(size - head.length - 2) + '"}');
    socket.write(body.subarray(0, size - withhold));
  });
  socket.on('data', (d: Buffer) => (reply += d.toString('latin1')));
  socket.on('error', () => {});
  return { socket, reply: () => reply };
}

async function run(label: string, limits: object | undefined, clients: number): Promise<Record<string, unknown>> {
  const child = spawn(process.execPath, [fileURLToPath(import.meta.url), 'server', limits ? JSON.stringify(limits) : '', KEY_A, KEY_B], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const first = JSON.parse((await lines.next()).value as string) as { url: string; rss: number };
  const port = Number(new URL(first.url).port);
  const ask = async () => {
    child.stdin!.write('rss\n');
    return (JSON.parse((await lines.next()).value as string) as { rss: number }).rss;
  };
  const uploads = Array.from({ length: clients }, () => upload(port, KEY_A, BODY, 1));
  // Until every byte sent has been taken (or refused): the RSS stops moving.
  let last = 0;
  for (let i = 0; i < 100; i++) {
    await new Promise((r) => setTimeout(r, 200));
    const now = await ask();
    if (i > 5 && Math.abs(now - last) < MiB) break;
    last = now;
  }
  const peak = await ask();
  const other = upload(port, KEY_B, 200, 0);
  let otherStatus = 0;
  for (let i = 0; i < 100 && !otherStatus; i++) {
    await new Promise((r) => setTimeout(r, 50));
    otherStatus = Number(/^HTTP\/1\.1 (\d{3})/.exec(other.reply())?.[1] ?? 0);
  }
  const refused = uploads.filter((u) => u.reply().startsWith('HTTP/1.1 429')).length;
  for (const u of [...uploads, other]) u.socket.destroy();
  child.stdin!.end();
  child.kill();
  return {
    label,
    clients,
    bodyMiB: 8,
    rssGrowthMiB: Math.round((peak - first.rss) / MiB),
    refused429: refused,
    held: clients - refused,
    otherAccountStatus: otherStatus,
  };
}

if (process.argv[2] === 'server') await server(process.argv[3] ?? '', process.argv[4]!, process.argv[5]!);
else {
  const clients = Number(process.argv[2] ?? 192);
  const off = { uploadsPerAddress: 1e9, uploadsPerAccount: 1e9, bytesPerAddress: 1e15, bytesPerAccount: 1e15 };
  const rows = [await run('limits off', off, clients), await run('default limits', undefined, clients)];
  console.table(rows);
  const dir = fileURLToPath(new URL('../../bench/results/', import.meta.url));
  mkdirSync(dir, { recursive: true });
  writeFileSync(`${dir}upload-flood.json`, `${JSON.stringify(rows, null, 2)}\n`);
}
