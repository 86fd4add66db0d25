// Shared set-up of the agent tests: a real agent on loopback (port 0) with the process runtime, a
// real grpc-js client, temp data dirs, and a cleanup that kills every process an agent started.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import { createAgentClient, type AgentClient } from '../../agent/client.js';
import { findByEnv } from '../../agent/procfs.js';
import { AGENT_ID_ENV } from '../../agent/process-runtime.js';
import { startAgent, type AgentHandle, type AgentOptions } from '../../agent/server.js';
import type { InstanceEvent, InstanceInfo, InstanceState, WatchItem } from '../../agent/types.js';
import { createLogger } from '../../lib/log.js';
import { firstLine, waitFor, RC_JS } from '../helpers.js';

/** The compiled rc CLI next to this compiled test (works in dist/ and in .build/NAME/). */
export { RC_JS };

/** A start command that runs the simulated backend on the routed port. */
export function simCommand(model = 'm'): string {
  return `"${process.execPath}" "${RC_JS}" sim --port $PORT --model ${model} --fast`;
}

/** A start command that runs a tiny HTTP server on PORT (answers 200 everywhere, or `status` on /health). */
export function httpCommand(healthStatus = 200): string {
  const js = `require('http').createServer((q,s)=>{s.statusCode=q.url==='/health'?${healthStatus}:200;s.end('ok')}).listen(+process.env.PORT,'127.0.0.1')`;
  return `exec "${process.execPath}" -e "${js}"`;
}

export const newToken = () => randomBytes(24).toString('base64url');

export function tempDir(t: TestContext, prefix = 'rc-agent-test-'): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => {
    // Retried: a part still running while the hooks run (an agent's nvidia-smi stand-in logging a
    // call) may add a file between the listing and the rmdir (ENOTEMPTY).
    rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
    rmSync(`${dir}-instances`, { recursive: true, force: true, maxRetries: 5 }); // an agent's instance homes
  });
  return dir;
}

/** Kills (SIGKILL) every process group that carries this agent id in its environment. */
export function killAgentProcesses(agentId: string): void {
  for (const { stat } of findByEnv(AGENT_ID_ENV, agentId)) {
    try {
      process.kill(-stat.pgrp, 'SIGKILL');
    } catch {
      // Gone already.
    }
  }
}

/** Live process groups of one instance of one agent. */
export function instanceGroups(agentId: string, instanceId: string): number[] {
  return [
    ...new Set(
      findByEnv(AGENT_ID_ENV, agentId)
        .filter((p) => p.env.get('RC_INSTANCE_ID') === instanceId)
        .map((p) => p.stat.pgrp),
    ),
  ];
}

export interface TestAgent {
  agent: AgentHandle;
  client: AgentClient;
  token: string;
  dataDir: string;
}

/** An in-process agent with 4 configured GPUs and a client; both closed (and instances killed) after the test. */
export async function startTestAgent(t: TestContext, options: Partial<AgentOptions> = {}): Promise<TestAgent> {
  const token = options.token ?? newToken();
  const dataDir = options.dataDir ?? tempDir(t);
  const agent = await startAgent({
    host: '127.0.0.1',
    port: 0,
    token,
    dataDir,
    gpus: { detect: 'configured', count: 4 },
    readyTimeoutMs: 20_000,
    stopGraceMs: 3_000,
    lostControlPlaneGraceMs: 0,
    heartbeatMs: 200,
    logger: createLogger('silent'),
    ...options,
  });
  const client = createAgentClient({ address: agent.address, token });
  t.after(async () => {
    client.close();
    await agent.close();
    killAgentProcesses(agent.agentId);
  });
  return { agent, client, token, dataDir };
}

/** Polls ListInstances until the instance is in `state`. */
export async function waitForState(client: AgentClient, id: string, state: InstanceState, timeoutMs = 20_000): Promise<InstanceInfo> {
  const found = await waitFor(
    async () => {
      const info = (await client.list()).find((i) => i.instanceId === id);
      if (info && (info.state === 'failed' || info.state === 'stopped') && info.state !== state) {
        throw new Error(`instance ${id} is ${info.state} (${info.reason}: ${info.detail}), expected ${state}`);
      }
      return info?.state === state ? info : undefined;
    },
    timeoutMs,
    50,
  );
  return found!;
}

/** Collects WatchEvents items in the background until stopped. */
export function collectEvents(client: AgentClient, afterSeq = 0): { items: WatchItem[]; events: () => InstanceEvent[]; stop: () => void } {
  const controller = new AbortController();
  const items: WatchItem[] = [];
  void (async () => {
    for await (const item of client.watch({ afterSeq, signal: controller.signal })) items.push(item);
  })().catch(() => undefined);
  return {
    items,
    events: () => items.flatMap((i) => (i.kind === 'event' ? [i.event] : [])),
    stop: () => controller.abort(),
  };
}

/** Runs `rc agent` as a child process; resolves with its address once it prints its ready line. */
export async function spawnAgent(
  t: TestContext,
  dataDir: string,
  token: string,
  env: Record<string, string> = {},
  port = 0,
  host = '127.0.0.1',
): Promise<{ child: ChildProcess; address: string; agentId: string }> {
  const child = spawn(process.execPath, [RC_JS, 'agent', '--port', String(port), '--host', host, '--data-dir', dataDir], {
    env: {
      ...process.env,
      RC_AGENT_TOKEN: token,
      RC_LOG_LEVEL: 'silent',
      RC_AGENT_RUNTIME: 'process',
      RC_AGENT_GPU_DETECT: 'configured',
      RC_AGENT_LOST_CONTROL_PLANE_MS: '0',
      RC_AGENT_STOP_GRACE_MS: '3000',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.after(() => {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => {
    stderr += d.toString();
  });
  const ready = JSON.parse(await firstLine(child, 'rc agent', { context: () => stderr })) as { address: string; agentId: string };
  return { child, address: ready.address, agentId: ready.agentId };
}

/** SIGKILLs a child and waits for it to be gone. */
export async function killChild(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill('SIGKILL');
  await exited;
}
