// Gateways apart from the control plane, on one machine (loopback; the netns suite runs the same
// across hosts): `rc control-plane`, two `rc gateway` replicas learning from it over the internal
// API and Redis, and one `rc agent` registered with the admin API. Keys, the catalog and instance
// routes come from the control plane; a rotated key is refused by both replicas; a dedicated
// endpoint answers through both; activity seen by either resets the idle timer; the control
// plane restarted: the replicas keep serving and catch up; a replica SIGKILLed mid-stream loses
// only its own stream.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { request } from 'undici';
import { Store } from '../../control-plane/store.js';
import { tunnelId } from '../../lib/tunnel/identity.js';
import { RC_JS } from '../agent/harness.js';
import { dropKeysAfter, redisAvailable, REDIS_URL, waitFor } from '../helpers.js';
import { admin, call, chat, freePort, killChild, newToken, spawnRc, stopChild, tempDir, type RcProcess } from './harness.js';

const rc = `"${process.execPath}" "${RC_JS}"`;

test('standalone gateways learn everything from the control plane and follow it', async (t) => {
  if (!(await redisAvailable(t))) return;
  const dir = tempDir(t, 'rc-fleet-cp-');
  const prefix = `rc-test-fleet-${randomBytes(4).toString('hex')}:`;
  dropKeysAfter(t, prefix);
  const [apiPort, gw1Port, gw2Port] = [await freePort(), await freePort(), await freePort()];
  const common = { REDIS_URL, RC_GATE_KEY_PREFIX: prefix, RC_HOST: '127.0.0.1' };
  const cpEnv = {
    ...common,
    RC_DATA_DIR: dir,
    RC_API_PORT: String(apiPort),
    RC_PROXY_PORT: '0',
    RC_CONTROL_METRICS_PORT: '0',
    RC_SIM_PORT_BASE: '0',
    RC_SIM_TTFT_MS: '0',
    RC_SIM_TOKENS_PER_SECOND: '20',
    RC_INSTANCE_TICK_MS: '200',
    RC_INSTANCE_LAUNCH_RATE: '1:1000',
    RC_INSTANCE_PUBLIC_URL: `http://127.0.0.1:${gw1Port}`,
    RC_TUNNEL_BROKERS: `http://127.0.0.1:${gw1Port},http://127.0.0.1:${gw2Port}`,
  };
  let cp: RcProcess = await spawnRc(t, ['control-plane'], cpEnv);
  const api = cp.ready.api as string;
  assert.equal(api, `http://127.0.0.1:${apiPort}`);
  const internalToken = readFileSync(join(dir, 'internal.token'), 'utf8').trim();

  const token = newToken();
  const agent = await spawnRc(t, ['agent', '--host', '127.0.0.1', '--port', '0', '--data-dir', tempDir(t, 'rc-fleet-agent-')], {
    RC_AGENT_TOKEN: token,
    RC_AGENT_GPU_DETECT: 'configured',
    RC_AGENT_GPUS: '2',
    RC_AGENT_LOST_CONTROL_PLANE_MS: '0',
    RC_AGENT_STOP_GRACE_MS: '2000',
  });
  t.after(() => call(`${api}/api/notebook/current`, { method: 'DELETE', key: acct.api_token }).catch(() => {}));
  assert.equal((await admin(api, dir, 'host.add', { name: 'gpu-1', address: agent.ready.address, token })).status, 200);

  const gwEnv = {
    ...common,
    RC_CONTROL_PLANE_URL: api,
    RC_INTERNAL_TOKEN: internalToken,
    RC_GATEWAY_RESYNC_MS: '1000',
    RC_GATEWAY_ACTIVITY_REPORT_MS: '200',
    RC_TUNNEL_PORT: '0',
  };
  // A wrong internal token is a configuration error: the gateway exits instead of serving nothing.
  await assert.rejects(spawnRc(t, ['gateway', '--port', '0'], { ...gwEnv, RC_INTERNAL_TOKEN: 'w'.repeat(32) }), /answered 401/);
  const gw1 = await spawnRc(t, ['gateway', '--port', String(gw1Port)], gwEnv);
  const gw2 = await spawnRc(t, ['gateway', '--port', String(gw2Port)], gwEnv);
  const gateways = [gw1.ready.url as string, gw2.ready.url as string];

  // An account created after the gateways started: its key arrives as an event.
  const acct = (await admin(api, dir, 'account.create', { email: 'fleet@example.com', verified: true, credits: 100 })).body;
  for (const g of gateways) {
    const r = await waitFor(async () => {
      const x = await chat(`${g}/v1`, acct.api_token, 'sim-chat');
      return x.status === 200 ? x : undefined;
    });
    assert.equal(r.body.object, 'chat.completion');
    assert.equal(
      (await call(`${g}/v1/models`, { key: acct.api_token })).body.data
        .map((m: { id: string }) => m.id)
        .sort()
        .join(),
      'sim-chat,sim-reasoner',
    );
  }

  // Account limits, the catalog and browser sessions changed at the control plane reach both replicas.
  assert.equal((await admin(api, dir, 'account.set-limits', { email: 'fleet@example.com', rpm: 1 })).status, 200);
  await waitFor(async () => (await chat(`${gateways[0]}/v1`, acct.api_token, 'sim-chat')).status === 429, 5000, 20);
  assert.equal((await chat(`${gateways[1]}/v1`, acct.api_token, 'sim-chat')).status, 429); // one shared gate in Redis
  await admin(api, dir, 'account.set-limits', { email: 'fleet@example.com', clear: true });
  const simUrl = (await call(`${api}/api/internal/gateway-snapshot`, { headers: { 'x-rc-internal-token': internalToken } })).body.models[0].upstreams[0];
  await admin(api, dir, 'model.add', { name: 'fleet-extra', upstreams: [simUrl], servedName: 'sim-chat' });
  for (const g of gateways) {
    await waitFor(async () => (await call(`${g}/v1/models`, { key: acct.api_token })).body.data.some((m: { id: string }) => m.id === 'fleet-extra'), 5000, 20);
  }
  const signup = await request(`${api}/api/auth/signup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: 'browser@example.com', password: 'browser-password' }),
  });
  const session = { cookie: String(signup.headers['set-cookie']).split(';')[0]!, csrf: ((await signup.body.json()) as { csrf_token: string }).csrf_token };
  for (const g of gateways) {
    const r = await waitFor(
      async () => {
        const x = await call(`${g}/v1/chat/completions`, {
          headers: { cookie: session.cookie, 'x-csrf-token': session.csrf },
          body: { model: 'sim-chat', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 },
        });
        return x.status === 200 ? x : undefined;
      },
      5000,
      20,
    );
    assert.equal(r.body.object, 'chat.completion');
  }

  // An instance serving a model on its routed port, also exposed with rc-tunnel (to every replica).
  const template = (
    await call(`${api}/api/profile/templates`, {
      key: acct.api_token,
      body: {
        title: 'sim + tunnel',
        image: 'vllm/vllm-openai:latest',
        instance_type: 'vllm',
        app_port: 8000,
        start_command: `${rc} tunnel expose --port $PORT --detach && exec ${rc} sim --port $PORT --model demo --fast`,
      },
    })
  ).body;
  assert.equal((await call(`${api}/api/templates/${template.id}/launch`, { key: acct.api_token, body: {} })).status, 200);
  const ready = await waitFor(
    async () => {
      const s = (await call(`${api}/api/notebook/status`, { key: acct.api_token })).body;
      if (s.status === 'failed') throw new Error(`instance failed: ${s.reason} ${s.detail}`);
      return s.status === 'ready' ? s : undefined;
    },
    30_000,
    100,
  );
  const dedicatedPath = new URL(ready.dedicated_base_url as string).pathname;
  for (const g of gateways) {
    const r = await waitFor(async () => {
      const x = await chat(g + dedicatedPath, acct.api_token, 'demo');
      return x.status === 200 ? x : undefined;
    });
    assert.equal(r.body.model, 'demo');
  }
  // The tunnel's public URL answers through both replicas (no key: that is the customer's service).
  const snapshot = (await call(`${api}/api/internal/gateway-snapshot`, { headers: { 'x-rc-internal-token': internalToken } })).body;
  const route = snapshot.instances.find((r: { instanceId: string }) => r.instanceId === ready.instance_id);
  // Each replica serves tunnels on its own listener, by host name: <tunnel id>.localhost.
  const tunnelHost = `${tunnelId(readFileSync(join(dir, 'tunnel', 'secret'), 'utf8').trim(), ready.instance_id, route.port)}.localhost`;
  for (const listener of [gw1.ready.tunnels as string, gw2.ready.tunnels as string]) {
    const r = await waitFor(async () => {
      const x = await call(`${listener}/v1/models`, { headers: { host: tunnelHost } });
      return x.status === 200 ? x : undefined;
    });
    assert.equal(r.body.data[0].id, 'demo');
  }
  assert.equal((await call(`${api}/api/internal/gateway-snapshot`)).status, 401);

  // Activity seen only by the second replica resets the idle timer.
  await new Promise((r) => setTimeout(r, 1100));
  assert.equal((await chat(gateways[1] + dedicatedPath, acct.api_token, 'demo')).status, 200);
  await waitFor(async () => {
    const s = (await call(`${api}/api/notebook/status`, { key: acct.api_token })).body;
    return Date.parse(s.idle_expires_at) > Date.parse(ready.idle_expires_at);
  });

  // A rotated key is refused by both replicas (and the new one accepted).
  const rotated = (await call(`${api}/api/profile/api-token`, { key: acct.api_token, body: {} })).body.api_token as string;
  const rotatedAt = Date.now();
  await Promise.all(gateways.map((g) => waitFor(async () => (await chat(`${g}/v1`, acct.api_token, 'sim-chat')).status === 401, 5000, 5)));
  t.diagnostic(`rotated key refused by both replicas ${Date.now() - rotatedAt} ms after the rotation answered`);
  acct.api_token = rotated;
  for (const g of gateways) {
    assert.equal((await chat(`${g}/v1`, rotated, 'sim-chat')).status, 200);
    assert.equal((await chat(g + dedicatedPath, rotated, 'demo')).status, 200);
  }

  // The control plane stops: both replicas keep serving with what they hold.
  await stopChild(cp);
  for (const g of gateways) {
    // The shared sims ran in the control plane's process: the key is still accepted, the backend is gone.
    assert.notEqual((await chat(`${g}/v1`, rotated, 'sim-chat')).status, 401);
    assert.equal((await chat(g + dedicatedPath, rotated, 'demo')).status, 200);
  }
  // A key issued while the control plane is down (no event): the replicas catch up after its return.
  const store = await Store.open({ dataDir: dir });
  const issued = await store.keys.issue(acct.id);
  await store.close();
  cp = await spawnRc(t, ['control-plane'], cpEnv);
  for (const g of gateways) {
    await waitFor(async () => (await chat(g + dedicatedPath, issued.key, 'demo')).status === 200, 10_000, 100);
    assert.equal((await chat(g + dedicatedPath, rotated, 'demo')).status, 401);
  }
  acct.api_token = issued.key;
  // The restarted control plane's sims listen on new ports: the replicas' catalogs follow.
  for (const g of gateways) await waitFor(async () => (await chat(`${g}/v1`, issued.key, 'sim-chat')).status === 200, 10_000, 100);

  // A replica SIGKILLed mid-stream loses only its own stream.
  const streams = gateways.map((g) => openStream(`${g}/v1`, issued.key));
  await Promise.all(streams.map((s) => s.firstChunk));
  await killChild(gw1.child);
  const [lost, kept] = await Promise.all(streams.map((s) => s.done));
  assert.equal(lost!.complete, false);
  assert.equal(kept!.complete, true);
  assert.equal((await chat(`${gateways[1]}/v1`, issued.key, 'sim-chat')).status, 200);
});

/** A streamed chat completion: resolves `firstChunk` at its first bytes, `done` with whether it reached [DONE]. */
function openStream(baseUrl: string, key: string): { firstChunk: Promise<void>; done: Promise<{ complete: boolean }> } {
  let first!: () => void;
  const firstChunk = new Promise<void>((r) => {
    first = r;
  });
  const done = (async () => {
    let text = '';
    try {
      const res = await request(`${baseUrl}/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'sim-chat', stream: true, max_tokens: 60, messages: [{ role: 'user', content: 'tell me a long story' }] }),
      });
      for await (const chunk of res.body) {
        text += chunk.toString();
        first();
      }
    } catch {
      first();
    }
    return { complete: text.includes('data: [DONE]') };
  })();
  return { firstChunk, done };
}

test('rc gateway with a control plane: usage errors exit 2', async () => {
  const { execFile } = await import('node:child_process');
  const run = (args: string[], env: Record<string, string> = {}) =>
    new Promise<{ code: number; stderr: string }>((resolve) => {
      execFile(
        process.execPath,
        [RC_JS, 'gateway', '--port', '0', ...args],
        { env: { PATH: process.env.PATH ?? '', RC_LOG_LEVEL: 'silent', ...env }, timeout: 30_000 },
        (err, _stdout, stderr) => resolve({ code: err ? (typeof err.code === 'number' ? err.code : 1) : 0, stderr }),
      );
    });
  const both = await run(['--control-plane', 'http://127.0.0.1:1', '--keys-file', '/nonexistent'], { RC_INTERNAL_TOKEN: 'x'.repeat(32) });
  assert.equal(both.code, 2);
  assert.match(both.stderr, /either a control plane or --keys-file/);
  const noToken = await run(['--control-plane', 'http://127.0.0.1:1']);
  assert.equal(noToken.code, 2);
  assert.match(noToken.stderr, /internal token/);
  assert.equal((await run(['--control-plane', 'not a url'], { RC_INTERNAL_TOKEN: 'x'.repeat(32) })).code, 2);
  assert.equal((await run(['--control-plane', 'http://127.0.0.1:1', '--internal-token-file', '/nonexistent'])).code, 2);
});
