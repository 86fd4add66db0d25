// Tunnels listed at the control plane (issue 42): real brokers (two gateways, as two replicas)
// announce the tunnels rc-tunnel opens on them over the bus, and the control plane's LiveTunnels
// lists each instance's tunnels from that: once per tunnel however many brokers hold it, still
// listed while any does, gone when the last closes, gone when a silent broker's reports run out,
// gone when the instance ends; malformed events change nothing. Over Redis as between processes.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test, type TestContext } from 'node:test';
import { TunnelClient, type TunnelStatus } from '../../agent/tunnel/client.js';
import { LiveTunnels } from '../../control-plane/instances/live-tunnels.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { createGateway } from '../../gateway/server.js';
import { createTunnelBroker } from '../../gateway/tunnel/broker.js';
import { busChannel, MemoryBus, RedisBus, type Bus, type BusEvent } from '../../lib/bus.js';
import { FakeClock } from '../../lib/clock.js';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { createLogger } from '../../lib/log.js';
import { issueTunnelToken, tunnelId } from '../../lib/tunnel/identity.js';
import { listenLocal, REDIS_URL, redisAvailable, waitFor } from '../helpers.js';

const SECRET = 'test-tunnel-secret-0123456789abcdef';
/** Every replica serves tunnels under one public origin (RC_TUNNEL_PUBLIC_URL). */
const PUBLIC = 'http://tunnels.localhost:8082';
const ANNOUNCE_MS = 150;

/** A bus that can be cut off (a broker whose link to the control plane is gone, or which died without a word). */
class CuttableBus implements Bus {
  cut = false;
  constructor(private readonly inner: Bus) {}
  async publish(ev: BusEvent): Promise<void> {
    if (!this.cut) await this.inner.publish(ev);
  }
  subscribe(listener: (ev: BusEvent) => void): () => void {
    return this.inner.subscribe(listener);
  }
  async close(): Promise<void> {}
}

/** A gateway with only the tunnel broker, announcing on `bus`. Returns its URL. */
async function startBroker(t: TestContext, bus: Bus, routes: InstanceRouteTable): Promise<string> {
  const broker = createTunnelBroker({ routes, secret: SECRET, publicUrl: PUBLIC, bus, announceIntervalMs: ANNOUNCE_MS });
  const gateway = await createGateway({ port: 0, models: [], keySource: memoryKeySource([]), logger: createLogger('silent'), routes: [broker.plugin] });
  t.after(async () => {
    await broker.close();
    await gateway.close();
  });
  return gateway.url;
}

function tunnel(t: TestContext, broker: string, instanceId: string, port: number): { client: TunnelClient; connected: () => boolean } {
  let last: TunnelStatus | undefined;
  const client = new TunnelClient({ broker, token: issueTunnelToken(SECRET, instanceId), port, log: () => {}, onStatus: (s) => (last = s), maxBackoffMs: 200 });
  client.start();
  t.after(() => client.stop());
  return { client, connected: () => last?.state === 'connected' };
}

async function localService(t: TestContext): Promise<number> {
  return listenLocal(
    t,
    createServer((_req, res) => res.end('ok')),
  );
}

function routesWith(...ids: string[]): InstanceRouteTable {
  const routes = new InstanceRouteTable(() => {}, 0);
  for (const id of ids) routes.set({ instanceId: id, accountId: 7, status: 'ready', instanceType: 'jupyter', ports: new Map([[8888, '127.0.0.1:1']]) });
  return routes;
}

test('two brokers, one tunnel: listed once while any broker holds it; a silent broker’s reports run out; the instance’s end empties the list', async (t) => {
  const bus = new MemoryBus();
  const clock = new FakeClock(Date.now());
  const tunnels = new LiveTunnels(bus, clock);
  t.after(() => tunnels.close());
  const changes: string[] = [];
  tunnels.onChange((id) => changes.push(id));
  const routes = routesWith('i_one');
  const cutB = new CuttableBus(bus);
  const [a, b] = [await startBroker(t, bus, routes), await startBroker(t, cutB, routes)];
  const port = await localService(t);
  const id = tunnelId(SECRET, 'i_one', port);
  const expected = [{ tunnel_id: id, port, public_url: `http://${id}.tunnels.localhost:8082/` }];

  // rc-tunnel reaches both replicas (RC_TUNNEL_BROKERS): one tunnel, listed once.
  const onA = tunnel(t, a, 'i_one', port);
  await waitFor(() => tunnels.of('i_one').length === 1);
  assert.deepEqual(tunnels.of('i_one'), expected);
  assert.deepEqual(changes, ['i_one'], 'the page hears of it at once');
  const onB = tunnel(t, b, 'i_one', port);
  await waitFor(() => onB.connected());
  await new Promise((r) => setTimeout(r, 3 * ANNOUNCE_MS)); // both brokers' lists arrive
  assert.deepEqual(tunnels.of('i_one'), expected);
  assert.deepEqual(changes, ['i_one'], 'a second broker holding it, and every list, change nothing');

  // A closes: B still holds it.
  onA.client.stop();
  await new Promise((r) => setTimeout(r, 3 * ANNOUNCE_MS));
  assert.deepEqual(tunnels.of('i_one'), expected);

  // B goes silent (its link to the bus cut, as a SIGKILLed gateway), then its tunnel closes: the
  // control plane hears nothing, and lists the tunnel until B's last report runs out (3 intervals).
  cutB.cut = true;
  onB.client.stop();
  await new Promise((r) => setTimeout(r, 2 * ANNOUNCE_MS));
  assert.deepEqual(tunnels.of('i_one'), expected);
  clock.advance(3 * ANNOUNCE_MS + 1);
  assert.deepEqual(tunnels.of('i_one'), []);

  // Open again on A; the instance ends (route null on the bus): listed no more, forgotten.
  const again = tunnel(t, a, 'i_one', port);
  await waitFor(() => tunnels.of('i_one').length === 1);
  await bus.publish({ type: 'instance.changed', instanceId: 'i_one', route: null });
  assert.deepEqual(tunnels.of('i_one'), []);
  assert.equal(tunnels.size, 0);
  again.client.stop();

  // Events from another process are checked: malformed ones change nothing.
  const before = changes.length;
  for (const ev of [
    { type: 'tunnel.opened', brokerId: 'x', ttlMs: 1000, instanceId: 'i_one', tunnelId: 'not-an-id', port: 1, publicUrl: 'http://x/' },
    { type: 'tunnel.opened', brokerId: 'x', ttlMs: -1, instanceId: 'i_one', tunnelId: id, port: 1, publicUrl: 'http://x/' },
    { type: 'tunnel.opened', brokerId: 'x', ttlMs: 1000, instanceId: 'i_one', tunnelId: id, port: 70000, publicUrl: 'http://x/' },
    { type: 'tunnel.opened', brokerId: 'x', ttlMs: 1000, instanceId: 'i_one', tunnelId: id, port: 1, publicUrl: 'javascript:alert(1)' },
    { type: 'tunnels.live', brokerId: 'x', ttlMs: 1000, tunnels: 'all' },
  ]) {
    await bus.publish(ev as unknown as BusEvent);
  }
  assert.deepEqual(tunnels.of('i_one'), []);
  assert.equal(changes.length, before);
});

test('over Redis: a broker in one process, the control plane in another; a control plane that starts later learns from the next list', async (t) => {
  if (!(await redisAvailable(t))) return;
  const channel = busChannel(`rc-test-tunnels-${process.pid}-${Date.now()}:`);
  const brokerBus = new RedisBus(REDIS_URL, channel);
  const planeBus = new RedisBus(REDIS_URL, channel);
  t.after(async () => {
    await brokerBus.close();
    await planeBus.close();
  });
  await Promise.all([brokerBus.whenReady(), planeBus.whenReady()]);
  const clock = new FakeClock(Date.now());
  const plane = new LiveTunnels(planeBus, clock);
  t.after(() => plane.close());
  const routes = routesWith('i_redis');
  const broker = await startBroker(t, brokerBus, routes);
  const port = await localService(t);
  const c = tunnel(t, broker, 'i_redis', port);
  await waitFor(() => plane.of('i_redis').length === 1);
  assert.equal(plane.of('i_redis')[0]!.port, port);

  // A control plane started after the tunnel opened (a restart) lists it from the broker's next list.
  const late = new LiveTunnels(planeBus, clock);
  t.after(() => late.close());
  assert.deepEqual(late.of('i_redis'), []);
  await waitFor(() => late.of('i_redis').length === 1, 5000);

  c.client.stop();
  await waitFor(() => plane.of('i_redis').length === 0 && late.of('i_redis').length === 0);
});
