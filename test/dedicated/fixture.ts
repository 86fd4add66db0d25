// Shared set-up of the dedicated-endpoint, proxy and tunnel tests: a gateway with the dedicated
// endpoints and the tunnel broker over an InstanceRouteTable, keys for two accounts.
import { lookup } from 'node:dns';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Server as HttpServer } from 'node:http';
import type { TestContext } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Agent, fetch as undiciFetch, type RequestInit } from 'undici';
import type { WebSocketServer } from 'ws';
import { MemoryBus } from '../../lib/bus.js';
import { generateKey, hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { createGateway, type Gateway } from '../../gateway/server.js';
import { memoryKeySource } from '../../gateway/auth/keys.js';
import { createDedicatedEndpoints, type DedicatedEndpoints } from '../../gateway/dedicated/routes.js';
import type { HeldLimitSettings } from '../../lib/held-limits.js';
import { DEFAULT_UPLOAD_LIMITS, type UploadLimitSettings } from '../../lib/upload-limits.js';
import { InstanceRouteTable, type InstanceRoute, type RouteStatus } from '../../lib/instance-routes.js';
import { createTunnelBroker, type TunnelBroker, type TunnelLimitSettings } from '../../gateway/tunnel/broker.js';
import type { Server } from '../../lib/http.js';
import { TunnelClient, type TunnelStatus } from '../../agent/tunnel/client.js';
import { issueTunnelToken } from '../../lib/tunnel/identity.js';
import { RC_JS, waitFor } from '../helpers.js';

/** The compiled rc CLI next to this compiled test (works in dist/ and in .build/NAME/). */
export { RC_JS };
export const TUNNEL_JS = fileURLToPath(new URL('../../agent/tunnel/main.js', import.meta.url));

export const OWNER = 7;
export const OTHER = 8;

export interface GatewayFixture {
  gateway: Gateway;
  dedicated: DedicatedEndpoints;
  routes: InstanceRouteTable;
  /** Instance ids passed to recordActivity (unthrottled in tests). */
  activity: string[];
  broker: TunnelBroker;
  /** The tunnels' own listener (tunnel URLs are http://<tunnel id>.localhost:<its port>/). */
  tunnels: Server;
  tunnelSecret: string;
  ownerKey: string;
  otherKey: string;
  addRoute(instanceId: string, address: string, o?: { port?: number; status?: RouteStatus; instanceType?: string; accountId?: number }): InstanceRoute;
}

export async function startGatewayFixture(
  t: TestContext,
  o: {
    maxBodyBytes?: number;
    proxyUrl?: string;
    probeTimeoutMs?: number;
    /** The broker's check of connected tunnels against their instance (default 1 s). */
    pingIntervalMs?: number;
    tunnelLimits?: Partial<TunnelLimitSettings>;
    inflight?: Partial<HeldLimitSettings>;
    uploads?: Partial<UploadLimitSettings>;
  } = {},
): Promise<GatewayFixture> {
  const activity: string[] = [];
  const routes = new InstanceRouteTable((id) => activity.push(id), 0);
  const ownerKey = generateKey();
  const otherKey = generateKey();
  const bus = new MemoryBus();
  const tunnelSecret = 'test-tunnel-secret-0123456789abcdef';
  const dedicated = createDedicatedEndpoints({ routes, startingRetryAfterSec: 7, maxBodyBytes: o.maxBodyBytes, proxyUrl: o.proxyUrl, inflight: o.inflight });
  const broker = createTunnelBroker({
    routes,
    secret: tunnelSecret,
    pingIntervalMs: o.pingIntervalMs ?? 1_000,
    maxBodyBytes: o.maxBodyBytes,
    probeTimeoutMs: o.probeTimeoutMs,
    limits: o.tunnelLimits,
  });
  const gateway = await createGateway({
    port: 0,
    models: [],
    keySource: memoryKeySource([
      { keyHash: hashKey(ownerKey), accountId: OWNER },
      { keyHash: hashKey(otherKey), accountId: OTHER },
    ]),
    bus,
    logger: createLogger('silent'),
    limits: { uploads: { ...DEFAULT_UPLOAD_LIMITS, ...o.uploads } },
    routes: [dedicated.plugin, broker.plugin],
  });
  const tunnels = await broker.listenPublic('127.0.0.1', 0);
  t.after(async () => {
    await broker.close();
    await tunnels.close();
    await gateway.close();
    await dedicated.close();
    await bus.close();
  });
  return {
    gateway,
    dedicated,
    routes,
    activity,
    broker,
    tunnels,
    tunnelSecret,
    ownerKey,
    otherKey,
    addRoute(instanceId, address, o = {}) {
      const route: InstanceRoute = {
        instanceId,
        accountId: o.accountId ?? OWNER,
        status: o.status ?? 'ready',
        instanceType: o.instanceType ?? 'vllm',
        ports: new Map([[o.port ?? 8000, address]]),
      };
      routes.set(route);
      return route;
    },
  };
}

export function tempDir(t: TestContext, prefix = 'rc-dedicated-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => {
    rmSync(dir, { recursive: true, force: true });
    rmSync(`${dir}-instances`, { recursive: true, force: true }); // an agent's instance homes
  });
  return dir;
}

/** host:port of a server URL. */
export const hostPort = (url: string): string => new URL(url).host;

/**
 * Resolves `*.localhost` to the loopback address, as browsers do without DNS (the system resolver
 * of a test machine may not), so tunnel URLs can be fetched as printed.
 */
const localhostAgent = new Agent({
  connect: {
    lookup: (hostname: string, options: object, callback: (...args: never[]) => void) =>
      lookup(hostname.endsWith('.localhost') ? '127.0.0.1' : hostname, options, callback as never),
  } as object,
});

/** fetch() that reaches `http://<tunnel id>.localhost:<port>/` URLs. */
export function tunnelFetch(url: string, init: RequestInit = {}): ReturnType<typeof undiciFetch> {
  return undiciFetch(url, { ...init, dispatcher: localhostAgent });
}

/** rc-tunnel's client for `instanceId`'s service on `port`, connected to the fixture's broker: its public URL. */
export async function connectedTunnel(t: TestContext, f: GatewayFixture, instanceId: string, port: number): Promise<string> {
  const statuses: TunnelStatus[] = [];
  const client = new TunnelClient({
    broker: f.gateway.url,
    token: issueTunnelToken(f.tunnelSecret, instanceId),
    port,
    log: () => {},
    onStatus: (s) => statuses.push(s),
  });
  client.start();
  t.after(() => client.stop());
  return (await waitFor(() => statuses.find((s) => s.state === 'connected')))!.publicUrl!;
}

/** Listens `server` (an app with WebSockets on `wss`) on loopback until the test ends: its `host:port`. */
export async function listenApp(t: TestContext, server: HttpServer, wss: WebSocketServer): Promise<string> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(async () => {
    for (const c of wss.clients) c.terminate();
    wss.close();
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  });
  return `127.0.0.1:${(server.address() as { port: number }).port}`;
}
