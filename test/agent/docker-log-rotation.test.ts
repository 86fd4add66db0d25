// Issue 44 with the real engine (skipped without one): a container's output flood is copied into
// the instance log and rotated within its cap (agent/log-file.ts), and the logs API starts with
// "[older output dropped: N bytes]". The process-runtime version is log-rotation.test.ts.
import assert from 'node:assert/strict';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { ensureLocalImage } from '../../agent/images/local-images.js';
import { DOCKER_SOCKET, dockerAvailable, waitFor } from '../helpers.js';
import { engine, removeAgentNetworks, removeTestFirewall, testIsolation } from './docker-isolation-harness.js';
import { startTestAgent, waitForState } from './harness.js';

const BUSYBOX = 'rc-test/busybox:1';
after(removeTestFirewall);

test('docker runtime: a flood is rotated within the cap and the logs API says what was dropped', async (t) => {
  if (!(await dockerAvailable(t))) return;
  await ensureLocalImage(DOCKER_SOCKET, BUSYBOX);
  const fileBytes = 64 * 1024;
  const { client, agent, dataDir } = await startTestAgent(t, {
    runtime: 'docker',
    dockerSocket: DOCKER_SOCKET,
    readyTimeoutMs: 60_000,
    stopGraceMs: 2000,
    logCap: { fileBytes, files: 2 },
    docker: { limitsPerGpu: { memoryMb: 256, cpus: 0.5, pids: 200 }, toolbox: false, isolation: testIsolation },
  });
  t.after(async () => {
    const filter = encodeURIComponent(JSON.stringify({ label: [`rc.agent-id=${agent.agentId}`] }));
    const { json } = await engine('GET', `/containers/json?all=true&filters=${filter}`);
    for (const c of json as { Id: string }[]) await engine('DELETE', `/containers/${c.Id}?force=true`);
    await removeAgentNetworks(agent.agentId);
  });
  const id = `dk-flood-${process.pid}`;
  // 40,000 lines of 50 bytes, then a last line.
  const cmd = `i=0; while [ $i -lt 40000 ]; do printf 'flood %08d %034d\\n' $i 0; i=$((i+1)); done; echo quiet; exec sleep 600`;
  await client.start({ instanceId: id, image: BUSYBOX, startCommand: cmd });
  await waitForState(client, id, 'ready', 60_000);
  const collect = async (tail: number) => {
    const lines: string[] = [];
    for await (const l of client.logs(id, { tail })) lines.push(l);
    return lines;
  };
  const file = join(dataDir, 'instances', id, 'instance.log');
  await waitFor(async () => (await collect(1))[0] === 'quiet', 120_000);
  await waitFor(() => statSync(file).size < fileBytes, 10_000);
  assert.ok(!existsSync(`${file}.2`), 'no third file');
  const kept = statSync(file).size + statSync(`${file}.1`).size;
  const written = 40_000 * 50 + 'quiet\n'.length;
  const dropped = Number(readFileSync(`${file}.dropped`, 'utf8'));
  assert.ok(dropped > 0 && dropped + kept <= written, `dropped ${dropped} + kept ${kept} <= written ${written}`);
  // Everything kept (StreamLogs serves at most 10,000 lines of it).
  const lines = agent.supervisor.logs(id, 1_000_000).lines;
  assert.equal(lines[0], `[older output dropped: ${dropped} bytes]`);
  assert.equal(lines.at(-1), 'quiet');
  assert.equal((await collect(1))[0], 'quiet');
  await client.remove(id);
});
