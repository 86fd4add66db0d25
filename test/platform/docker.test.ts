// npm start with a Docker engine: the embedded agent picks the docker runtime, the seeded
// templates run as containers from locally built images (built on first use), the demo endpoint
// answers through the gateway, and rc-tunnel inside a container exposes its app through the
// real broker. Launch-to-ready times are reported (never asserted).
import { issueTunnelToken, tunnelSecret } from '../../lib/tunnel/identity.js';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import OpenAI from 'openai';
import { Client } from 'undici';
import { startPlatform } from '../../bin/platform.js';
import { loadConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { DOCKER_SOCKET, dockerAvailable, localImagesBuildable, waitFor, platformTestEnv } from '../helpers.js';
import { removeAgentContainers, removeTestFirewall, TEST_NET_PREFIX } from '../agent/docker-isolation-harness.js';
import { tunnelFetch } from '../dedicated/fixture.js';

const RC = fileURLToPath(new URL('../../bin/rc.js', import.meta.url));

test('npm start with an engine: seeded templates as containers, the demo endpoint, rc-tunnel through the broker', { timeout: 600_000 }, async (t) => {
  if (!(await dockerAvailable(t)) || !(await localImagesBuildable(t, 'rc/vllm-sim:latest', 'rc/gradio:latest', 'rc/jupyter-pytorch:latest'))) return;
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-start-docker-'));
  const env = {
    ...platformTestEnv(dataDir),
    RC_AGENT_GPU_DETECT: 'configured',
    RC_AGENT_RUNTIME: 'auto',
    RC_AGENT_DOCKER_SOCKET: DOCKER_SOCKET,
    RC_INSTANCE_LAUNCH_RATE: '1:100',
    RC_AGENT_STOP_GRACE_MS: '2000',
    RC_AGENT_MEMORY_MB_PER_GPU: '1024',
    RC_AGENT_CPUS_PER_GPU: '1',
    // Bridges and firewall chains of this test's own prefix, removed afterwards.
    RC_AGENT_NETWORK_PREFIX: TEST_NET_PREFIX,
  };
  const p = await startPlatform(loadConfig(env), createLogger('warn'));
  t.after(async () => {
    await p.close();
    await removeAgentContainers(p.agent.agentId);
    await removeTestFirewall();
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(`${dataDir}-instances`, { recursive: true, force: true });
  });
  assert.equal(p.agent.supervisor.host().runtime, 'docker', 'an engine answers: containers');
  const api = p.controlPlane.url;
  const gateway = p.gateway.url;
  const { stdout } = await promisify(execFile)(process.execPath, [RC, 'account', 'create', '--email', 'docker@example.com', '--verified', '--credits', '20'], {
    env: { ...process.env, ...env },
  });
  const key = (JSON.parse(stdout) as { api_token: string }).api_token;
  const auth = { authorization: `Bearer ${key}`, 'content-type': 'application/json' };
  const status = async () => (await (await fetch(`${api}/api/notebook/status`, { headers: auth })).json()) as Record<string, any>;
  const templates = ((await (await fetch(`${api}/api/templates`)).json()) as { templates: { id: number; slug: string }[] }).templates;

  const launchToReady = async (templateId: number): Promise<{ st: Record<string, any>; ms: number }> => {
    const t0 = Date.now();
    const r = await fetch(`${api}/api/templates/${templateId}/launch`, { method: 'POST', headers: auth, body: '{"gpu_count":1}' });
    assert.equal(r.status, 200, await r.clone().text());
    const st = await waitFor(
      async () => {
        const s = await status();
        assert.notEqual(s.status, 'failed', JSON.stringify(s));
        return s.status === 'ready' ? s : undefined;
      },
      300_000,
      100,
    );
    return { st, ms: Date.now() - t0 };
  };
  const destroy = async () => {
    assert.equal((await fetch(`${api}/api/notebook/current`, { method: 'DELETE', headers: auth })).status, 200);
    await waitFor(async () => (await status()).status === 'stopped', 60_000, 100);
  };

  for (const slug of ['vllm-demo', 'gradio-demo', 'jupyter']) {
    const tpl = templates.find((x) => x.slug === slug)!;
    const { st, ms } = await launchToReady(tpl.id);
    t.diagnostic(`${slug}: launch to ready ${ms} ms in docker (image built on first use when missing)`);
    if (slug === 'vllm-demo') {
      const dedicated = new OpenAI({ baseURL: st.dedicated_base_url, apiKey: key });
      const served = await dedicated.chat.completions.create({ model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
      assert.equal(served.model, 'demo');
    }
    await destroy();
  }

  // rc-tunnel inside a container: the identity and broker provisioned at launch, the broker on the
  // host's loopback reached through host.docker.internal, the public URL serving the app.
  const created = await fetch(`${api}/api/profile/templates`, {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({
      title: 'Tunnel app',
      image: 'rc/gradio:latest',
      instance_type: 'gradio',
      app_port: 7860,
      start_command: 'mkdir -p /srv && echo tunnelled > /srv/hello && rc-tunnel expose --port $PORT --detach && cd /srv && exec python3 -m http.server $PORT',
    }),
  });
  assert.equal(created.status, 200, await created.clone().text());
  const { st } = await launchToReady(((await created.json()) as { id: number }).id);
  const home = join(`${dataDir}-instances`, 'homes', st.instance_id as string);
  const publicUrl = await waitFor(
    async () => {
      // `status` runs here, outside the container: give it what the instance has (its token is in its environment only).
      const env = {
        ...process.env,
        RC_INSTANCE_DIR: home,
        RC_TUNNEL_BROKER: gateway,
        RC_TUNNEL_TOKEN: issueTunnelToken(tunnelSecret('', dataDir), st.instance_id as string),
      };
      const out = await promisify(execFile)(process.execPath, [RC, 'tunnel', 'status', '--json'], { env });
      return (
        (JSON.parse(out.stdout) as { tunnels: { state: string; public_url: string | null }[] }).tunnels.find((x) => x.state === 'connected')?.public_url ??
        undefined
      );
    },
    60_000,
    200,
  ).catch(async (err: unknown) => {
    const logs = await promisify(execFile)('sh', [
      '-c',
      `ls -la ${home} ${home}/.rc-tunnel; ls -la ${home}/.rc-tunnel-state; tail -n 20 ${home}/.rc-tunnel-state/*; docker logs rc-${st.instance_id} 2>&1 | tail -20`,
    ]).catch((e: { stdout: string }) => e);
    throw new Error(`${(err as Error).message}\n${logs.stdout}`);
  });
  // Tunnels have an origin of their own (the tunnels listener), not the gateway's.
  assert.equal(publicUrl, `http://${new URL(publicUrl).hostname.split('.')[0]}.localhost:${p.tunnels.port}/`);
  assert.equal(await (await tunnelFetch(`${publicUrl}hello`)).text(), 'tunnelled\n');
  // The token stayed outside the container (issue 27): the agent's relay presented it.
  const inspect = new Client('http://localhost', { socketPath: DOCKER_SOCKET });
  try {
    const res = await inspect.request({ method: 'GET', path: `/v1.41/containers/rc-${st.instance_id as string}/json` });
    const containerEnv = ((await res.body.json()) as { Config: { Env: string[] } }).Config.Env;
    assert.ok(containerEnv.includes('RC_TUNNEL_VIA_RELAY=1'), containerEnv.join(' '));
    assert.ok(!containerEnv.some((e) => e.startsWith('RC_TUNNEL_TOKEN=') || e.includes('rct-')), 'no tunnel token in the container');
  } finally {
    await inspect.close();
  }
  await destroy();
});
