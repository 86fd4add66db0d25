// Start, readiness, idempotency, stop and remove, and the order of events, with the simulated
// backend as the instance, through a real grpc-js client against a real agent on loopback.
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import type { AgentCallError } from '../../agent/client.js';
import { isAlive } from '../../agent/procfs.js';
import { waitFor } from '../helpers.js';
import { collectEvents, httpCommand, instanceGroups, simCommand, startTestAgent, waitForState } from './harness.js';

test('the sim as an instance: pending, then ready; it answers on its host port; repeated start, stop and remove are no-ops', async (t) => {
  const { agent, client } = await startTestAgent(t);
  const watch = collectEvents(client);
  t.after(watch.stop);
  await waitFor(() => watch.items.some((i) => i.kind === 'host'));

  const spec = { instanceId: 'inst-sim', instanceType: 'custom', startCommand: simCommand('m'), ports: [8000], gpuCount: 1, env: { EXTRA: 'x' } };
  const first = await client.start(spec);
  assert.equal(first.created, true);
  assert.equal(first.instance.state, 'pending');
  assert.equal(first.instance.gpus.length, 1);

  const ready = await waitForState(client, 'inst-sim', 'ready');
  const [endpoint] = ready.endpoints;
  assert.ok(endpoint, 'the routed port is mapped');
  assert.equal(endpoint.port, 8000);
  assert.equal(endpoint.host, '127.0.0.1');
  assert.ok(endpoint.hostPort > 0 && endpoint.hostPort !== 8000);
  const pid = Number(ready.runtimeId);
  assert.ok(isAlive(pid));

  // The instance really is the sim, on the host port the agent reported.
  const models = (await (await fetch(`http://${endpoint.host}:${endpoint.hostPort}/v1/models`)).json()) as { data: { id: string }[] };
  assert.equal(models.data[0]?.id, 'm');

  // Start again with the same id and spec: the same instance, not a second one.
  const again = await client.start(spec);
  assert.equal(again.created, false);
  assert.equal(again.instance.runtimeId, ready.runtimeId);
  assert.equal((await client.list()).length, 1);
  assert.deepEqual(instanceGroups(agent.agentId, 'inst-sim'), [pid]);

  // The same id with a different spec is refused.
  await assert.rejects(
    client.start({ ...spec, startCommand: 'sleep 1' }),
    (err: AgentCallError) => err.grpcCode === status.ALREADY_EXISTS && err.code === 'RC_ERR_AGENT_SPEC_MISMATCH',
  );

  const stopped = await client.stop('inst-sim');
  assert.equal(stopped.state, 'stopped');
  assert.equal(stopped.reason, '');
  assert.equal(isAlive(pid), false, 'the process group is gone');
  assert.deepEqual(instanceGroups(agent.agentId, 'inst-sim'), []);
  const stoppedAgain = await client.stop('inst-sim');
  assert.equal(stoppedAgain.state, 'stopped');
  assert.equal(stoppedAgain.seq, stopped.seq, 'a repeated stop changes nothing');
  assert.equal((await client.getHost()).freeGpus, 4, 'the GPU is free again');

  assert.equal(await client.remove('inst-sim'), true);
  assert.equal(await client.remove('inst-sim'), false);
  assert.deepEqual(await client.list(), []);

  await waitFor(() => watch.events().some((e) => e.state === 'removed'));
  const events = watch.events().filter((e) => e.instanceId === 'inst-sim');
  assert.deepEqual(
    events.map((e) => `${e.state}:${e.message}`),
    ['pending:starting', 'pending:waiting for port', 'ready:ready', 'stopping:stopping', 'stopped:stopped', 'removed:removed'],
  );
  for (let i = 1; i < events.length; i++) assert.equal(events[i]!.seq, events[i - 1]!.seq + 1, 'sequence numbers increase by one');
  assert.ok(events.every((e) => e.timeMs > 0));
  assert.ok(
    watch.items.some((i) => i.kind === 'heartbeat'),
    'heartbeats arrive',
  );
  const hosts = watch.items.flatMap((i) => (i.kind === 'host' ? [i.host] : []));
  assert.ok(
    hosts.some((h) => h.freeGpus === 3),
    'host inventory is sent when a GPU is assigned',
  );
});

test('vllm readiness waits for GET /health to answer 200, not only for the port', async (t) => {
  const { client } = await startTestAgent(t, { readyTimeoutMs: 1500, servingReadyTimeoutMs: 1500 });
  // The port opens at once but /health answers 503: a vllm instance never becomes ready.
  await client.start({ instanceId: 'v-503', instanceType: 'vllm', startCommand: httpCommand(503), ports: [8000] });
  const failed = await waitForState(client, 'v-503', 'failed');
  assert.equal(failed.reason, 'ready_timeout');
  assert.match(failed.detail, /GET \/health did not answer 200.*status 503/);
  // The same server as a custom instance is ready as soon as the port opens.
  await client.start({ instanceId: 'c-503', instanceType: 'custom', startCommand: httpCommand(503), ports: [8000] });
  await waitForState(client, 'c-503', 'ready');
  // And the sim as a vllm instance passes the health check.
  await client.start({ instanceId: 'v-sim', instanceType: 'vllm', startCommand: simCommand('served'), ports: [8000], readyTimeoutMs: 20_000 });
  await waitForState(client, 'v-sim', 'ready');
});

test('a watcher that reconnects with after_seq gets exactly the events it missed', async (t) => {
  const { client } = await startTestAgent(t);
  await client.start({ instanceId: 'a', startCommand: 'exec sleep 30' });
  const a = await waitForState(client, 'a', 'ready');
  await client.stop('a', 100);
  const watch = collectEvents(client, a.seq);
  t.after(watch.stop);
  await waitFor(() => watch.events().length >= 2);
  assert.deepEqual(
    watch.events().map((e) => e.state),
    ['stopping', 'stopped'],
  );
  // Without after_seq: one snapshot event per instance.
  const snap = collectEvents(client);
  t.after(snap.stop);
  await waitFor(() => snap.events().length >= 1);
  assert.deepEqual(
    snap.events().map((e) => [e.instanceId, e.state]),
    [['a', 'stopped']],
  );
});

test('files, the SSH key and a persistent volume are provisioned into the instance', async (t) => {
  const { client, dataDir } = await startTestAgent(t);
  // A named volume: a directory the instance's user owns, outside the data dir (like the home).
  const volume = join(`${dataDir}-instances`, 'volumes', 'acct-1');
  await client.start({
    instanceId: 'prov',
    sshPublicKey: 'ssh-ed25519 AAAAC3Nza test@example',
    volume: 'acct-1',
    files: { '.rc-tunnel/identity.json': '{"id":"t1"}' },
    startCommand:
      'echo "dir=$RC_INSTANCE_DIR vol=$RC_VOLUME_DIR key=$SSH_PUBLIC_KEY"; cat .rc-tunnel/identity.json; echo; cat .ssh/authorized_keys; echo kept > "$RC_VOLUME_DIR/f"; exec sleep 30',
  });
  await waitForState(client, 'prov', 'ready');
  const lines = await waitFor(async () => {
    const out: string[] = [];
    for await (const l of client.logs('prov', { tail: 10 })) out.push(l);
    return out.length >= 3 ? out : undefined;
  });
  const home = join(`${dataDir}-instances`, 'homes', 'prov');
  assert.deepEqual(lines, [`dir=${home} vol=${volume} key=ssh-ed25519 AAAAC3Nza test@example`, '{"id":"t1"}', 'ssh-ed25519 AAAAC3Nza test@example']);
  // File contents are never echoed back.
  const info = (await client.list())[0]!;
  assert.deepEqual(Object.keys(info.spec.files), ['.rc-tunnel/identity.json']);
  assert.equal(info.spec.files['.rc-tunnel/identity.json']!.byteLength, 0);
  // Remove deletes the instance directory but never the volume.
  assert.equal(await client.remove('prov'), true);
  assert.equal(existsSync(home), false);
  assert.equal(readFileSync(join(volume, 'f'), 'utf8'), 'kept\n');
});

// rc-tunnel --detach runs in a session of its own (it must outlive an SSH login), so it was out of
// the instance's process group and outlived the instance's stop in the process runtime (issue 44's
// soak: destroyed instances' tunnels piled up). Stop ends every process of the instance.
test('stop ends the processes an instance started in sessions of their own (rc-tunnel --detach), not only its group', async (t) => {
  const { agent, client } = await startTestAgent(t);
  const spec = { instanceId: 'inst-setsid', instanceType: 'custom', startCommand: `setsid sleep 600 & ${httpCommand()}`, ports: [8000], gpuCount: 0 };
  await client.start(spec);
  await waitForState(client, 'inst-setsid', 'ready');
  await waitFor(() => instanceGroups(agent.agentId, 'inst-setsid').length === 2);
  await client.stop('inst-setsid');
  await waitFor(() => instanceGroups(agent.agentId, 'inst-setsid').length === 0, 5_000);
});
