// Failures with their reasons, bad input, and the token check.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { status } from '@grpc/grpc-js';
import { createAgentClient, type AgentCallError } from '../../agent/client.js';
import { isAlive } from '../../agent/procfs.js';
import { instanceGroups, startTestAgent, waitForState } from './harness.js';

const isCode = (grpcCode: number, code: string) => (err: AgentCallError) => {
  assert.equal(err.grpcCode, grpcCode, err.message);
  assert.equal(err.code, code);
  return true;
};

test('a command that does not exist fails with command_not_found', async (t) => {
  const { client } = await startTestAgent(t);
  await client.start({ instanceId: 'bad', startCommand: 'no-such-command-rc-test --flag', ports: [8000] });
  const failed = await waitForState(client, 'bad', 'failed');
  assert.equal(failed.reason, 'command_not_found');
  assert.match(failed.detail, /exit status 127/);
  assert.match(failed.detail, /no-such-command-rc-test/, 'the detail carries the last output');
  assert.equal((await client.getHost()).freeGpus, 4);
});

test('a command that exits at once fails with exited, its exit status and its output', async (t) => {
  const { client } = await startTestAgent(t);
  await client.start({ instanceId: 'quits', startCommand: 'echo loading weights; echo boom >&2; exit 3', ports: [8000], gpuCount: 2 });
  const failed = await waitForState(client, 'quits', 'failed');
  assert.equal(failed.reason, 'exited');
  assert.match(failed.detail, /exit status 3/);
  assert.match(failed.detail, /loading weights\nboom/);
  assert.equal((await client.getHost()).freeGpus, 4, 'the GPUs of a failed instance are free again');
  // Stopping a failed instance leaves it failed.
  assert.equal((await client.stop('quits')).state, 'failed');
});

test('a command that never listens fails with ready_timeout and is killed, whole group included', async (t) => {
  const { agent, client } = await startTestAgent(t, { readyTimeoutMs: 1000, stopGraceMs: 500 });
  // The shell ignores SIGTERM and keeps a child: only SIGKILL of the group ends both.
  await client.start({ instanceId: 'mute', startCommand: "trap '' TERM; sleep 60 & sleep 60; wait", ports: [8000] });
  const failed = await waitForState(client, 'mute', 'failed');
  assert.equal(failed.reason, 'ready_timeout');
  assert.match(failed.detail, /did not accept connections within 1 s/);
  assert.deepEqual(instanceGroups(agent.agentId, 'mute'), [], 'no process of the instance is left');
  assert.equal(isAlive(Number(failed.runtimeId)), false);
});

test('more GPUs than free fails with gpus_unavailable; no GPU is taken', async (t) => {
  const { client } = await startTestAgent(t);
  const { instance } = await client.start({ instanceId: 'big', startCommand: 'exec sleep 30', gpuCount: 8 });
  assert.equal(instance.state, 'failed');
  assert.equal(instance.reason, 'gpus_unavailable');
  assert.match(instance.detail, /Requested 8 GPUs; 4 of 4 are free/);
  assert.equal((await client.getHost()).freeGpus, 4);
});

test('bad specs are refused with INVALID_ARGUMENT naming the field', async (t) => {
  const { client } = await startTestAgent(t);
  const bad: [Parameters<typeof client.start>[0], RegExp][] = [
    [{ instanceId: '' }, /spec.instanceId/],
    [{ instanceId: '../escape', startCommand: 'true' }, /spec.instanceId/],
    [{ instanceId: 'x', startCommand: 'true', files: { '../outside': 'x' } }, /spec.files/],
    [{ instanceId: 'x', startCommand: 'true', files: { '/etc/passwd': 'x' } }, /spec.files/],
    [{ instanceId: 'x', startCommand: 'true', env: { 'BAD-NAME': '1' } }, /spec.env/],
    [{ instanceId: 'x', startCommand: 'true', ports: [70000] }, /spec.ports/],
    [{ instanceId: 'x', startCommand: 'true', ports: [8000, 8000] }, /spec.ports/],
    [{ instanceId: 'x', startCommand: 'true', sshPublicKey: 'ssh-ed25519 AAAA\nsecond line' }, /spec.sshPublicKey/],
    [{ instanceId: 'x', startCommand: 'true', volume: 'bad/name' }, /spec.volume/],
  ];
  for (const [spec, message] of bad) {
    await assert.rejects(client.start(spec), (err: AgentCallError) => {
      isCode(status.INVALID_ARGUMENT, 'RC_ERR_AGENT_INVALID_ARGUMENT')(err);
      assert.match(err.message, message);
      return true;
    });
  }
  assert.deepEqual(await client.list(), [], 'nothing was recorded');
  // A process instance without a start command fails to start (it is not a bad request for docker).
  await client.start({ instanceId: 'nocmd', ports: [8000] });
  const failed = await waitForState(client, 'nocmd', 'failed');
  assert.equal(failed.reason, 'start_failed');
  await assert.rejects(client.stop('nope'), isCode(status.NOT_FOUND, 'RC_ERR_AGENT_NOT_FOUND'));
  await assert.rejects(
    async () => {
      for await (const _ of client.logs('nope')) void _;
    },
    isCode(status.NOT_FOUND, 'RC_ERR_AGENT_NOT_FOUND'),
  );
});

test('a wrong or missing token is refused on every call, streams included', async (t) => {
  const { agent, client } = await startTestAgent(t);
  await client.start({ instanceId: 'mine', startCommand: 'exec sleep 30' });
  for (const token of ['wrong-token-wrong-token', '']) {
    const intruder = createAgentClient({ address: agent.address, token });
    t.after(() => intruder.close());
    const refused = isCode(status.UNAUTHENTICATED, 'RC_ERR_AGENT_UNAUTHENTICATED');
    await assert.rejects(intruder.list(), refused);
    await assert.rejects(intruder.getHost(), refused);
    await assert.rejects(intruder.start({ instanceId: 'evil', startCommand: 'true' }), refused);
    await assert.rejects(intruder.stop('mine'), refused);
    await assert.rejects(intruder.remove('mine'), refused);
    await assert.rejects(intruder.reconcile([]), refused);
    await assert.rejects(async () => {
      for await (const _ of intruder.watch()) void _;
    }, refused);
    await assert.rejects(async () => {
      for await (const _ of intruder.logs('mine', { follow: true })) void _;
    }, refused);
  }
  const list = await client.list();
  assert.deepEqual(
    list.map((i) => [i.instanceId, i.state]),
    [['mine', 'ready']],
    'nothing changed',
  );
});
