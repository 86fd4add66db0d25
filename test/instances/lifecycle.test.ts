// End to end with a real agent (process runtime) and the sim as the instance: launch, pending,
// ready, the status object, the template snapshot, destroy, scheduling when capacity frees,
// and persistent storage across relaunch.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { canTransition, type InstanceState } from '../../control-plane/instances/states.js';
import { waitFor } from '../helpers.js';
import { instanceGroups, simCommand, startPlatform, startTestAgent, waitStatus, type Platform } from './harness.js';

/** Records every state the instance passes through (read at each instance.changed event). */
function recordStates(p: Platform): Map<string, InstanceState[]> {
  const seen = new Map<string, InstanceState[]>();
  p.bus.subscribe(async (e) => {
    if (e.type !== 'instance.changed') return;
    const row = await p.instances.service.instances.get(e.instanceId);
    if (!row) return;
    const list = seen.get(e.instanceId) ?? [];
    if (list.at(-1) !== row.state) list.push(row.state);
    seen.set(e.instanceId, list);
  });
  return seen;
}

function assertLegal(states: InstanceState[]): void {
  for (let i = 1; i < states.length; i++)
    assert.ok(canTransition(states[i - 1]!, states[i]!), `illegal ${states[i - 1]} -> ${states[i]} in ${states.join(',')}`);
}

test('launch -> pending -> ready -> destroy, end to end with the sim', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const states = recordStates(p);
  const me = await p.account('e2e@example.com', { credits: 10 });
  await p.store.accounts.setSshPublicKey(me.id, 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey me@laptop');
  // SSH is offered only on an image that serves it (the catalog's `ssh`, issue 42).
  assert.equal(await p.store.images.setSsh('vllm/vllm-openai:latest', true), true);
  const tpl = await p.template(me.id, { ssh_enabled: true, title: 'Dedicated sim' });

  const launched = await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: { gpu_count: 2 } });
  assert.equal(launched.status, 200);
  assert.equal(launched.body.status, 'pending');
  const id = launched.body.instance_id as string;

  // The template changes and goes away: the instance keeps its snapshot.
  await p.store.templates.replace(me.id, tpl.id, { ...tpl, title: 'Edited', tags: [], start_command: 'exit 1' } as never, false);
  await p.store.templates.delete(me.id, tpl.id);

  const ready = await waitStatus(p, me.key, 'ready');
  assert.equal(ready.instance_id, id);
  assert.equal(ready.template_title, 'Dedicated sim');
  assert.equal(ready.gpu_count, 2);
  assert.equal(ready.credits_per_hour, 2);
  assert.equal(ready.host, 'host-a');
  assert.ok(ready.ready_at && ready.expires_at && ready.idle_expires_at);
  // The dedicated endpoint names instance and routed port; browser access starts at the platform
  // API's hand-over to the app's own origin on the proxy, whose first label is the id (a DNS label).
  assert.equal(ready.dedicated_base_url, `http://127.0.0.1:8090/dedicated/${id}/8000/v1`);
  assert.equal(ready.base_url, `http://127.0.0.1:8080/api/instances/${id}/open`);
  assert.match(id, /^inst-[0-9a-f]{24}$/);
  assert.equal(ready.ssh_missing, null);
  assert.equal(ready.ssh.host, '127.0.0.1');
  assert.ok(Number.isInteger(ready.ssh.port) && ready.ssh.port > 0);
  assert.equal(
    readFileSync(join(`${agent.dataDir}-instances`, 'homes', id, '.ssh', 'authorized_keys'), 'utf8').trim(),
    'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKey me@laptop',
  );

  // route(): what the gateway relays to, and the sim answers there.
  const route = p.instances.route(id)!;
  assert.equal(route.accountId, me.id);
  assert.equal(route.status, 'ready');
  assert.equal(route.instanceType, 'vllm');
  assert.equal(route.routedPort, 8000);
  const models = await request(`http://${route.host}:${route.port}/v1/models`);
  assert.equal(models.statusCode, 200);
  assert.equal(((await models.body.json()) as { data: { id: string }[] }).data[0]!.id, 'demo');
  assert.equal(instanceGroups(agent.handle.agentId, id).length, 1);

  const del = await p.call('DELETE', '/api/notebook/current', { key: me.key });
  assert.equal(del.status, 200);
  assert.ok(del.body.status === 'stopping' || del.body.status === 'stopped');
  assert.ok(del.body.ended_at);
  const stopped = await waitStatus(p, me.key, 'stopped');
  assert.equal(stopped.reason, null);
  assert.equal(p.instances.route(id), undefined);
  await waitFor(() => instanceGroups(agent.handle.agentId, id).length === 0);
  assert.equal(existsSync(join(agent.dataDir, 'instances', id)), false); // nothing kept without persistent storage
  assert.equal(existsSync(join(`${agent.dataDir}-instances`, 'homes', id)), false);
  assert.equal((await agent.handle.supervisor.list()).length, 0);
  assert.equal((await p.call('DELETE', '/api/notebook/current', { key: me.key })).status, 404);

  const seq = states.get(id)!;
  assert.deepEqual(seq, ['pending', 'ready', 'stopping', 'stopped']);
  assertLegal(seq);
});

test('an instance that fails to start: pending -> failed with reason and detail', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const states = recordStates(p);
  const me = await p.account('fail@example.com');
  const tpl = await p.template(me.id, { instance_type: 'gradio', app_port: 7860, start_command: 'echo boom; exit 3' });
  const r = await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} });
  const failed = await waitStatus(p, me.key, 'failed');
  assert.equal(failed.reason, 'exited');
  assert.match(failed.detail, /boom/);
  assert.ok(failed.ended_at);
  assertLegal(states.get(r.body.instance_id)!);
  // The slot is free again, and the agent forgot the failed instance.
  await waitFor(async () => (await agent.handle.supervisor.list()).length === 0);
  assert.equal((await p.call('POST', `/api/templates/${tpl.id}/launch`, { key: me.key, body: {} })).status, 200);
});

test('no free GPUs: pending until capacity frees, then placed (FIFO)', async (t) => {
  const agent = await startTestAgent(t, { gpus: 2 });
  const p = await startPlatform(t, { agents: [agent.config] });
  const a = await p.account('big@example.com');
  const b = await p.account('small@example.com');
  const c = await p.account('later@example.com');
  await p.call('POST', `/api/templates/${(await p.template(a.id)).id}/launch`, { key: a.key, body: { gpu_count: 2 } });
  await waitStatus(p, a.key, 'ready');
  const rb = await p.call('POST', `/api/templates/${(await p.template(b.id)).id}/launch`, { key: b.key, body: { gpu_count: 1 } });
  assert.equal(rb.body.status, 'pending');
  assert.equal(rb.body.message, 'waiting for capacity (position 1 in the queue)');
  const rc = await p.call('POST', `/api/templates/${(await p.template(c.id)).id}/launch`, { key: c.key, body: { gpu_count: 2 } });
  assert.equal(rc.body.message, 'waiting for capacity (position 2 in the queue)');
  await p.instances.service.tick();
  assert.equal((await p.call('GET', '/api/notebook/status', { key: b.key })).body.message, 'waiting for capacity (position 1 in the queue)');

  await p.call('DELETE', '/api/notebook/current', { key: a.key });
  // b (first in line, 1 GPU) is placed; c (2 GPUs) waits: only 1 GPU is left.
  const bReady = await waitStatus(p, b.key, 'ready');
  assert.equal(bReady.host, 'host-a');
  await p.instances.service.tick();
  assert.equal((await p.call('GET', '/api/notebook/status', { key: c.key })).body.message, 'waiting for capacity (position 1 in the queue)', 'c moved up');
  await p.call('DELETE', '/api/notebook/current', { key: b.key });
  await waitStatus(p, c.key, 'ready');
});

test('persistent storage survives destroy and relaunch; other files do not', async (t) => {
  const agent = await startTestAgent(t);
  const p = await startPlatform(t, { agents: [agent.config] });
  const me = await p.account('pvc@example.com');
  // Appends its id to a log in the volume (fixed path ./persistent) and to one in its home.
  const cmd = `echo $RC_INSTANCE_ID >> persistent/log; echo $RC_INSTANCE_ID >> home.log; ${simCommand()}`;
  const persistent = await p.template(me.id, { persistent_storage: true, start_command: cmd });
  const plain = await p.template(me.id, { start_command: `echo $RC_INSTANCE_ID >> home.log; test -z "$RC_PERSISTENT_DIR" && ${simCommand()}` });
  const volume = join(`${agent.dataDir}-instances`, 'volumes', `rc-account-${me.id}`, 'log');

  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    ids.push((await p.call('POST', `/api/templates/${persistent.id}/launch`, { key: me.key, body: {} })).body.instance_id);
    const ready = await waitStatus(p, me.key, 'ready');
    assert.equal(ready.persistent_storage, true);
    assert.deepEqual(
      readFileSync(join(`${agent.dataDir}-instances`, 'homes', ids[i]!, 'home.log'), 'utf8')
        .trim()
        .split('\n'),
      [ids[i]],
    );
    await p.call('DELETE', '/api/notebook/current', { key: me.key });
    await waitStatus(p, me.key, 'stopped');
    assert.equal(existsSync(join(`${agent.dataDir}-instances`, 'homes', ids[i]!)), false);
  }
  assert.deepEqual(readFileSync(volume, 'utf8').trim().split('\n'), ids);

  // Without persistent storage: no volume in the environment, nothing of it survives.
  const other = (await p.call('POST', `/api/templates/${plain.id}/launch`, { key: me.key, body: {} })).body.instance_id;
  await waitStatus(p, me.key, 'ready');
  await p.call('DELETE', '/api/notebook/current', { key: me.key });
  await waitStatus(p, me.key, 'stopped');
  assert.equal(existsSync(join(`${agent.dataDir}-instances`, 'homes', other)), false);
  assert.deepEqual(readFileSync(volume, 'utf8').trim().split('\n'), ids); // untouched
});
