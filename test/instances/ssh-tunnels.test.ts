// The status object's SSH and tunnels (issue 42), with a real agent (process runtime): SSH only
// where the template enables it, the image serves it (the image catalog's `ssh`) and a key was
// saved at launch, `ssh_missing` saying which is not so; port 22 and the key go to the host only
// then. Tunnels the brokers announce on the bus appear in the status and on the status stream
// while the instance lives, and go when it stops. The image step's progress from the agent's
// message. A snapshot from before the catalog said keeps SSH as it was.
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { buildSpec, sshMissing } from '../../control-plane/instances/launch-spec.js';
import { launchProgress } from '../../control-plane/instances/views.js';
import { tunnelId } from '../../lib/tunnel/identity.js';
import { startPlatform, startTestAgent, waitStatus } from './harness.js';
import { openSse } from './sse.js';

const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey me@laptop';
const IMAGE = 'vllm/vllm-openai:latest';

test('SSH is offered only where the template enables it, the image serves it and a key was saved; which is missing is said', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const cases = [
    { email: 'no-server@x.io', imageSsh: false, key: KEY, ssh: true, missing: 'image' },
    { email: 'no-key@x.io', imageSsh: true, key: null, ssh: true, missing: 'key' },
    { email: 'off@x.io', imageSsh: true, key: KEY, ssh: false, missing: 'template' },
    { email: 'offered@x.io', imageSsh: true, key: KEY, ssh: true, missing: null },
  ] as const;
  for (const c of cases) {
    await p.store.images.setSsh(IMAGE, c.imageSsh);
    const me = await p.account(c.email);
    if (c.key) await p.store.accounts.setSshPublicKey(me.id, c.key);
    const tpl = await p.template(me.id, { ssh_enabled: c.ssh });
    const launched = await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} });
    assert.equal(launched.status, 200);
    // The operator changes the catalog after the launch: the instance keeps what held then.
    await p.store.images.setSsh(IMAGE, !c.imageSsh);
    const ready = await waitStatus(p, me.key, 'ready');
    assert.equal(ready.ssh_missing, c.missing, c.email);
    const row = (await p.instances.service.instances.get(ready.instance_id))!;
    const spec = JSON.parse(row.spec!) as { ports: number[]; sshPublicKey: string };
    const authorized = join(`${agent.dataDir}-instances`, 'homes', ready.instance_id, '.ssh', 'authorized_keys');
    if (c.missing === null) {
      assert.deepEqual(Object.keys(ready.ssh).sort(), ['host', 'port']);
      assert.ok(spec.ports.includes(22));
      assert.equal(existsSync(authorized), true);
    } else {
      assert.equal(ready.ssh, null, c.email);
      assert.equal(row.ssh_port, null);
      assert.ok(!spec.ports.includes(22), `${c.email}: port 22 is not published`);
      assert.equal(spec.sshPublicKey, '');
      assert.equal(existsSync(authorized), false);
    }
    await p.call('DELETE', '/api/notebook/current', { key: me.key });
    await waitStatus(p, me.key, 'stopped');
  }

  // A snapshot made before the catalog said whether images serve SSH keeps SSH as it was then.
  const old = { ssh_enabled: true, ssh_public_key: null, image: IMAGE, instance_type: 'vllm', app_port: 8000 } as never;
  assert.equal(sshMissing(old), null);
  assert.equal(sshMissing({ ...(old as object), image_ssh: false } as never), 'image');
  assert.ok(buildSpec({ id: 'inst-x', gpu_count: 1, disk_gb: 100, account_id: 1 } as never, old).ports?.includes(22));
});

test('tunnels the brokers announce are in the status object and pushed on the status stream while the instance lives; gone when it stops', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const me = await p.account('tunnels@x.io');
  const tpl = await p.template(me.id);
  await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} });
  const ready = await waitStatus(p, me.key, 'ready');
  assert.deepEqual(ready.tunnels, []);
  const events = await openSse(`${p.cp.url}/api/notebook/events`, me.key);
  t.after(() => events.close());
  await events.next((e) => e.event === 'status');

  const id = tunnelId('s'.repeat(32), ready.instance_id, 8080);
  const url = `http://${id}.localhost:8082/`;
  await p.bus.publish({ type: 'tunnel.opened', brokerId: 'b1', ttlMs: 60_000, instanceId: ready.instance_id, tunnelId: id, port: 8080, publicUrl: url });
  const pushed = await events.next((e) => e.event === 'status' && JSON.parse(e.data).tunnels.length === 1);
  assert.deepEqual(JSON.parse(pushed.data).tunnels, [{ tunnel_id: id, port: 8080, public_url: url }]);
  assert.deepEqual((await p.call('GET', '/api/notebook/status', { key: me.key })).body.tunnels, [{ tunnel_id: id, port: 8080, public_url: url }]);
  // Another account's instance's tunnel is not listed here.
  await p.bus.publish({
    type: 'tunnel.opened',
    brokerId: 'b1',
    ttlMs: 60_000,
    instanceId: 'inst-other',
    tunnelId: tunnelId('s'.repeat(32), 'inst-other', 1),
    port: 1,
    publicUrl: 'http://x.localhost/',
  });
  assert.equal((await p.call('GET', '/api/notebook/status', { key: me.key })).body.tunnels.length, 1);

  await p.bus.publish({ type: 'tunnel.closed', brokerId: 'b1', instanceId: ready.instance_id, tunnelId: id });
  await events.next((e) => e.event === 'status' && JSON.parse(e.data).tunnels.length === 0);
  await p.bus.publish({ type: 'tunnel.opened', brokerId: 'b1', ttlMs: 60_000, instanceId: ready.instance_id, tunnelId: id, port: 8080, publicUrl: url });
  await events.next((e) => e.event === 'status' && JSON.parse(e.data).tunnels.length === 1);

  // It stops: no tunnels listed (its brokers close them too), even if a late report still names one.
  await p.call('DELETE', '/api/notebook/current', { key: me.key });
  const stopped = await waitStatus(p, me.key, 'stopped');
  assert.deepEqual(stopped.tunnels, []);
  await p.bus.publish({
    type: 'tunnels.live',
    brokerId: 'b1',
    ttlMs: 60_000,
    tunnels: [{ instanceId: ready.instance_id, tunnelId: id, port: 8080, publicUrl: url }],
  });
  assert.deepEqual((await p.call('GET', '/api/notebook/status', { key: me.key })).body.tunnels, []);
});

test('the image step’s progress: docker build steps and pulled layers, while pending only', () => {
  assert.deepEqual(launchProgress('pending', 'building image: step 3/7'), { stage: 'image_build', done: 3, total: 7 });
  assert.deepEqual(launchProgress('pending', 'pulling image: 2/5 layers, 1.2 of 4.8 GB'), { stage: 'image_pull', done: 2, total: 5 });
  assert.equal(launchProgress('pending', 'building image'), null);
  assert.equal(launchProgress('pending', 'starting'), null);
  assert.equal(launchProgress('ready', 'building image: step 3/7'), null);
});
