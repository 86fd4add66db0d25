// Issue 44 measurement: one instance opening tunnels in a loop (a new port each time, keeping
// every one it gets) against a broker in a process of its own, with the broker's limits
// (gateway/tunnel/limits.ts defaults) and without them. Prints the broker process's descriptors
// and live tunnels after the loop, as a table, and writes bench/results/tunnel-flood.json.
//
//   node dist/bench/tunnel-flood.js [attempts=2000]
import { spawn } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import WebSocket from 'ws';
import { connectUrl } from '../agent/tunnel/client.js';
import { issueTunnelToken } from '../lib/tunnel/identity.js';

const BROKER_JS = fileURLToPath(new URL('../test/dedicated/broker-process.js', import.meta.url));
const attempts = Number(process.argv[2] ?? 2000);
const UNLIMITED = { perInstance: 1e9, perAccount: 1e9, perAddress: 1e9, connectsPerInstance: 1e9, connectsPerAddress: 1e9 };

async function run(label: string, limits: Record<string, number> | undefined): Promise<Record<string, unknown>> {
  const child = spawn(process.execPath, [BROKER_JS, 'i_flood'], {
    env: { ...process.env, ...(limits ? { RC_TEST_TUNNEL_LIMITS: JSON.stringify(limits) } : {}) },
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  const first = JSON.parse((await lines.next()).value as string) as { gateway: string; secret: string };
  const ask = async (cmd: string) => {
    child.stdin!.write(`${cmd}\n`);
    return JSON.parse((await lines.next()).value as string) as { fds: number; tunnels: number };
  };
  const before = await ask('fds');
  const token = issueTunnelToken(first.secret, 'i_flood');
  const open: WebSocket[] = [];
  const statuses = new Map<number, number>();
  let refusal = '';
  const started = Date.now();
  for (let i = 0; i < attempts; i++) {
    const status = await new Promise<number>((resolve) => {
      const ws = new WebSocket(connectUrl(first.gateway, 1000 + i), { headers: { authorization: `Bearer ${token}` } });
      ws.on('open', () => {
        open.push(ws);
        resolve(101);
      });
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c));
        res.on('end', () => {
          refusal ||= body;
          ws.terminate();
          resolve(res.statusCode ?? 0);
        });
      });
      ws.on('error', () => resolve(0));
    });
    statuses.set(status, (statuses.get(status) ?? 0) + 1);
  }
  const seconds = (Date.now() - started) / 1000;
  const after = await ask('fds');
  for (const ws of open) ws.terminate();
  child.stdin!.end();
  return {
    label,
    attempts,
    seconds,
    statuses: Object.fromEntries(statuses),
    brokerFdsBefore: before.fds,
    brokerFdsAfter: after.fds,
    liveTunnels: after.tunnels,
    firstRefusal: refusal,
  };
}

const rows = [await run('without limits', UNLIMITED), await run('default limits', undefined)];
console.table(rows.map(({ firstRefusal: _, ...r }) => ({ ...r, statuses: JSON.stringify(r.statuses) })));
console.log('refusal:', rows[1]!.firstRefusal);
mkdirSync(fileURLToPath(new URL('../../bench/results/', import.meta.url)), { recursive: true });
writeFileSync(fileURLToPath(new URL('../../bench/results/tunnel-flood.json', import.meta.url)), `${JSON.stringify(rows, null, 2)}\n`);
