// The soak's tunnel launch, in a loop (issue 44's remainder: one launch in ~3,700 never got its
// tunnel URL): `rc start` as the soak runs it (bench/soak/platform.ts, the process runtime), one
// account launching an app whose start command is `rc tunnel expose --detach`, waiting for ready,
// reading the URL from the instance's log, destroying it. Prints each miss with its log, and every
// 10 launches the rc-tunnel processes of this platform alive while one instance runs and right
// after its destroy (before the fix, destroyed instances' ones piled up until the broker's 30 s
// check, filling the account's RC_TUNNEL_MAX_PER_ACCOUNT: a miss at about the 33rd launch).
//
//   node dist/bench/tunnel-launches.js [launches=100]
import { readdirSync, readFileSync } from 'node:fs';
import { callAdmin } from '../control-plane/admin-client.js';
import { startSoakPlatform } from './soak/platform.js';

const launches = Number(process.argv[2] ?? 100);

interface Reply {
  status: number;
  text: string;
  json: Record<string, unknown>;
}

async function call(method: string, url: string, key: string, body?: unknown): Promise<Reply> {
  const headers: Record<string, string> = { authorization: `Bearer ${key}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const r = await fetch(url, { method, headers, body: body === undefined ? undefined : JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
  const text = await r.text();
  let json: Record<string, unknown> = {};
  try {
    json = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // a log stream or plain text
  }
  return { status: r.status, text, json };
}

async function until<T>(probe: () => Promise<T | undefined>, timeoutMs: number): Promise<T | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) return undefined;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** rc-tunnel processes whose instance directory is under `dataDir` (this platform's instances). */
function tunnelProcesses(dataDir: string): number {
  let n = 0;
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('expose\0--port')) continue;
      if (readFileSync(`/proc/${pid}/environ`, 'utf8').includes(`RC_INSTANCE_DIR=${dataDir}`)) n++;
    } catch {
      // gone meanwhile
    }
  }
  return n;
}

async function main(): Promise<void> {
  const p = await startSoakPlatform({ runtime: 'process', redisUrl: '' });
  try {
    const account = (await callAdmin({ dataDir: p.dataDir, redisPrefix: 'rc:', configuredModels: [] }, 'account.create', {
      email: 'launches@example.com',
      password: 'launch-password-1',
      verified: true,
      credits: 1_000_000,
    })) as { api_token: string };
    const key = account.api_token;
    const app = `require('http').createServer((q,s)=>s.end('ok')).listen(+process.env.PORT,'127.0.0.1')`;
    const template = await call('POST', `${p.api}/api/profile/templates`, key, {
      title: 'Tunnel app',
      image: 'rc/gradio:latest',
      instance_type: 'gradio',
      app_port: 7860,
      start_command: `rc tunnel expose --port $PORT --detach && exec ${JSON.stringify(process.execPath)} -e "${app}"`,
    });
    let misses = 0;
    for (let i = 1; i <= launches; i++) {
      const missed = await launchOnce(p.api, key, template.json.id as number, i, p.dataDir);
      if (missed) misses++;
    }
    process.stdout.write(`${launches} launches, ${misses} without a tunnel URL\n`);
  } finally {
    await p.stop();
  }
}

/** One launch through ready, its URL read from the log, then destroyed; true when the URL never came. */
async function launchOnce(api: string, key: string, template: number, i: number, dataDir: string): Promise<boolean> {
  const launched = await call('POST', `${api}/api/templates/${template}/launch`, key, { gpu_count: 1 });
  if (launched.status !== 200) throw new Error(`launch answered ${launched.status}: ${launched.text}`);
  const status = async () => (await call('GET', `${api}/api/notebook/status`, key)).json.status as string;
  const state = await until(async () => {
    const s = await status();
    return s === 'ready' || s === 'failed' ? s : undefined;
  }, 60_000);
  let log = '';
  const url = await until(async () => {
    log = (await call('GET', `${api}/api/notebook/logs?tail=50`, key)).text;
    return /Forwarding (http:\/\/\S+)/.exec(log)?.[1];
  }, 20_000);
  const running = tunnelProcesses(dataDir);
  await call('DELETE', `${api}/api/notebook/current`, key);
  await until(async () => ((await status()) === 'stopped' || (await status()) === 'none' ? true : undefined), 60_000);
  if (!url) process.stdout.write(`launch ${i} (${state}): no tunnel URL; log:\n${log}\n`);
  if (i % 10 === 0) process.stdout.write(`launch ${i}: rc-tunnel processes ${running} while it ran, ${tunnelProcesses(dataDir)} after its destroy\n`);
  return !url;
}

await main();
