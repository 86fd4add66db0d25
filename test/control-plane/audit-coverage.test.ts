// Every admin and operator action, by any transport, is in the audit log (issue 44: POST
// /api/admin/instances/launch-verification switched the protection off and minted tokens with no
// entry). The routes come from the route table (the OpenAPI document generated from it, with the
// instance routes mounted as the platform mounts them); the `{op}` routes are expanded over the
// table of operator actions. Each write is called as the admin token (admin routes) or an
// operator's session (operator routes) and must leave an entry. Reads (GET, `*.list`) record nothing.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { request } from 'undici';
import { ADMIN_OPS, runAdminOp } from '../../control-plane/admin.js';
import { LiveFleet } from '../../control-plane/instances/fleet.js';
import { createInstances } from '../../control-plane/instances/index.js';
import { openInstanceRoutes, ProxyTickets } from '../../control-plane/proxy/handover.js';
import { adminToken } from '../../control-plane/secrets.js';
import { createControlPlane } from '../../control-plane/server.js';
import { Store } from '../../control-plane/store.js';
import { templateInputSchema } from '../../control-plane/templates.js';
import { MemoryBus } from '../../lib/bus.js';
import { systemClock } from '../../lib/clock.js';
import { DEFAULT_SIM_MODELS } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { tempDir } from '../agent/harness.js';
import { TEST_SETTINGS } from '../instances/harness.js';

const PASSWORD = 'operator password';

/** A write's input, per action (`n` keeps the two transports apart); an action without one fails the test. */
function sampleInput(action: string, n: number, instanceOf: string[]): Record<string, unknown> | undefined {
  const made = `made${n}@x.io`;
  const samples: Record<string, Record<string, unknown>> = {
    'account.create': { email: made, verified: true, credits: 5 },
    'account.verify': { email: made },
    'account.grant-credits': { email: made, credits: 1 },
    'account.set-limits': { email: made, rpm: 60 },
    'coupon.create': { credits: 1 },
    'image.add': { name: `img${n}`, image: `rc/audit${n}:latest` },
    'image.disable': { image: `rc/audit${n}:latest` },
    'image.set-ssh': { image: `rc/audit${n}:latest`, ssh: true },
    // Saved without the upstream check (nothing answers on port 9); the check alone is not audited.
    'model.add': { name: `audit-model-${n}`, upstreams: ['http://127.0.0.1:9'], unchecked: true },
    'model.remove': { name: `audit-model-${n}` },
    'host.add': { name: `audit-host-${n}`, address: '127.0.0.1:9', token: 'audit-agent-token-0123456789' },
    'host.drain': { name: `audit-host-${n}` },
    'host.resume': { name: `audit-host-${n}` },
    'host.remove': { name: `audit-host-${n}`, force: true },
    'account.set-operator': { email: made, operator: false },
    'account.reject': { email: `review${n}@x.io` },
    'account.disable': { email: made, disabled: false },
    'account.rotate-key': { email: made },
    'account.revoke-key': { email: made },
    'account.launch-verification': { email: made, enabled: false, issue_token: true },
    'coupon.redemption': { open: true },
    'instance.destroy': { instance_id: instanceOf[n], reason: 'audit coverage' },
    'post /api/admin/instances/launch-verification': { email: 'owner1@x.io', enabled: true, issue_token: true },
  };
  return samples[action];
}

test('every admin and operator write in the route table leaves an audit entry', async (t) => {
  const dir = tempDir(t, 'rc-audit-');
  const bus = new MemoryBus();
  const store = await Store.open({ dataDir: dir, clock: systemClock });
  const silent = createLogger('silent');
  const instances = await createInstances({ store, bus, clock: systemClock, logger: silent, agents: [], settings: TEST_SETTINGS });
  const cp = await createControlPlane({
    store,
    bus,
    logger: silent,
    port: 0,
    dataDir: dir,
    routes: (deps) => [
      ...instances.routes(deps),
      ...openInstanceRoutes({ tickets: new ProxyTickets(store), proxyBase: () => 'http://localhost:8081', instance: (id) => instances.route(id) }),
    ],
    fleet: new LiveFleet(instances.service),
    instances: instances.service,
  });
  t.after(async () => {
    await instances.close();
    await cp.close();
    await store.close();
  });
  const admin = { store, publish: (e: Parameters<typeof bus.publish>[0]) => bus.publish(e), configuredModels: DEFAULT_SIM_MODELS };
  await runAdminOp(admin, 'account.create', { email: 'op@x.io', verified: true, operator: true, password: PASSWORD });

  const call = async (method: string, path: string, body: unknown, headers: Record<string, string>) => {
    const r = await request(cp.url + path, {
      method: method.toUpperCase() as 'POST',
      headers: { 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.body.text();
    return { status: r.statusCode, headers: r.headers, text };
  };
  const login = await call('post', '/api/auth/login', { email: 'op@x.io', password: PASSWORD }, {});
  assert.equal(login.status, 200, login.text);
  const setCookie = login.headers['set-cookie'];
  const cookie = (Array.isArray(setCookie) ? setCookie[0]! : setCookie!).split(';')[0]!;
  const asOperator = { cookie, 'x-csrf-token': (JSON.parse(login.text) as { csrf_token: string }).csrf_token };
  const asAdmin = { 'x-rc-admin-token': adminToken(dir) };

  for (const n of [1, 2]) await runAdminOp(admin, 'account.create', { email: `review${n}@x.io` }); // for account.reject
  // An active instance per transport, for instance.destroy: launched, waiting for capacity (no host).
  const instanceOf: string[] = [];
  for (const n of [1, 2]) {
    const a = (await runAdminOp(admin, 'account.create', { email: `owner${n}@x.io`, verified: true, credits: 10 })) as { id: number; api_token: string };
    const tpl = await store.templates.create(
      a.id,
      templateInputSchema.parse({ title: 't', image: 'vllm/vllm-openai:latest', instance_type: 'vllm', app_port: 8000, start_command: 'true' }),
      false,
    );
    const launched = await call('post', '/api/notebook/request', { template_id: tpl.id }, { authorization: `Bearer ${a.api_token}` });
    assert.equal(launched.status, 200, launched.text);
    instanceOf[n] = (await store.instances.active(a.id))!.id;
  }

  const doc = JSON.parse((await call('get', '/api/openapi.json', undefined, {})).text) as {
    paths: Record<string, Record<string, { security?: Record<string, string[]>[] }>>;
  };
  /** The writes: every non-GET operation whose security is the admin token or that is under /api/operator/. */
  const writes: { method: string; path: string; transport: 'admin' | 'operator' }[] = [];
  for (const [path, ops] of Object.entries(doc.paths))
    for (const [method, o] of Object.entries(ops)) {
      if (method === 'get') continue;
      const isAdmin = (o.security ?? []).some((s) => 'adminToken' in s);
      if (isAdmin || path.startsWith('/api/operator/')) writes.push({ method, path, transport: isAdmin ? 'admin' : 'operator' });
    }
  assert.ok(writes.length >= 3, JSON.stringify(writes));

  const silentOnes: string[] = [];
  let n = 0;
  for (const w of writes) {
    n++;
    const actions = w.path.includes('{op}') ? Object.keys(ADMIN_OPS).filter((a) => !a.endsWith('.list') && !a.endsWith('.check')) : [`${w.method} ${w.path}`];
    for (const action of actions) {
      const input = sampleInput(action, w.transport === 'admin' ? 1 : 2, instanceOf);
      assert.ok(input, `no sample input for ${action}: add one here, so that its audit entry is checked`);
      const before = (await store.audit.page(1)).entries[0]?.id ?? 0;
      const path = w.path.replace('{op}', action);
      const r = await call(w.method, path, input, w.transport === 'admin' ? asAdmin : asOperator);
      assert.equal(r.status, 200, `${w.method.toUpperCase()} ${path}: ${r.status} ${r.text}`);
      const entry = (await store.audit.page(1)).entries[0];
      if (!entry || entry.id === before) silentOnes.push(`${w.method.toUpperCase()} ${path}`);
      else assert.equal(entry.actor, w.transport === 'admin' ? 'admin-token' : 'op@x.io', path);
    }
  }
  assert.ok(n >= 3);
  assert.deepEqual(silentOnes, [], 'admin or operator writes that left no audit entry');
});
