// Two control planes on one PostgreSQL and one Redis, as real processes (issue 43: "SSE streams
// (instance status, logs, operator events) ... work whichever replica a request reaches"): the
// tenant signs in on A and uses that session on B; B's event streams follow a launch and a destroy
// made through A (instance changes reach B over Redis), B's log stream follows the instance's
// output (B dials the host itself, added through A), and B's operator stream lists the instance A
// placed; hosts drained and removed through A are drained and gone on B.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { dropKeysAfter, redisAvailable, REDIS_URL, waitFor } from '../helpers.js';
import { simCommand } from '../instances/harness.js';
import { openSse } from '../instances/sse.js';
import { freshDatabase, postgresAvailable } from '../postgres.js';
import { admin, call, controlPlaneEnv, spawnOneGpuAgent, spawnRc, tempDir } from './harness.js';

const PASSWORD = 'replica streams password';

/** An SSE stream opened with a session cookie (the operator's pages have no key). */
async function operatorStream(url: string, cookie: string, ac: AbortController): Promise<{ until(re: RegExp): Promise<string> }> {
  const res = await request(url, { headers: { cookie }, signal: ac.signal });
  assert.equal(res.statusCode, 200);
  const it = res.body[Symbol.asyncIterator]();
  let text = '';
  return {
    async until(re) {
      while (!re.test(text)) {
        const { value, done } = await it.next();
        if (done) throw new Error(`stream ended before ${re}: ${text}`);
        text += Buffer.from(value as Buffer).toString();
      }
      return text;
    },
  };
}

test('two control planes on one PostgreSQL and Redis: a session from A works on B; B streams the status, logs and operator view of what A launched and destroyed', {
  timeout: 120_000,
}, async (t) => {
  if (!(await postgresAvailable(t)) || !(await redisAvailable(t))) return;
  const url = await freshDatabase(t);
  const prefix = `rc-test-replicas-${randomBytes(4).toString('hex')}:`;
  dropKeysAfter(t, prefix);
  const dirs = [tempDir(t, 'rc-replica-a-'), tempDir(t, 'rc-replica-b-')];
  const env = (dir: string) => controlPlaneEnv(url, dir, { REDIS_URL, RC_GATE_KEY_PREFIX: prefix, RC_INSTANCE_TICK_MS: '200' });
  const a = await spawnRc(t, ['control-plane'], env(dirs[0]!));
  copyFileSync(join(dirs[0]!, 'seal.key'), join(dirs[1]!, 'seal.key'));
  const b = await spawnRc(t, ['control-plane'], env(dirs[1]!));
  const { agent, token } = await spawnOneGpuAgent(t, 'rc-replica-agent-');
  assert.equal((await admin(a.ready.api, dirs[0]!, 'host.add', { name: 'gpu-1', address: agent.ready.address, token })).status, 200);
  const email = 'replicas@example.com';
  const acct = (await admin(a.ready.api, dirs[0]!, 'account.create', { email, verified: true, credits: 100, password: PASSWORD })).body;
  assert.equal((await admin(a.ready.api, dirs[0]!, 'account.set-operator', { email, operator: true })).status, 200);
  const key = acct.api_token as string;
  // Added through A: B dials it too (it heard of it on the bus).
  await waitFor(
    async () =>
      ((await admin(b.ready.api, dirs[1]!, 'host.list')).body.hosts as { name: string; state: string }[]).some(
        (h) => h.name === 'gpu-1' && h.state === 'connected',
      ),
    10_000,
    50,
  );

  // Signed in on A; the session cookie works on B.
  const login = await request(`${a.ready.api}/api/auth/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password: PASSWORD }),
  });
  assert.equal(login.statusCode, 200, await login.body.text());
  await login.body.dump();
  const setCookie = login.headers['set-cookie'];
  const cookie = (Array.isArray(setCookie) ? setCookie[0]! : setCookie!).split(';')[0]!;
  const session = await call(`${b.ready.api}/api/auth/session`, { headers: { cookie } });
  assert.equal(session.status, 200, JSON.stringify(session.body));
  assert.deepEqual([session.body.account.email, session.body.via, session.body.operator], [email, 'session', true]);

  // B's streams, opened before the launch through A.
  const status = await openSse(`${b.ready.api}/api/notebook/events`, key);
  t.after(() => status.close());
  assert.equal(status.status, 200);
  await status.next((e) => e.event === 'status' && e.data === 'null');
  const ac = new AbortController();
  t.after(() => ac.abort());
  const operator = await operatorStream(`${b.ready.api}/api/operator/events`, cookie, ac);
  await operator.until(/event: instances\n/);

  const template = (
    await call(`${a.ready.api}/api/profile/templates`, {
      key,
      body: { title: 'sim', image: 'vllm/vllm-openai:latest', instance_type: 'vllm', app_port: 8000, start_command: simCommand() },
    })
  ).body;
  const launched = await call(`${a.ready.api}/api/templates/${template.id}/launch`, { key, body: {} });
  assert.equal(launched.status, 200, JSON.stringify(launched.body));
  const id = launched.body.instance_id as string;
  const statusOf = (e: { data: string }) => JSON.parse(e.data) as { instance_id: string; status: string } | null;
  await status.next((e) => e.event === 'status' && statusOf(e)?.instance_id === id && statusOf(e)?.status === 'pending');
  await status.next((e) => e.event === 'status' && statusOf(e)?.status === 'ready', 30_000);
  await operator.until(new RegExp(`event: instances\\ndata: [^\\n]*${id}`));

  // B's log stream: the instance's output, read from the host by B.
  const logs = await openSse(`${b.ready.api}/api/notebook/logs?follow=1`, key);
  t.after(() => logs.close());
  assert.equal(logs.status, 200);
  await logs.next((e) => e.event === 'log');

  // Destroyed through A: B's streams end the story.
  assert.equal((await call(`${a.ready.api}/api/notebook/current`, { method: 'DELETE', key })).status, 200);
  await status.next((e) => e.event === 'status' && ['stopping', 'stopped'].includes(statusOf(e)?.status ?? ''), 30_000);
  const end = await logs.next((e) => e.event === 'end', 30_000);
  assert.match(JSON.parse(end.data).status, /stopping|stopped/);

  // The hosts registry changed through A (drained, then removed): B follows at once (the bus),
  // not at its next restart.
  const hostOnB = async () =>
    ((await admin(b.ready.api, dirs[1]!, 'host.list')).body.hosts as { name: string; state: string }[]).find((h) => h.name === 'gpu-1');
  assert.equal((await admin(a.ready.api, dirs[0]!, 'host.drain', { name: 'gpu-1' })).status, 200);
  await waitFor(async () => (await hostOnB())?.state === 'draining', 5_000, 50);
  await waitFor(async () => (await call(`${a.ready.api}/api/notebook/status`, { key })).body.status === 'stopped', 30_000, 100);
  assert.equal((await admin(a.ready.api, dirs[0]!, 'host.remove', { name: 'gpu-1' })).status, 200);
  await waitFor(async () => (await hostOnB()) === undefined, 5_000, 50);
});
