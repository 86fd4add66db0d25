// The fleet across real hosts on one machine: two GPU hosts are network namespaces with their own
// addresses (test/fleet/netns.ts), each running `rc agent`; the control plane (`rc control-plane`),
// Redis and two `rc gateway` replicas run on the machine. Needs root (skipped otherwise, failed
// with RC_REQUIRE_NETNS=1) and Redis.
//
// Covered: hosts join with `rc host add`; a launch that does not fit on one host lands on the
// other; each dedicated endpoint answers through both gateways; a rotated key is refused by both;
// a host's link cut shows `host unreachable` and restored brings it back `ready` (same instance,
// one process); a drained host gets no new placement; the control plane restarted (hosts
// redialled from the registry, gateways serving meanwhile); a gateway replica SIGKILLed.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { instanceGroups, RC_JS } from '../agent/harness.js';
import { dropKeysAfter, redisAvailable, REDIS_URL, waitFor } from '../helpers.js';
import { admin, call, chat, freePort, killChild, newToken, runRc, spawnRc, stopChild, tempDir, type RcProcess } from './harness.js';
import { NetnsLab, netnsAvailable } from './netns.js';

const rc = `"${process.execPath}" "${RC_JS}"`;
/** A model server reachable from outside its host (binds every address of the namespace). */
const SERVING = `exec ${rc} sim --host 0.0.0.0 --port $PORT --model demo --fast`;

interface Account {
  id: number;
  key: string;
  email: string;
}

// The test's own timeout is below the runner's per-file one (scripts/test.mjs, 300 s): a test that
// times out is reported with its diagnostics, among them how far it got (the phases below); a
// file the runner kills reports nothing.
test('a fleet: two hosts in network namespaces, two gateways, one control plane', { timeout: 240_000 }, async (t) => {
  if (!netnsAvailable(t) || !(await redisAvailable(t))) return;
  const startedAt = Date.now();
  const phase = (name: string) => t.diagnostic(`${Date.now() - startedAt} ms: ${name}`);
  const lab = new NetnsLab(t);
  const hostA = lab.addHost('a');
  const hostB = lab.addHost('b');
  t.diagnostic(`hosts: ${hostA.ns} ${hostA.address}, ${hostB.ns} ${hostB.address} (10.213.x = ${lab.subnet})`);

  // The control plane and Redis on the machine.
  const dir = tempDir(t, 'rc-netns-cp-');
  const [apiPort, gw1Port, gw2Port] = [await freePort(), await freePort(), await freePort()];
  const prefix = `rc-test-netns-${randomBytes(4).toString('hex')}:`;
  dropKeysAfter(t, prefix);
  const common = { REDIS_URL, RC_GATE_KEY_PREFIX: prefix, RC_HOST: '127.0.0.1' };
  const cpEnv = {
    ...common,
    RC_DATA_DIR: dir,
    RC_API_PORT: String(apiPort),
    RC_PROXY_PORT: '0',
    RC_CONTROL_METRICS_PORT: '0',
    RC_SIM_PORT_BASE: '0',
    RC_SIM_FAST: '1',
    RC_INSTANCE_TICK_MS: '200',
    RC_INSTANCE_LAUNCH_RATE: '1:1000',
    RC_INSTANCE_PUBLIC_URL: `http://127.0.0.1:${gw1Port}`,
    RC_INSTANCE_HOST_STALL_MS: '8000',
    RC_INSTANCE_HOST_UNREACHABLE_MS: '2000',
  };
  let cp: RcProcess = await spawnRc(t, ['control-plane'], cpEnv);
  const api = cp.ready.api as string;

  phase('agents');
  // An agent on each host, bound to the host's own address; registered with `rc host add`.
  const agents: Record<string, RcProcess> = {};
  for (const [name, h] of [
    ['gpu-a', hostA],
    ['gpu-b', hostB],
  ] as const) {
    const tokenFile = join(dir, `${name}.token`);
    writeFileSync(tokenFile, newToken() + '\n', { mode: 0o600 });
    agents[name] = await spawnRc(
      t,
      ['agent', '--host', h.address, '--port', '7070', '--data-dir', tempDir(t, `rc-netns-${name}-`), '--token-file', tokenFile],
      {
        RC_AGENT_GPU_DETECT: 'configured',
        RC_AGENT_GPUS: '2',
        RC_AGENT_LOST_CONTROL_PLANE_MS: '0',
        RC_AGENT_STOP_GRACE_MS: '2000',
      },
      h.exec,
    );
    const added = await runRc(['host', 'add', '--name', name, '--address', `${h.address}:7070`, '--token-file', tokenFile], { RC_DATA_DIR: dir });
    assert.equal(added.name, name);
  }
  const hosts = async () => (await admin(api, dir, 'host.list')).body.hosts as { name: string; state: string; gpus_total: number; gpus_free: number }[];
  const host = async (name: string) => (await hosts()).find((h) => h.name === name)!;
  await waitFor(async () => (await hosts()).every((h) => h.state === 'connected' && h.gpus_total === 2), 20_000, 100);

  phase('gateways');
  // Two gateway replicas learning from the control plane.
  const internalToken = readFileSync(join(dir, 'internal.token'), 'utf8').trim();
  const gwEnv = { ...common, RC_CONTROL_PLANE_URL: api, RC_INTERNAL_TOKEN: internalToken, RC_GATEWAY_RESYNC_MS: '2000' };
  const gw1 = await spawnRc(t, ['gateway', '--port', String(gw1Port)], gwEnv);
  const gw2 = await spawnRc(t, ['gateway', '--port', String(gw2Port)], gwEnv);
  const gateways = [gw1.ready.url as string, gw2.ready.url as string];

  const accounts: Account[] = [];
  for (const email of ['one@example.com', 'two@example.com', 'three@example.com']) {
    const a = (await admin(api, dir, 'account.create', { email, verified: true, credits: 100 })).body;
    accounts.push({ id: a.id, key: a.api_token, email });
  }
  const [one, two, three] = accounts as [Account, Account, Account];
  const status = async (a: Account) => (await call(`${api}/api/notebook/status`, { key: a.key })).body;
  const launch = async (a: Account, gpus: number) => {
    const tpl = (
      await call(`${api}/api/profile/templates`, {
        key: a.key,
        body: { title: 'demo', image: 'vllm/vllm-openai:latest', instance_type: 'vllm', app_port: 8000, start_command: SERVING },
      })
    ).body;
    const r = await call(`${api}/api/templates/${tpl.id}/launch`, { key: a.key, body: { gpu_count: gpus } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.instance_id as string;
  };
  const ready = (a: Account) =>
    waitFor(
      async () => {
        const s = await status(a);
        if (s.status === 'failed') throw new Error(`${a.email}: instance failed (${s.reason}: ${s.detail})`);
        return s.status === 'ready' && s.message === 'ready' ? s : undefined;
      },
      60_000,
      100,
    );

  phase('launches');
  // 2 GPUs fill one host; the next launch does not fit there and lands on the other.
  const idOne = await launch(one, 2);
  const s1 = await ready(one);
  const idTwo = await launch(two, 1);
  const s2 = await ready(two);
  assert.notEqual(s1.host, s2.host);
  const hostOf = { [s1.host]: s1.host === 'gpu-a' ? hostA : hostB, [s2.host]: s2.host === 'gpu-a' ? hostA : hostB };
  t.diagnostic(`placed: ${idOne} (2 GPUs) on ${s1.host}, ${idTwo} (1 GPU) on ${s2.host}`);

  phase('dedicated endpoints');
  // Each dedicated endpoint answers through both gateways.
  const path = (s: { dedicated_base_url: string }) => new URL(s.dedicated_base_url).pathname;
  for (const [a, s] of [
    [one, s1],
    [two, s2],
  ] as const) {
    for (const g of gateways) {
      const r = await waitFor(
        async () => {
          const x = await chat(g + path(s), a.key, 'demo');
          return x.status === 200 ? x : undefined;
        },
        10_000,
        50,
      );
      assert.equal(r.body.model, 'demo');
    }
  }

  phase('key rotation');
  // A rotated key is refused by both gateways.
  const rotated = (await call(`${api}/api/profile/api-token`, { key: two.key, body: {} })).body.api_token as string;
  const rotatedAt = Date.now();
  await Promise.all(gateways.map((g) => waitFor(async () => (await chat(g + path(s2), two.key, 'demo')).status === 401, 5_000, 5)));
  t.diagnostic(`rotated key refused by both gateways ${Date.now() - rotatedAt} ms after the rotation answered`);
  two.key = rotated;
  // The new key's event comes right behind the revocation on the bus, but may not have been
  // read yet when the old key is first refused: wait for it the same way (the waits fail if not).
  await Promise.all(gateways.map((g) => waitFor(async () => (await chat(g + path(s2), two.key, 'demo')).status === 200, 5_000, 5)));

  phase('link cut');
  // The link of the first instance's host is cut, then restored.
  const cutHost = hostOf[s1.host]!;
  const cutAt = Date.now();
  lab.cut(cutHost);
  await waitFor(async () => (await status(one)).message === 'host unreachable', 60_000, 100);
  const unreachableAfter = Date.now() - cutAt;
  assert.equal((await host(s1.host)).state, 'unreachable');
  assert.equal((await status(one)).status, 'ready'); // the instance itself still runs there
  assert.equal((await status(two)).message, 'ready'); // the other host is not affected
  const restoredAt = Date.now();
  lab.restore(cutHost);
  const back = await ready(one);
  const recoveredAfter = Date.now() - restoredAt;
  assert.equal(back.instance_id, idOne);
  // Ready comes from the reconciliation's adoption; the host takes placements once it has ended.
  await waitFor(async () => (await host(s1.host)).state === 'connected', 20_000, 100);
  assert.equal(instanceGroups(agents[s1.host]!.ready.agentId, idOne).length, 1); // reconciled, not started twice
  for (const g of gateways) assert.equal((await chat(g + path(s1), one.key, 'demo')).status, 200);
  t.diagnostic(`link cut: host unreachable after ${unreachableAfter} ms; link restored: ready again after ${recoveredAfter} ms`);

  phase('drain');
  // A drained host gets no new placement; its instance keeps running.
  const drained = await runRc(['host', 'drain', s2.host], { RC_DATA_DIR: dir });
  assert.equal(drained.state, 'draining');
  await launch(three, 1);
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal((await status(three)).message, 'waiting for capacity (position 1 in the queue)'); // s1's host is full, s2's is draining
  assert.equal((await call(`${api}/api/notebook/current`, { method: 'DELETE', key: one.key })).status, 200);
  const s3 = await ready(three);
  assert.equal(s3.host, s1.host);
  assert.equal((await status(two)).status, 'ready');

  phase('control plane restart');
  // The control plane restarts: gateways keep serving meanwhile; hosts are redialled from the registry.
  await stopChild(cp);
  for (const g of gateways) assert.equal((await chat(g + path(s2), two.key, 'demo')).status, 200);
  cp = await spawnRc(t, ['control-plane'], cpEnv);
  await waitFor(async () => (await hosts()).filter((h) => h.state !== 'unreachable').length === 2, 20_000, 100);
  assert.equal((await host(s2.host)).state, 'draining'); // the drain survives the restart
  assert.equal((await ready(two)).instance_id, idTwo);
  assert.equal((await ready(three)).instance_id, s3.instance_id);

  phase('gateway killed');
  // A gateway replica SIGKILLed: the other serves on.
  await killChild(gw1.child);
  assert.equal((await chat(gateways[1] + path(s2), two.key, 'demo')).status, 200);
  assert.equal((await chat(gateways[1] + path(s3), three.key, 'demo')).status, 200);

  for (const a of [two, three]) await call(`${api}/api/notebook/current`, { method: 'DELETE', key: a.key });
  await waitFor(async () => (await status(two)).status === 'stopped' && (await status(three)).status === 'stopped', 20_000, 100);
});
