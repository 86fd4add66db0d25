// `rc start` end to end: the whole platform as one child process on ephemeral ports, a key from
// `rc account create`, the official clients through the gateway, then a clean stop on SIGTERM.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { issueTunnelToken, tunnelSecret } from '../../lib/tunnel/identity.js';
import { waitFor, platformTestEnv } from '../helpers.js';
import { tunnelFetch } from '../dedicated/fixture.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));

test('npm start: every part starts, serves, and stops cleanly on SIGTERM', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-start-'));
  const env = {
    ...process.env,
    ...platformTestEnv(dataDir),
    RC_LOG_LEVEL: 'warn',
    RC_INSTANCE_LAUNCH_RATE: '60:5',
  };
  const child = spawn(process.execPath, [RC, 'start'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout.on('data', (d: Buffer) => (out += d));
  child.stderr.on('data', (d: Buffer) => (err += d));
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  t.after(() => {
    child.kill('SIGKILL');
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(`${dataDir}-instances`, { recursive: true, force: true });
  });

  // The banner's last lines (separate writes: a pipe may deliver them in several chunks).
  await waitFor(() => /rc account create[\s\S]*Then:/.test(out) || child.exitCode !== null, 30_000);
  assert.equal(child.exitCode, null, `rc start exited early: ${err}`);
  const gateway = /model gateway\s+(http:\/\/\S+)\/v1/.exec(out)?.[1];
  const api = /platform API\s+(http:\/\/\S+)\/api/.exec(out)?.[1];
  assert.ok(gateway && api, out);
  assert.match(out, /host agent\s+127\.0\.0\.1:\d+/);
  assert.match(out, /instance proxy\s+http:\/\/<id>\.localhost:\d+\//);
  assert.match(out, /rc account create/);

  // The CLI finds the running platform through the data dir.
  const { stdout } = await promisify(execFile)(process.execPath, [RC, 'account', 'create', '--email', 'start@example.com', '--verified', '--credits', '3'], {
    env,
  });
  const account = JSON.parse(stdout) as { api_token: string; credits: number };
  assert.match(account.api_token, /^rc-/);

  const openai = new OpenAI({ baseURL: `${gateway}/v1`, apiKey: account.api_token });
  const models = (await openai.models.list()).data.map((m) => m.id).sort();
  assert.deepEqual(models, ['sim-chat', 'sim-reasoner']);
  const chat = await openai.chat.completions.create({ model: 'sim-chat', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4 });
  assert.equal(chat.usage?.completion_tokens, 4);

  const anthropic = new Anthropic({ baseURL: `${gateway}/api`, apiKey: account.api_token });
  const msg = await anthropic.messages.create({ model: 'sim-chat', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(msg.stop_reason, 'max_tokens');

  const usage = await fetch(`${api}/api/profile/model-usage`, { headers: { authorization: `Bearer ${account.api_token}` } });
  assert.equal(usage.status, 200);
  const body = (await usage.json()) as { requests: number };
  assert.equal(body.requests, 2);
  // by_hour: both finished requests, by the UTC hour they were admitted in (settled when each response ended).
  const byHour = await waitFor(async () => {
    const u = (await (await fetch(`${api}/api/profile/model-usage`, { headers: { authorization: `Bearer ${account.api_token}` } })).json()) as {
      tokens_used: number;
      by_hour: { hour: number; tokens: number; requests: number; by_model: Record<string, { tokens: number; requests: number }> }[];
    };
    return u.by_hour.reduce((n, h) => n + h.requests, 0) === 2 ? u : undefined;
  });
  assert.deepEqual(
    byHour.by_hour.map((h) => h.hour),
    Array.from({ length: 24 }, (_, i) => i),
  );
  assert.equal(
    byHour.by_hour.reduce((n, h) => n + (h.by_model['sim-chat']?.tokens ?? 0), 0),
    byHour.tokens_used,
  );
  assert.ok(byHour.tokens_used > 0);

  // Launch the seeded vLLM template (its start command runs the sim) on the local agent.
  const auth = { authorization: `Bearer ${account.api_token}`, 'content-type': 'application/json' };
  const templates = (await (await fetch(`${api}/api/templates`)).json()) as { templates: { id: number; slug: string }[] };
  const vllm = templates.templates.find((tpl) => tpl.slug === 'vllm-demo');
  assert.ok(vllm, 'the seeded vllm-demo template is public');
  const launched = await fetch(`${api}/api/templates/${vllm.id}/launch`, { method: 'POST', headers: auth, body: '{"gpu_count":1}' });
  assert.equal(launched.status, 200, await launched.clone().text());
  const ready = await waitFor(
    async () => {
      const st = (await (await fetch(`${api}/api/notebook/status`, { headers: auth })).json()) as {
        status: string;
        dedicated_base_url?: string;
        base_url: string;
      };
      assert.notEqual(st.status, 'failed', JSON.stringify(st));
      return st.status === 'ready' ? st : undefined;
    },
    60_000,
    200,
  );
  // The dedicated endpoint: the official client, the model name the serve command was given.
  assert.equal(ready.dedicated_base_url?.startsWith(`${gateway}/dedicated/`), true, ready.dedicated_base_url);
  const dedicatedClient = new OpenAI({ baseURL: ready.dedicated_base_url, apiKey: account.api_token });
  const served = await dedicatedClient.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
  assert.equal(served.model, 'demo');
  // The instance proxy refuses a bearer key (browser sessions only).
  const proxied = await fetch(String(ready.base_url), { headers: { authorization: `Bearer ${account.api_token}` } });
  assert.equal(proxied.status, 403);
  assert.deepEqual(await proxied.json(), { detail: 'You do not have access to this instance' });
  const destroyed = await fetch(`${api}/api/notebook/current`, { method: 'DELETE', headers: auth });
  assert.equal(destroyed.status, 200);
  await waitFor(
    async () => ((await (await fetch(`${api}/api/notebook/status`, { headers: auth })).json()) as { status: string }).status === 'stopped',
    30_000,
    200,
  );

  // An app instance that exposes itself with rc-tunnel: the identity provisioned at launch lets
  // it reach the broker on the gateway, and the public URL serves the app.
  const app = `${JSON.stringify(process.execPath)} -e "require('http').createServer((q,s)=>s.end('tunnelled '+q.url)).listen(+process.env.PORT,'127.0.0.1')"`;
  const startCommand = `${JSON.stringify(process.execPath)} ${JSON.stringify(RC)} tunnel expose --port $PORT --detach && exec ${app}`;
  const created = await fetch(`${api}/api/profile/templates`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ title: 'Tunnel app', image: 'rc/gradio:latest', instance_type: 'gradio', app_port: 7860, start_command: startCommand }),
  });
  assert.equal(created.status, 200, await created.clone().text());
  const appTemplate = (await created.json()) as { id: number };
  const second = await fetch(`${api}/api/templates/${appTemplate.id}/launch`, { method: 'POST', headers: auth });
  assert.equal(second.status, 200, await second.clone().text());
  const appInstance = await waitFor(
    async () => {
      const st = (await (await fetch(`${api}/api/notebook/status`, { headers: auth })).json()) as { status: string; instance_id: string };
      assert.notEqual(st.status, 'failed', JSON.stringify(st));
      return st.status === 'ready' ? st : undefined;
    },
    60_000,
    200,
  );
  // `status` runs here, outside the instance: give it what the instance has (its dir, broker and
  // token, which is provisioned in the environment only).
  const instanceDir = join(`${dataDir}-instances`, 'homes', appInstance.instance_id);
  const token = issueTunnelToken(tunnelSecret('', dataDir), appInstance.instance_id);
  const publicUrl = await waitFor(
    async () => {
      const { stdout: status } = await promisify(execFile)(process.execPath, [RC, 'tunnel', 'status', '--json'], {
        env: { ...env, RC_INSTANCE_DIR: instanceDir, RC_TUNNEL_BROKER: gateway, RC_TUNNEL_TOKEN: token },
      });
      const tunnels = (JSON.parse(status) as { tunnels: { state: string; public_url: string | null }[] }).tunnels;
      return tunnels.find((tn) => tn.state === 'connected')?.public_url ?? undefined;
    },
    30_000,
    200,
  );
  // Tunnels have an origin of their own, apart from the gateway (and the platform API).
  // Each tunnel is an origin of its own: http://<tunnel id>.localhost:<tunnels port>/.
  const tunnelsHost = /tunnels\s+http:\/\/<tunnel id>\.(\S+)\//.exec(out)?.[1];
  assert.ok(tunnelsHost && !gateway.includes(tunnelsHost), out);
  assert.match(publicUrl, new RegExp(`^http://t[0-9a-f]{24}\\.${tunnelsHost.replace(/\./g, '\\.')}/$`));
  const viaTunnel = await tunnelFetch(`${publicUrl}hello`);
  assert.equal(await viaTunnel.text(), 'tunnelled /hello');
  assert.equal((await fetch(`${api}/api/notebook/current`, { method: 'DELETE', headers: auth })).status, 200);

  child.kill('SIGTERM');
  assert.equal(await exited, 0, err);
});
