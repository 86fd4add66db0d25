// Browser sessions on the shared model routes (SPEC: an account under review has no key, yet the
// free shared model APIs stay usable from its session): a real control plane issues sessions, a
// real gateway learns them from the store snapshot and the bus, and a sim answers.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createControlPlane } from '../../control-plane/server.js';
import { runAdminOp } from '../../control-plane/admin.js';
import { storeKeySource, storeLimitOverrides, storeLimitsLookup } from '../../control-plane/sources.js';
import { AccountLimits, createGate } from '../../gateway/gates/index.js';
import { createGateway } from '../../gateway/server.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import { SessionDirectory, sessionToken } from '../../gateway/auth/sessions.js';
import { MemoryBus } from '../../lib/bus.js';
import { FakeClock } from '../../lib/clock.js';
import { modelEntrySchema } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { startSim } from '../../sim/server.js';
import { waitFor } from '../helpers.js';

const silent = createLogger('silent');

async function signUp(api: string, email: string): Promise<{ cookie: string; csrf: string }> {
  const r = await fetch(`${api}/api/auth/signup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email, password: 'password123' }),
  });
  assert.equal(r.status, 201);
  const body = (await r.json()) as { csrf_token: string; account: { verified: boolean; api_token: string | null } };
  assert.equal(body.account.verified, false);
  assert.equal(body.account.api_token, null, 'an account under review has no key');
  return { cookie: String(r.headers.get('set-cookie')).split(';')[0]!, csrf: body.csrf_token };
}

test('an unverified account uses the shared model routes from its browser session; logout ends it', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-sessions-'));
  const bus = new MemoryBus();
  const sim = await startSim({ model: 'm', fast: true });
  const cp = await createControlPlane({ dataDir: dir, bus, logger: silent, port: 0 });
  const early = await signUp(cp.url, 'early@example.com'); // before the gateway starts: from the snapshot
  const gateway = await createGateway({
    port: 0,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url] })],
    keySource: storeKeySource(cp.store),
    bus,
    logger: silent,
    routes: [messagesRoutes()],
  });
  t.after(async () => {
    await gateway.close();
    await cp.close();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const chat = (headers: Record<string, string>) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 }),
    });

  const fromSnapshot = await chat({ cookie: early.cookie, 'x-csrf-token': early.csrf });
  assert.equal(fromSnapshot.status, 200, await fromSnapshot.clone().text());

  const s = await signUp(cp.url, 'later@example.com'); // after: from the bus
  const ok = await chat({ cookie: `theme=dark; ${s.cookie}`, 'x-csrf-token': s.csrf });
  assert.equal(ok.status, 200);
  assert.equal(((await ok.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens, 3);

  const messages = await fetch(`${gateway.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', cookie: s.cookie, 'x-csrf-token': s.csrf },
    body: JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(messages.status, 200);

  // The cookie alone (no CSRF token), a wrong token, an unknown session: 401 invalid_session.
  for (const headers of [
    { cookie: s.cookie },
    { cookie: s.cookie, 'x-csrf-token': early.csrf },
    { cookie: 'rc_session=nope', 'x-csrf-token': s.csrf },
  ] as Record<string, string>[]) {
    const r = await chat(headers);
    assert.equal(r.status, 401);
    assert.deepEqual(await r.json(), {
      error: { message: 'Invalid or expired session, or missing x-csrf-token', type: 'authentication_error', param: null, code: 'invalid_session' },
    });
  }
  // Two rc_session cookies (one tossed in by a page on another port of the host, issue 27): no
  // session, whichever CSRF token comes and whichever cookie is first; one valid cookie works.
  const other = await signUp(cp.url, 'tosser@example.com');
  for (const [cookie, csrf] of [
    [`${other.cookie}; ${s.cookie}`, s.csrf],
    [`${other.cookie}; ${s.cookie}`, other.csrf],
    [`${s.cookie}; ${other.cookie}`, s.csrf],
    [`${s.cookie}; ${other.cookie}`, other.csrf],
    ['rc_session=junk; ' + s.cookie, s.csrf],
  ]) {
    const r = await chat({ cookie: cookie!, 'x-csrf-token': csrf! });
    assert.equal(r.status, 401, cookie);
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'invalid_session');
  }
  assert.equal((await chat({ cookie: other.cookie, 'x-csrf-token': other.csrf })).status, 200);
  const badOnMessages = await fetch(`${gateway.url}/v1/messages`, { method: 'POST', headers: { cookie: s.cookie }, body: '{}' });
  assert.equal(badOnMessages.status, 401);
  assert.equal(((await badOnMessages.json()) as { error: { type: string } }).error.type, 'authentication_error');
  // A cookie without rc_session is no credential at all; a key still wins over a session.
  assert.equal(((await (await chat({ cookie: 'theme=dark' })).json()) as { error: { code: string } }).error.code, 'missing_api_key');
  assert.equal(
    ((await (await chat({ cookie: s.cookie, 'x-csrf-token': s.csrf, authorization: 'Bearer rc-bad' })).json()) as { error: { code: string } }).error.code,
    'invalid_api_key',
  );

  const out = await fetch(`${cp.url}/api/auth/logout`, { method: 'POST', headers: { cookie: s.cookie, 'x-csrf-token': s.csrf } });
  assert.equal(out.status, 200);
  assert.equal((await chat({ cookie: s.cookie, 'x-csrf-token': s.csrf })).status, 401);
  assert.equal((await chat({ cookie: early.cookie, 'x-csrf-token': early.csrf })).status, 200, 'other sessions are untouched');
});

test('SessionDirectory: expiry, and the rc_session cookie among others', async () => {
  const clock = new FakeClock(1_000_000);
  const dir = new SessionDirectory(clock);
  const bus = new MemoryBus();
  await dir.start(undefined, bus);
  const { createHash } = await import('node:crypto');
  const h = (s: string) => createHash('sha256').update(s).digest('hex');
  await bus.publish({ type: 'session.started', tokenHash: h('tok'), csrfHash: h('csrf'), accountId: 7, expiresAt: 1_000_500 });
  assert.equal(dir.authenticate('a=1; rc_session=tok; b=2', 'csrf'), 7);
  assert.notEqual(dir.authenticate('rc_session=tok', ''), 7, 'no CSRF token');
  assert.notEqual(dir.authenticate('rc_session=tok', 'x'), 7, 'wrong CSRF token');
  clock.advance(500);
  assert.notEqual(dir.authenticate('rc_session=tok', 'csrf'), 7, 'expired');
  assert.equal(dir.size, 0);
  assert.equal(sessionToken('x=1;rc_session= abc ;y'), 'abc');
  assert.equal(sessionToken('rc_sessionx=1'), undefined);
  assert.equal(sessionToken('rc_session='), undefined);
});

test('SessionDirectory drops the session ends it kept for the snapshot once the snapshot is loaded', async () => {
  const dir = new SessionDirectory();
  const bus = new MemoryBus();
  const { createHash } = await import('node:crypto');
  const h = (s: string) => createHash('sha256').update(s).digest('hex');
  let release!: () => void;
  const loaded = new Promise<void>((r) => (release = r));
  const old = { tokenHash: h('old'), csrfHash: h('c'), accountId: 1, expiresAt: Date.now() + 60_000 };
  const ended = { ...old, tokenHash: h('ended-meanwhile') };
  const starting = dir.start(async () => {
    await loaded;
    return [old, ended];
  }, bus);
  await bus.publish({ type: 'session.ended', tokenHash: ended.tokenHash });
  assert.equal(dir.endsHeldForLoad, 1, 'an end heard while the snapshot loads is remembered');
  release();
  await starting;
  assert.equal(dir.size, 1, 'the snapshot does not revive the session ended meanwhile');
  assert.equal(dir.endsHeldForLoad, 0);
  // Sign-ins and sign-outs for the rest of the process's life: nothing kept per ended session.
  for (let i = 0; i < 1000; i++) {
    await bus.publish({ type: 'session.started', tokenHash: h(`s${i}`), csrfHash: h('c'), accountId: 2, expiresAt: Date.now() + 60_000 });
    await bus.publish({ type: 'session.ended', tokenHash: h(`s${i}`) });
  }
  assert.equal(dir.endsHeldForLoad, 0);
  assert.equal(dir.size, 1);
});

test('attack: accounts minted by open sign-up each get only the unverified cap; 0 turns shared access off', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'rc-sessions-cap-'));
  const bus = new MemoryBus();
  const sim = await startSim({ model: 'm', fast: true });
  const settings = { modelDailyTokens: 1000, modelUnverifiedDailyTokens: 40 };
  const cp = await createControlPlane({ dataDir: dir, bus, logger: silent, port: 0, settings });
  const early = await signUp(cp.url, 'sock1@example.com'); // before the gateway: from the snapshot
  const limits = new AccountLimits({ rpm: 1000, tpm: 1_000_000, dailyTokens: settings.modelDailyTokens });
  limits.load(await storeLimitOverrides(cp.store, settings));
  const gate = createGate(
    { modelRpm: 1000, modelTpm: 1_000_000, modelDailyTokens: 1000, redisUrl: '', gateRedisTimeoutMs: 50, gateKeyPrefix: 'x:' },
    { bus, limits, lookup: storeLimitsLookup(cp.store, settings) },
  );
  const gateway = await createGateway({
    port: 0,
    models: [modelEntrySchema.parse({ name: 'm', upstreams: [sim.url] })],
    keySource: storeKeySource(cp.store, settings),
    bus,
    logger: silent,
    gate,
    routes: [messagesRoutes()],
  });
  t.after(async () => {
    await gateway.close();
    await gate.close();
    await cp.close();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const chat = (s: { cookie: string; csrf: string }, maxTokens: number) =>
    fetch(`${gateway.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: s.cookie, 'x-csrf-token': s.csrf },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: maxTokens }),
    });
  const later = await signUp(cp.url, 'sock2@example.com'); // after: from the bus
  for (const [email, s] of [
    ['sock1@example.com', early],
    ['sock2@example.com', later],
  ] as const) {
    assert.equal((await gate.readUsage((await cp.store.accounts.byEmail(email))!.id)).daily_cap, 40);
    assert.equal((await chat(s, 30)).status, 200); // spends about 45 tokens: over the unverified cap (40), far under the default (1000)
    const over = await chat(s, 5);
    assert.equal(over.status, 429, await over.clone().text());
    assert.equal(((await over.json()) as { error: { code: string } }).error.code, 'daily_token_cap_exceeded');
  }
  // Verified by the operator: the account's cap is the default again.
  const id = (await cp.store.accounts.byEmail('sock2@example.com'))!.id;
  await runAdminOp({ store: cp.store, publish: (e) => bus.publish(e), configuredModels: [] }, 'account.verify', { email: 'sock2@example.com' });
  assert.equal(await waitFor(async () => ((await gate.readUsage(id)).daily_cap === 1000 ? true : undefined)), true);

  // With the setting at 0, an account under review has no shared model access at all.
  await cp.close();
  const closed = { ...settings, modelUnverifiedDailyTokens: 0 };
  const cp0 = await createControlPlane({ dataDir: dir, bus, logger: silent, port: 0, settings: closed });
  t.after(() => cp0.close());
  const none = await signUp(cp0.url, 'sock3@example.com');
  const refused = await chat(none, 5);
  assert.equal(refused.status, 403);
  assert.equal(((await refused.json()) as { error: { code: string } }).error.code, 'account_not_verified');
  const onMessages = await fetch(`${gateway.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', cookie: none.cookie, 'x-csrf-token': none.csrf },
    body: JSON.stringify({ model: 'm', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }),
  });
  assert.equal(onMessages.status, 403);
  assert.equal(((await onMessages.json()) as { error: { type: string } }).error.type, 'permission_error');
  // The snapshot a restarted gateway loads says the same.
  const records = [...(await storeKeySource(cp0.store, closed).loadSessions!())];
  assert.ok(records.length > 0 && records.filter((r) => r.accountId !== id).every((r) => r.modelAccess === false));
});
