// One gateway replica of the routing benchmark, on a thread of its own (worker-host.ts): routes
// the model over the sims' URLs with the policy, accepts the benchmark's key, sends its URL, then
// closes on `close`.
import { parentPort, workerData } from 'node:worker_threads';
import { modelEntrySchema } from '../../lib/config.js';
import { hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { messagesRoutes } from '../../gateway/messages/routes.js';
import type { RoutingPolicy } from '../../gateway/backends/router.js';
import { createGateway } from '../../gateway/server.js';
import { MODEL } from './traffic.js';
import type { WorkerAsk } from './worker-host.js';

export interface GatewayWorkerData {
  upstreams: string[];
  routing: RoutingPolicy;
  key: string;
}

const { upstreams, routing, key } = workerData as GatewayWorkerData;
const gateway = await createGateway({
  port: 0,
  logger: createLogger('silent'),
  models: [modelEntrySchema.parse({ name: MODEL, upstreams, routing, maxContext: 1_000_000 })],
  keySource: memoryKeySource([{ keyHash: hashKey(key), accountId: 1 }]),
  routes: [messagesRoutes({ thinkingSecret: 'bench' })],
});
parentPort!.postMessage(gateway.url);
parentPort!.on('message', async ({ id, ask }: WorkerAsk) => {
  if (ask === 'close') await gateway.close();
  parentPort!.postMessage({ id, value: null });
});
