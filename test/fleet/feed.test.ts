// A standalone gateway's feed from the control plane, against a stand-in internal API (a real HTTP
// server whose snapshot the test controls and can hold back) and a real gateway: the first
// snapshot, a resync that replaces everything while events that arrived during its fetch win over
// it (a key revoked meanwhile stays revoked), route events (malformed ones ignored), and a
// control plane that stops answering (the gateway keeps what it holds).
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { MemoryBus } from '../../lib/bus.js';
import { loadConfig } from '../../lib/config.js';
import type { GatewaySnapshot, InstanceRouteWire } from '../../lib/gateway-snapshot.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { AccountLimits } from '../../gateway/gates/limits.js';
import { createGateway } from '../../gateway/server.js';
import { PlatformFeed } from '../../gateway/sync/platform-feed.js';
import { platformGatewayParts } from '../../gateway/sync/platform-gateway.js';
import { waitFor, listenLocal } from '../helpers.js';

const TOKEN = 'i'.repeat(32);
const route = (id: string, status: InstanceRouteWire['status'] = 'ready'): InstanceRouteWire => ({
  instanceId: id,
  accountId: 1,
  status,
  instanceType: 'vllm',
  host: '127.0.0.1',
  port: 9,
  routedPort: 8000,
});

function snapshot(keys: [string, number][], instances: InstanceRouteWire[] = []): GatewaySnapshot {
  return {
    keys: keys.map(([k, accountId]) => ({ keyHash: hashKey(k), accountId })),
    sessions: [],
    limits: [{ accountId: 2, rpm: 7, tpm: null, dailyTokens: null }],
    models: [
      { name: 'm', upstreams: ['http://127.0.0.1:9'], tools: true, reasoning: false, efforts: [], maxContext: 1000, fitMaxTokens: false, ownedBy: 'rc' },
    ],
    instances,
    tunnel: { secret: 's'.repeat(32), proxyUrl: '' },
  };
}

/** The stand-in internal API: serves `current`; `hold()` makes the next answer wait for `release()`. */
async function startInternalApi(t: TestContext, initial: GatewaySnapshot) {
  let current = initial;
  let held: (() => void) | undefined;
  let holding = false;
  let fetched = 0;
  const server = createServer((req, res) => {
    if (req.headers['x-rc-internal-token'] !== TOKEN) {
      res.writeHead(401).end('{"detail":"no"}');
      return;
    }
    fetched++;
    const answer = () => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(current));
    if (holding) held = answer;
    else answer();
  });
  const port = await listenLocal(t, server);
  return {
    url: `http://127.0.0.1:${port}`,
    set: (s: GatewaySnapshot) => {
      current = s;
    },
    hold: () => {
      holding = true;
    },
    release: () => {
      holding = false;
      held?.();
    },
    fetched: () => fetched,
    stop: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

test('the feed: first snapshot, resync with events replayed over it, route events, control plane gone', async (t) => {
  const [k1, k2, k3] = [generateKey(), generateKey(), generateKey()];
  const api = await startInternalApi(t, snapshot([[k1, 1]], [route('i1')]));
  const bus = new MemoryBus();
  const config = { ...loadConfig({}), gatewayResyncMs: 3_600_000 };
  const logger = createLogger('silent');
  const parts = await platformGatewayParts(config, { url: api.url, token: TOKEN, bus, logger });
  t.after(() => parts.close());
  const limits = new AccountLimits({ rpm: 100, tpm: 1000, dailyTokens: 10_000 });
  limits.load(PlatformFeed.limitEntries(parts.snapshot));
  const gateway = await createGateway({ port: 0, models: parts.snapshot.models, keySource: parts.keySource, bus, routes: parts.plugins, logger });
  t.after(() => gateway.close());
  parts.follow(gateway, limits);
  const keys = gateway.context.keys;
  assert.equal(keys.lookup(k1), 1);
  assert.equal(limits.get(2).rpm, 7);

  // A resync whose snapshot was read before k1's revocation: the revocation that arrives during the fetch wins.
  api.set(
    snapshot(
      [
        [k1, 1],
        [k2, 2],
      ],
      [route('i1'), route('i2')],
    ),
  );
  api.hold();
  const before = api.fetched();
  await bus.publish({ type: 'catalog.changed' });
  await waitFor(() => api.fetched() > before);
  await bus.publish({ type: 'key.revoked', keyHash: hashKey(k1), accountId: 1 });
  await bus.publish({ type: 'key.issued', keyHash: hashKey(k3), accountId: 3 });
  api.release();
  await waitFor(() => keys.lookup(k2) === 2);
  assert.equal(keys.lookup(k1), undefined);
  assert.equal(keys.lookup(k3), 3);

  // Route events: a route arrives, a malformed one is ignored, null removes. Read through the dedicated endpoint's table.
  const status = async (id: string) => {
    const r = await fetch(`${gateway.url}/dedicated/${id}/8000/v1/models`, { headers: { authorization: `Bearer ${k2}` } });
    await r.text();
    return r.status;
  };
  assert.equal(await status('i3'), 403); // unknown to this gateway
  await bus.publish({ type: 'instance.changed', instanceId: 'i3', route: { ...route('i3'), accountId: 2, status: 'pending' } });
  assert.equal(await status('i3'), 503); // known, starting
  await bus.publish({ type: 'instance.changed', instanceId: 'i3', route: { ...route('i3'), port: 'x' } as unknown as InstanceRouteWire });
  assert.equal(await status('i3'), 503); // the malformed event changed nothing
  await bus.publish({ type: 'instance.changed', instanceId: 'i3', route: null });
  assert.equal(await status('i3'), 403);

  // The control plane stops answering: a resync fails and the gateway keeps what it holds.
  await api.stop();
  await bus.publish({ type: 'catalog.changed' });
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(keys.lookup(k2), 2);
  assert.deepEqual(gateway.context.catalog.names(), ['m']);
});
