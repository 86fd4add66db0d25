// Shared set-up of the instance suites: a real SQLite store in a temp dir, a real agent (process
// runtime, its own temp data dir), the instance service and a real control plane on an
// ephemeral port, a recording bus, a JSON client, and cleanup that kills every instance process.
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { request } from 'undici';
import { startAgent, type AgentHandle } from '../../agent/server.js';
import { runAdminOp } from '../../control-plane/admin.js';
import { openInstanceRoutes, ProxyTickets } from '../../control-plane/proxy/handover.js';
import { LiveFleet } from '../../control-plane/instances/fleet.js';
import { createInstances, type AgentConfig, type Instances, type InstanceSettings } from '../../control-plane/instances/index.js';
import { createControlPlane, type ControlPlane, type ControlPlaneOptions } from '../../control-plane/server.js';
import { Store } from '../../control-plane/store.js';
import { templateInputSchema, type Template } from '../../control-plane/templates.js';
import { MemoryBus, type BusEvent } from '../../lib/bus.js';
import { systemClock, type Clock } from '../../lib/clock.js';
import { DEFAULT_SIM_MODELS } from '../../lib/config.js';
import { createLogger } from '../../lib/log.js';
import { killAgentProcesses, newToken, spawnAgent as spawnAgentProcess, tempDir } from '../agent/harness.js';
import { waitFor, RC_JS } from '../helpers.js';

export { RC_JS };
const silent = createLogger('silent');

/** Runs the simulated vLLM-like backend on the routed port ($PORT). */
export function simCommand(model = 'demo'): string {
  return `"${process.execPath}" "${RC_JS}" sim --port $PORT --model ${model} --fast`;
}

// Temp dirs, tokens and the process-group helpers are the agent suite's.
export { instanceGroups, killAgentProcesses, killChild, newToken, tempDir } from '../agent/harness.js';

export interface TestAgent {
  config: AgentConfig;
  handle: AgentHandle;
  dataDir: string;
}

/**
 * An in-process agent with `gpus` configured GPUs, or, with `smi`, the GPUs an nvidia-smi
 * stand-in reports (sampled every `smi.sampleMs`); closed and its instances killed after the test.
 */
export async function startTestAgent(
  t: TestContext,
  o: { id?: string; gpus?: number; dataDir?: string; token?: string; smi?: { command: string; sampleMs: number } } = {},
): Promise<TestAgent> {
  const token = o.token ?? newToken();
  // Its own data dir goes after the agent stopped (one hook, in that order): an agent saving its
  // state into a dir already removed is an unhandled ENOENT after the test.
  const ownDir = o.dataDir === undefined;
  const dataDir = o.dataDir ?? mkdtempSync(join(tmpdir(), 'rc-inst-agent-'));
  const removeDir = () => {
    if (!ownDir) return;
    rmSync(dataDir, { recursive: true, force: true, maxRetries: 5 });
    rmSync(`${dataDir}-instances`, { recursive: true, force: true, maxRetries: 5 });
  };
  const handle = await startAgent({
    host: '127.0.0.1',
    port: 0,
    token,
    dataDir,
    ...(o.smi
      ? { gpus: { detect: 'auto', command: o.smi.command } as const, gpuSampleMs: o.smi.sampleMs }
      : { gpus: { detect: 'configured', count: o.gpus ?? 4 } as const }),
    readyTimeoutMs: 20_000,
    servingReadyTimeoutMs: 20_000,
    stopGraceMs: 2_000,
    lostControlPlaneGraceMs: 0,
    heartbeatMs: 200,
    logger: silent,
  }).catch((err: unknown) => {
    removeDir();
    throw err;
  });
  t.after(async () => {
    await handle.close();
    killAgentProcesses(handle.agentId);
    removeDir();
  });
  return { config: { id: o.id ?? 'host-a', address: handle.address, token }, handle, dataDir };
}

/** `rc agent` as a child process (so the test can SIGKILL it) with 4 GPUs; its instances are killed after the test. */
export async function spawnAgent(t: TestContext, dataDir: string, token: string, port = 0): Promise<{ child: ChildProcess; address: string; agentId: string }> {
  const agent = await spawnAgentProcess(t, dataDir, token, { RC_AGENT_GPUS: '4', RC_AGENT_STOP_GRACE_MS: '2000' }, port);
  t.after(() => killAgentProcesses(agent.agentId));
  return agent;
}

export interface Reply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  body: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export interface Platform {
  dir: string;
  store: Store;
  cp: ControlPlane;
  instances: Instances;
  bus: MemoryBus;
  events: BusEvent[];
  call(method: string, path: string, o?: { key?: string; body?: unknown; raw?: string; cookie?: string; csrf?: string }): Promise<Reply>;
  /** Creates an account (as `rc account create`); returns its id and key. */
  account(email: string, o?: { verified?: boolean; credits?: number; password?: string }): Promise<{ id: number; key: string }>;
  /** Creates a template owned by `accountId` (image enabled in the default catalog unless given). */
  template(accountId: number, fields?: Record<string, unknown>): Promise<Template>;
  /** Stops the control plane and the service (instances keep running on the agent). */
  stop(): Promise<void>;
}

export interface PlatformOptions {
  agents?: AgentConfig[];
  clock?: Clock;
  settings?: Partial<InstanceSettings>;
  /** Reuse a data dir (a restarted control plane). */
  dir?: string;
  /** Do not start the tick timer and agent connections automatically. */
  manual?: boolean;
  /** The platform API's own settings (createControlPlane's). */
  apiSettings?: ControlPlaneOptions['settings'];
}

/** Test defaults: a fast tick, no launch rate limit unless a test sets one. */
export const TEST_SETTINGS: Partial<InstanceSettings> = { instanceTickMs: 100, instanceLaunchRate: '1:1000', gatewayPort: 8090 };

export async function startPlatform(t: TestContext, o: PlatformOptions = {}): Promise<Platform> {
  const dir = o.dir ?? tempDir(t, 'rc-inst-cp-');
  const clock = o.clock ?? systemClock;
  const bus = new MemoryBus();
  const events: BusEvent[] = [];
  bus.subscribe((e) => events.push(e));
  const store = await Store.open({ dataDir: dir, clock });
  const instances = await createInstances({ store, bus, clock, logger: silent, agents: o.agents ?? [], settings: { ...TEST_SETTINGS, ...o.settings } });
  const cp = await createControlPlane({
    store,
    bus,
    clock,
    logger: silent,
    port: 0,
    dataDir: dir,
    settings: o.apiSettings,
    // As the platform assembly mounts them: the instance routes and the proxy's hand-over.
    routes: (deps) => [
      ...instances.routes(deps),
      ...openInstanceRoutes({ tickets: new ProxyTickets(store), proxyBase: () => 'http://localhost:8081', instance: (id) => instances.route(id) }),
    ],
    fleet: new LiveFleet(instances.service),
  });
  if (!o.manual) instances.start();
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    await instances.close();
    await cp.close();
    await store.close();
  };
  t.after(stop);
  return {
    dir,
    store,
    cp,
    instances,
    bus,
    events,
    stop,
    async call(method, path, c = {}) {
      const headers: Record<string, string> = {};
      if (c.key !== undefined) headers.authorization = `Bearer ${c.key}`;
      if (c.cookie !== undefined) headers.cookie = c.cookie;
      if (c.csrf !== undefined) headers['x-csrf-token'] = c.csrf;
      let body: string | undefined = c.raw;
      if (c.body !== undefined) {
        body = JSON.stringify(c.body);
        headers['content-type'] = 'application/json';
      }
      const r = await request(cp.url + path, { method: method as 'GET', headers, body });
      const text = await r.body.text();
      let parsed: unknown = text;
      try {
        parsed = JSON.parse(text);
      } catch {
        /* keep text */
      }
      return { status: r.statusCode, headers: r.headers, body: parsed };
    },
    async account(email, a = {}) {
      const p = (await runAdminOp({ store, publish: (e) => bus.publish(e), configuredModels: DEFAULT_SIM_MODELS }, 'account.create', {
        email,
        verified: a.verified ?? true,
        credits: a.credits ?? 100,
        ...(a.password ? { password: a.password } : {}),
      })) as { id: number; api_token: string | null };
      return { id: p.id, key: p.api_token ?? '' };
    },
    async template(accountId, fields = {}) {
      return await store.templates.create(
        accountId,
        templateInputSchema.parse({
          title: 'sim',
          image: 'vllm/vllm-openai:latest',
          instance_type: 'vllm',
          app_port: 8000,
          start_command: simCommand(),
          ...fields,
        }),
        false,
      );
    },
  };
}

/** Polls GET /api/notebook/status until `status` (throws early on an unexpected terminal state). */
export async function waitStatus(p: Platform, key: string, status: string, timeoutMs = 20_000): Promise<Reply['body']> {
  return waitFor(
    async () => {
      const r = await p.call('GET', '/api/notebook/status', { key });
      const s = r.body?.status as string | undefined;
      if (s !== status && (s === 'failed' || (s === 'stopped' && status !== 'stopped'))) {
        throw new Error(`instance is ${s} (${r.body.reason}: ${r.body.detail}), expected ${status}`);
      }
      return s === status ? r.body : undefined;
    },
    timeoutMs,
    50,
  );
}
