// A session works at the gateway the moment sign-in answers (issue 44: 401 invalid_session, 1 in
// 87, because the answer went out before the gateway had heard session.started). The bus's
// publish resolves once this process's subscribers heard the event, Redis included (its own
// echo), and the sign-in answer awaits it. Checked on the embedded platform with Redis events,
// where the gateway in the same process learns sessions only through Redis.
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { request } from 'undici';
import { startPlatform } from '../../bin/platform.js';
import { busChannel, RedisBus, type BusEvent } from '../../lib/bus.js';
import { loadConfig } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { killAgentProcesses } from '../agent/harness.js';
import { dropKeysAfter, platformTestEnv, REDIS_URL, redisAvailable } from '../helpers.js';

test("a RedisBus publish resolves once this process's subscribers heard the event", async (t) => {
  if (!(await redisAvailable(t))) return;
  const bus = new RedisBus(REDIS_URL, busChannel(`rc-test-echo-${process.pid}:`));
  t.after(() => bus.close());
  await bus.whenReady();
  const heard: BusEvent[] = [];
  bus.subscribe((ev) => heard.push(ev));
  for (let i = 0; i < 50; i++) {
    const ev: BusEvent = { type: 'session.ended', tokenHash: `h${i % 5}` }; // repeated messages too
    await bus.publish(ev);
    assert.equal(heard.length, i + 1, `event ${i} heard when its publish resolved`);
    assert.deepEqual(heard[i], ev);
  }
});

test('the embedded platform with Redis events: every session answered by sign-in works at the gateway at once', async (t) => {
  if (!(await redisAvailable(t))) return;
  const dataDir = mkdtempSync(join(tmpdir(), 'rc-session-ready-'));
  const prefix = `rc-test-session-${process.pid}:`;
  dropKeysAfter(t, prefix);
  const env = platformTestEnv(dataDir, {
    REDIS_URL,
    RC_GATE_KEY_PREFIX: prefix,
    RC_AGENT_GPU_DETECT: 'configured',
    RC_LOG_LEVEL: 'silent',
    RC_SIGNUP_PER_ADDRESS_PER_HOUR: '1000',
    RC_LOGIN_PER_ADDRESS_PER_MINUTE: '1000',
  });
  const platform = await startPlatform(loadConfig(env), createLogger('silent'));
  t.after(async () => {
    await platform.close();
    killAgentProcesses(platform.agent.agentId);
    rmSync(dataDir, { recursive: true, force: true });
    rmSync(`${dataDir}-instances`, { recursive: true, force: true });
  });
  const api = platform.controlPlane.url;
  const post = async (path: string, body: unknown) => {
    const r = await request(api + path, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const json = (await r.body.json()) as { csrf_token: string };
    const set = r.headers['set-cookie'];
    return { status: r.statusCode, json, cookie: (Array.isArray(set) ? set[0]! : set!).split(';')[0]! };
  };
  const useAtOnce = async (cookie: string, csrf: string) => {
    const r = await request(`${platform.gateway.url}/v1/models`, { headers: { cookie, 'x-csrf-token': csrf } });
    const text = await r.body.text();
    return { status: r.statusCode, text };
  };

  const refused: string[] = [];
  const signedUp = await post('/api/auth/signup', { email: 'fast@example.com', password: 'correct horse battery' });
  assert.equal(signedUp.status, 201);
  const first = await useAtOnce(signedUp.cookie, signedUp.json.csrf_token);
  if (first.status !== 200) refused.push(`after sign-up: ${first.status} ${first.text}`);
  for (let i = 0; i < 40; i++) {
    const s = await post('/api/auth/login', { email: 'fast@example.com', password: 'correct horse battery' });
    assert.equal(s.status, 200);
    const r = await useAtOnce(s.cookie, s.json.csrf_token);
    if (r.status !== 200) refused.push(`sign-in ${i}: ${r.status} ${r.text}`);
  }
  assert.deepEqual(refused, [], 'sessions refused right after sign-in answered');
});
