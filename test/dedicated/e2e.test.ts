// End to end with a real host agent (process runtime): a sim launched as a vllm instance behind a
// dedicated endpoint, and rc-tunnel running inside an instance with its provisioned identity.
// The instances service (control-plane/instances/) is driven by hand here: the route table is
// fed from the agent's ListInstances, which is what the service does from the agent's events.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import OpenAI from 'openai';
import type { InstanceInfo } from '../../agent/types.js';
import type { InstanceRoute, InstanceRouteTable, RouteStatus } from '../../lib/instance-routes.js';
import { tunnelProvisioning } from '../../lib/tunnel/identity.js';
import { startTestAgent, simCommand, waitForState } from '../agent/harness.js';
import { waitFor } from '../helpers.js';
import { OTHER, OWNER, RC_JS, startGatewayFixture, TUNNEL_JS, tunnelFetch } from './fixture.js';

/** What the instances service does with an agent's instance: its route. */
function routeOf(info: InstanceInfo, accountId: number): InstanceRoute {
  const status: RouteStatus = info.state === 'removed' ? 'stopped' : info.state;
  return {
    instanceId: info.instanceId,
    accountId,
    status,
    instanceType: info.spec.instanceType,
    // Every routed port of the spec; its address once the agent has placed it.
    ports: new Map(
      info.spec.ports.map((p) => {
        const e = info.endpoints.find((x) => x.port === p);
        return [p, e ? `${e.host}:${e.hostPort}` : ''];
      }),
    ),
  };
}

async function refresh(routes: InstanceRouteTable, info: InstanceInfo, accountId = OWNER): Promise<void> {
  routes.set(routeOf(info, accountId));
}

test('the openai client through a dedicated endpoint to a sim launched by the agent', async (t) => {
  const f = await startGatewayFixture(t);
  const { client: agent } = await startTestAgent(t);
  const served = 'my-org/served-model';
  const { instance } = await agent.start({
    instanceId: 'i_vllm',
    instanceType: 'vllm',
    // Weights "download" for a moment before the server binds, as on a real first start.
    startCommand: `sleep 1; exec ${simCommand(served)}`,
    ports: [8000],
  });
  await refresh(f.routes, instance);
  const base = `${f.gateway.url}/dedicated/i_vllm/8000/v1`;
  const client = new OpenAI({ apiKey: f.ownerKey, baseURL: base, maxRetries: 0 });

  // Still starting: 503 with Retry-After.
  assert.equal(instance.state, 'pending');
  const starting = await fetch(`${base}/models`, { headers: { authorization: `Bearer ${f.ownerKey}` } });
  assert.equal(starting.status, 503);
  assert.ok(Number(starting.headers.get('retry-after')) >= 1);
  assert.match(((await starting.json()) as { detail: string }).detail, /still starting/);

  await refresh(f.routes, await waitForState(agent, 'i_vllm', 'ready'));
  const done = await client.chat.completions.create({ model: served, messages: [{ role: 'user', content: 'Say hi' }], max_tokens: 16 });
  assert.equal(done.model, served);
  assert.equal(done.object, 'chat.completion');
  assert.ok((done.choices[0]!.message.content ?? '').length > 0);
  assert.ok(done.usage!.completion_tokens > 0);

  const stream = await client.chat.completions.create({
    model: served,
    messages: [{ role: 'user', content: 'Say hi' }],
    max_tokens: 16,
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let usage: unknown;
  for await (const chunk of stream) {
    assert.equal(chunk.model, served);
    text += chunk.choices[0]?.delta?.content ?? '';
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(text.length > 0);
  assert.ok(usage, 'the backend stream is relayed as is (usage chunk included when asked)');

  // The 403 matrix against the running instance.
  const other = new OpenAI({ apiKey: f.otherKey, baseURL: base, maxRetries: 0 });
  const wrongPort = new OpenAI({ apiKey: f.ownerKey, baseURL: `${f.gateway.url}/dedicated/i_vllm/8001/v1`, maxRetries: 0 });
  const wrongInstance = new OpenAI({ apiKey: f.ownerKey, baseURL: `${f.gateway.url}/dedicated/i_someone_else/8000/v1`, maxRetries: 0 });
  f.routes.set({ ...routeOf(await waitForState(agent, 'i_vllm', 'ready'), OTHER), instanceId: 'i_someone_else' });
  for (const [what, c] of [
    ["another account's key", other],
    ['another port', wrongPort],
    ["another account's instance", wrongInstance],
  ] as const) {
    await assert.rejects(c.chat.completions.create({ model: served, messages: [{ role: 'user', content: 'x' }] }), (err: unknown) => {
      assert.ok(err instanceof OpenAI.APIError, what);
      assert.equal(err.status, 403, what);
      return true;
    });
  }
  const foreign = await fetch(`${base}/models`, { headers: { authorization: `Bearer ${f.otherKey}` } });
  assert.equal(foreign.status, 403);
  assert.deepEqual(await foreign.json(), { detail: 'You do not have access to this instance' });
  const messages = await fetch(`${base}/messages`, {
    method: 'POST',
    headers: { 'x-api-key': f.ownerKey, 'content-type': 'application/json' },
    body: JSON.stringify({ model: served, max_tokens: 8, messages: [] }),
  });
  assert.equal(messages.status, 404);
  assert.ok(f.activity.includes('i_vllm'));
});

test('rc-tunnel inside an instance: public URL, status and logs', async (t) => {
  const f = await startGatewayFixture(t);
  const { client: agent, dataDir } = await startTestAgent(t);
  const provisioning = tunnelProvisioning(f.tunnelSecret, 'i_nb', f.gateway.url);
  const js = `require('http').createServer((q,s)=>{let b='';q.on('data',c=>b+=c);q.on('end',()=>s.end('inside '+q.method+' '+q.url+' '+b))}).listen(+process.env.PORT,'127.0.0.1')`;
  const { instance } = await agent.start({
    instanceId: 'i_nb',
    instanceType: 'jupyter',
    ports: [8888],
    files: provisioning.files,
    env: provisioning.env,
    startCommand: `"${process.execPath}" -e "${js}" & exec "${process.execPath}" "${RC_JS}" tunnel expose --port $PORT`,
  });
  await refresh(f.routes, instance);
  await refresh(f.routes, await waitForState(agent, 'i_nb', 'ready'));
  const tunnel = await waitFor(() => f.broker.tunnels().find((x) => x.instanceId === 'i_nb'), 20_000);
  const r = await tunnelFetch(`${tunnel!.publicUrl}hello?who=world`, { method: 'POST', body: 'payload' });
  assert.equal(r.status, 200);
  assert.equal(await r.text(), 'inside POST /hello?who=world payload');
  assert.ok(f.activity.includes('i_nb'));

  // status and logs, run as a user would inside the instance (same instance directory).
  const home = join(`${dataDir}-instances`, 'homes', 'i_nb');
  // The identity is not in anything an app serves by default (issue 14: the gradio demo served its
  // home directory, token included): no file under the instance's home holds it.
  const token = provisioning.env.RC_TUNNEL_TOKEN!;
  assert.ok(token.startsWith('rct-'));
  const files = readdirSync(home, { recursive: true, withFileTypes: true }).filter((e) => e.isFile());
  for (const e of files) assert.ok(!readFileSync(join(e.parentPath, e.name), 'utf8').includes(token), `token in ${e.name}`);
  assert.ok(!existsSync(join(home, '.rc-tunnel', 'token')));
  const env = { PATH: process.env.PATH ?? '', RC_INSTANCE_DIR: home, ...provisioning.env };
  const status = spawnSync(process.execPath, [TUNNEL_JS, 'status', '--json'], { env, encoding: 'utf8', timeout: 20_000 });
  assert.equal(status.status, 0, status.stderr);
  const parsed = JSON.parse(status.stdout) as { broker: string; tunnels: { port: number; state: string; public_url: string; running: boolean }[] };
  assert.equal(parsed.broker, f.gateway.url);
  assert.equal(parsed.tunnels.length, 1);
  assert.equal(parsed.tunnels[0]!.state, 'connected');
  assert.equal(parsed.tunnels[0]!.public_url, tunnel!.publicUrl);
  assert.equal(parsed.tunnels[0]!.running, true);
  const human = spawnSync(process.execPath, [RC_JS, 'tunnel', 'status'], { env, encoding: 'utf8', timeout: 20_000 });
  assert.equal(human.status, 0, human.stderr);
  assert.ok(human.stdout.includes(`connected ${tunnel!.publicUrl}`), human.stdout);

  await waitFor(() => {
    const logs = spawnSync(process.execPath, [TUNNEL_JS, 'logs', '--lines', '2'], { env, encoding: 'utf8', timeout: 20_000 });
    const lines = logs.stdout.trimEnd().split('\n');
    return logs.status === 0 && lines.length === 2 && lines.some((l) => l.includes('POST /hello?who=world 200'));
  });
  const all = spawnSync(process.execPath, [TUNNEL_JS, 'logs', '--lines', '100'], { env, encoding: 'utf8', timeout: 20_000 });
  assert.match(all.stdout, /connected: http:\/\/t[0-9a-f]{24}\.localhost:\d+\/ -> http:\/\/127\.0\.0\.1:\d+/);

  // Destroying the instance ends the tunnel.
  await agent.remove('i_nb', 1000);
  f.routes.delete('i_nb');
  await waitFor(() => !f.broker.tunnels().some((x) => x.instanceId === 'i_nb'), 20_000);
  assert.equal((await tunnelFetch(`${tunnel!.publicUrl}hello`)).status, 404);
});
