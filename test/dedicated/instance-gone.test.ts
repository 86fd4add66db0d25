// Long runs stay flat: what the dedicated endpoints keep per instance (a connection pool per
// address, the activity throttle's entry, the last address) goes when the instance goes, as the
// instances service says on the bus (`instance.changed` with no route, or a stopped one). Before,
// every instance ever launched left a pool and a throttle entry behind (issue 44, item 9).
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import { test } from 'node:test';
import { MemoryBus } from '../../lib/bus.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { followGone, routesFromInstances, type ServiceRoute } from '../../gateway/dedicated/from-instances.js';
import { createDedicatedEndpoints } from '../../gateway/dedicated/routes.js';
import { createGateway } from '../../gateway/server.js';

const OWNER = 3;
const INSTANCES = 12;

async function startApp(t: { after(fn: () => unknown): void }): Promise<number> {
  const server: Server = createServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise((r) => server.close(r)));
  return (server.address() as { port: number }).port;
}

test('instances that come and go through the dedicated endpoints leave no pool, throttle entry or address behind', async (t) => {
  const key = generateKey();
  const bus = new MemoryBus();
  const service = new Map<string, ServiceRoute>();
  const routes = routesFromInstances({ route: (id) => service.get(id), recordActivity: () => {} }, 60_000);
  const unfollow = followGone(bus, routes);
  const dedicated = createDedicatedEndpoints({ routes });
  const gateway = await createGateway({
    port: 0,
    models: [],
    keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: OWNER }]),
    bus,
    logger: createLogger('silent'),
    routes: [dedicated.plugin],
  });
  t.after(async () => {
    unfollow();
    await gateway.close();
    await dedicated.close();
    await bus.close();
  });

  // Each instance on a port of its own, called once (a pool for its address), then ended.
  for (let i = 0; i < INSTANCES; i++) {
    const id = `inst-${i}`;
    const port = await startApp(t);
    service.set(id, { instanceId: id, accountId: OWNER, status: 'ready', instanceType: 'vllm', host: '127.0.0.1', port });
    const r = await fetch(`${gateway.url}/dedicated/${id}/8000/v1/models`, { headers: { authorization: `Bearer ${key}` } });
    assert.equal(r.status, 200, await r.text());
    assert.equal(dedicated.pools, 1, 'a pool for the live instance address');
    // The service forgets it and says so; half of them as a stopped route, half as no route.
    service.delete(id);
    const route =
      i % 2 === 0 ? null : { instanceId: id, accountId: OWNER, status: 'stopped' as const, instanceType: 'vllm', host: '127.0.0.1', port, routedPort: null };
    await bus.publish({ type: 'instance.changed', instanceId: id, route });
    assert.equal(dedicated.pools, 0, `instance ${i}'s pool dropped when it ended`);
  }
  assert.equal(routes.held, 0, 'no throttle entry or address kept for an ended instance');
  // A route update that is not an end keeps what a live instance needs.
  service.set('live', { instanceId: 'live', accountId: OWNER, status: 'ready', instanceType: 'vllm', host: '127.0.0.1', port: await startApp(t) });
  assert.equal((await fetch(`${gateway.url}/dedicated/live/8000/x`, { headers: { authorization: `Bearer ${key}` } })).status, 200);
  await bus.publish({ type: 'instance.changed', instanceId: 'live', route: { ...service.get('live')!, status: 'ready', routedPort: null } });
  assert.equal(dedicated.pools, 1);
  assert.equal(routes.held, 1);
});

test('an InstanceRouteTable tells onGone listeners the addresses of a deleted route, once', () => {
  const routes = new InstanceRouteTable(() => {}, 60_000);
  const told: [string, readonly string[]][] = [];
  const off = routes.onGone((id, addresses) => told.push([id, addresses]));
  routes.set({
    instanceId: 'a',
    accountId: 1,
    status: 'ready',
    instanceType: 'custom',
    ports: new Map([
      [7860, '10.0.0.1:4000'],
      [8000, ''],
    ]),
  });
  routes.recordActivity('a');
  routes.delete('a');
  routes.delete('a');
  assert.deepEqual(told, [['a', ['10.0.0.1:4000']]]);
  off();
  routes.set({ instanceId: 'b', accountId: 1, status: 'ready', instanceType: 'custom', ports: new Map() });
  routes.delete('b');
  assert.equal(told.length, 1, 'an unsubscribed listener hears nothing');
});
