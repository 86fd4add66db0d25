// A gateway with the tunnel broker in a process of its own, for tests that measure its memory
// (tunnel-memory.test.ts): one ready instance per id in argv, the tunnels' listener on an
// ephemeral port. Prints one JSON line `{gateway, tunnels, secret}` when listening; then answers
// each `stats` line on stdin with a JSON line of broker.tunnels(); exits when stdin closes.
import { readdirSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { MemoryBus } from '../../lib/bus.js';
import { createLogger } from '../../lib/log.js';
import { createGateway } from '../../gateway/server.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { createTunnelBroker } from '../../gateway/tunnel/broker.js';

// node --test runs every .js under test/, this file included: with no instance ids it is not the
// memory test's child, and ends at once instead of waiting for a stdin that never closes.
if (process.argv.length <= 2) process.exit(0);

const secret = 'memory-test-tunnel-secret-0123456789';
const routes = new InstanceRouteTable(() => {}, 60_000);
for (const instanceId of process.argv.slice(2)) {
  routes.set({ instanceId, accountId: 1, status: 'ready', instanceType: 'gradio', ports: new Map([[7860, '127.0.0.1:1']]) });
}
const bus = new MemoryBus();
// RC_TEST_TUNNEL_LIMITS: the broker's limits as JSON (bench/tunnel-flood.ts measures with and without).
const limits = process.env.RC_TEST_TUNNEL_LIMITS ? (JSON.parse(process.env.RC_TEST_TUNNEL_LIMITS) as Record<string, number>) : undefined;
const broker = createTunnelBroker({ routes, secret, limits });
const gateway = await createGateway({ port: 0, models: [], keySource: memoryKeySource([]), bus, logger: createLogger('silent'), routes: [broker.plugin] });
const tunnels = await broker.listenPublic('127.0.0.1', 0);
process.stdout.write(`${JSON.stringify({ gateway: gateway.url, tunnels: tunnels.url, tunnelsPort: tunnels.port, secret })}\n`);

const lines = createInterface({ input: process.stdin });
lines.on('line', (line) => {
  if (line.trim() === 'stats') process.stdout.write(`${JSON.stringify(broker.tunnels())}\n`);
  if (line.trim() === 'fds') process.stdout.write(`${JSON.stringify({ fds: readdirSync('/proc/self/fd').length, tunnels: broker.tunnels().length })}\n`);
});
lines.on('close', async () => {
  await broker.close();
  await tunnels.close();
  await gateway.close();
  await bus.close();
  process.exit(0);
});
