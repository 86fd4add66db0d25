// StreamLogs: the last N lines, then follow; the end of the stream when the instance stops.
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { waitFor } from '../helpers.js';
import { startTestAgent, waitForState } from './harness.js';

test('logs: tail gives the last N lines, follow delivers new ones, and the stream ends when the instance stops', async (t) => {
  const { client, dataDir } = await startTestAgent(t, { stopGraceMs: 500 });
  // 1500 lines at once (more than the 1000-line ring), then one line per touch of the file "go".
  const cmd =
    `i=1; while [ $i -le 1500 ]; do echo "line $i"; i=$((i+1)); done; echo "err line" >&2; ` +
    `n=0; while true; do if [ -f go ]; then rm go; n=$((n+1)); echo "later $n"; fi; sleep 0.05; done`;
  await client.start({ instanceId: 'talker', startCommand: cmd, env: {} });
  await waitForState(client, 'talker', 'ready');
  const collect = async (tail: number) => {
    const lines: string[] = [];
    for await (const l of client.logs('talker', { tail })) lines.push(l);
    return lines;
  };
  await waitFor(async () => (await collect(1))[0] === 'err line');

  assert.deepEqual(await collect(3), ['line 1499', 'line 1500', 'err line'], 'stdout and stderr in one stream');
  assert.deepEqual(await collect(0), []);
  const all = await collect(1200);
  assert.equal(all.length, 1200, 'beyond the in-memory ring the history comes from the file');
  assert.equal(all[0], 'line 302');
  assert.equal(all.at(-1), 'err line');

  // Follow: the tail first, then lines as they are written.
  const followed: string[] = [];
  let ended = false;
  const following = (async () => {
    for await (const l of client.logs('talker', { tail: 2, follow: true })) followed.push(l);
    ended = true;
  })();
  await waitFor(() => followed.length === 2);
  assert.deepEqual(followed, ['line 1500', 'err line']);
  // The working directory of the instance is its own: touch "go" there.
  const instanceHome = join(`${dataDir}-instances`, 'homes', 'talker');
  writeFileSync(join(instanceHome, 'go'), '');
  await waitFor(() => followed.includes('later 1'));
  writeFileSync(join(instanceHome, 'go'), '');
  await waitFor(() => followed.includes('later 2'));
  assert.deepEqual(followed.slice(2), ['later 1', 'later 2'], 'no line lost or repeated between tail and follow');
  assert.equal(ended, false);

  await client.stop('talker');
  await following;
  assert.equal(ended, true, 'follow ends when the instance stops');

  // Logs stay readable after the stop; follow on a stopped instance returns the tail and ends.
  const after: string[] = [];
  for await (const l of client.logs('talker', { tail: 1, follow: true })) after.push(l);
  assert.deepEqual(after, ['later 2']);
});

test('leaving a follow loop cancels the stream on the agent', async (t) => {
  const { client } = await startTestAgent(t);
  await client.start({ instanceId: 'ticker', startCommand: 'while true; do echo tick; sleep 0.05; done' });
  await waitForState(client, 'ticker', 'ready');
  let n = 0;
  for await (const line of client.logs('ticker', { tail: 0, follow: true })) {
    assert.equal(line, 'tick');
    if (++n === 3) break;
  }
  assert.equal(n, 3);
  // The agent still serves calls normally afterwards.
  assert.equal((await client.list())[0]!.state, 'ready');
  const controller = new AbortController();
  const seen: string[] = [];
  setTimeout(() => controller.abort(), 300);
  for await (const line of client.logs('ticker', { tail: 1, follow: true, signal: controller.signal })) seen.push(line);
  assert.ok(seen.length >= 1, 'an aborted follow ends quietly');
});
