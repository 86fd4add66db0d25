// Issue 44: an instance's output is kept within files x fileBytes on the agent's disk (rotated,
// agent/log-file.ts), followers still get every line, and a tail that reaches past what is kept
// starts with "[older output dropped: N bytes]" (what the console's log view shows).
import assert from 'node:assert/strict';
import { appendFileSync, existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { droppedBytes, droppedLine } from '../../agent/log-file.js';
import { LogWatcher, readKeptLines } from '../../agent/logs.js';
import { waitFor } from '../helpers.js';
import { startTestAgent, tempDir, waitForState } from './harness.js';

/** `count` numbered lines of 100 bytes each (99 characters and a newline). */
function block(from: number, count: number): string {
  let s = '';
  for (let i = from; i < from + count; i++) s += `line ${String(i).padStart(8, '0')} ${'x'.repeat(85)}\n`;
  return s;
}

test('LogWatcher rotates past the cap, delivers every line, and counts what it deletes', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'instance.log');
  const cap = { fileBytes: 10_000, files: 3 };
  appendFileSync(file, block(0, 10));
  const w = new LogWatcher(file, cap, 50, 1_000_000);
  t.after(() => w.close());
  const got: string[] = [];
  w.tailAndFollow(0, { onLines: (l) => got.push(...l), onEnd: () => {} });
  let next = 10;
  // 12 polls of 100 lines (10,000 bytes) each: every poll finds the file at its cap and rotates.
  for (let round = 0; round < 12; round++) {
    appendFileSync(file, block(next, 100));
    next += 100;
    w.poll();
    assert.equal(statSync(file).size, 0, 'the live file is truncated once past its cap');
  }
  assert.equal(got.length, 1200, 'followers get every line, rotation or not');
  assert.equal(got[0], block(10, 1).trimEnd());
  assert.equal(got.at(-1), block(1209, 1).trimEnd());
  // On disk: the live file and 2 older copies (files: 3); the rest was deleted and counted.
  const files = readdirSync(dir).sort();
  assert.deepEqual(files, ['instance.log', 'instance.log.1', 'instance.log.2', 'instance.log.dropped']);
  const kept = statSync(`${file}.1`).size + statSync(`${file}.2`).size;
  assert.equal(kept, 20_000);
  const written = 10 * 100 + 1200 * 100;
  assert.equal(droppedBytes(file), written - kept, 'every byte written is kept or counted as dropped');
  // A tail within what is kept: no marker; past it: the marker first, then the oldest kept line.
  const last5 = readKeptLines(file, 5, cap);
  assert.deepEqual(last5, block(1205, 5).trimEnd().split('\n'));
  const all = readKeptLines(file, 1000, cap);
  assert.equal(all[0], droppedLine(written - kept));
  assert.equal(all[0], `[older output dropped: ${written - kept} bytes]`);
  assert.equal(all[1], block(1010, 1).trimEnd(), 'the oldest kept line follows the marker');
  assert.equal(all.length, 201);
  // The watcher's own tail past its ring says so too.
  const tail = w.tailAndFollow(500).lines;
  assert.equal(tail[0], droppedLine(written - kept));
});

test('process runtime: a flood is rotated within the cap and the logs API says what was dropped', async (t) => {
  const fileBytes = 64 * 1024;
  const { client, agent, dataDir } = await startTestAgent(t, { stopGraceMs: 500, logCap: { fileBytes, files: 2 } });
  // 40,000 lines of 50 bytes (2,000,000 bytes) from one process (seq: a shell loop took over a
  // minute on a loaded machine), then a last line.
  const cmd = `seq -f 'flood %08g ${'0'.repeat(34)}' 0 39999; echo quiet; exec sleep 600`;
  await client.start({ instanceId: 'flood', startCommand: cmd, env: {} });
  await waitForState(client, 'flood', 'ready');
  const collect = async (tail: number) => {
    const lines: string[] = [];
    for await (const l of client.logs('flood', { tail })) lines.push(l);
    return lines;
  };
  const file = join(dataDir, 'instances', 'flood', 'instance.log');
  await waitFor(async () => (await collect(1))[0] === 'quiet', 120_000);
  // Once quiet, the next poll leaves the live file under its cap; never more than 2 files.
  await waitFor(() => statSync(file).size < fileBytes, 10_000);
  assert.ok(!existsSync(`${file}.2`), 'no third file');
  const kept = statSync(file).size + statSync(`${file}.1`).size;
  const written = 40_000 * 50 + 'quiet\n'.length;
  const dropped = Number(readFileSync(`${file}.dropped`, 'utf8'));
  assert.ok(dropped > 0 && dropped + kept <= written, `dropped ${dropped} + kept ${kept} <= written ${written}`);
  assert.ok(kept < written / 2, `kept ${kept} of ${written}`);
  // Everything kept, from the agent's logs (StreamLogs serves at most 10,000 lines of it: what
  // is kept can be more, since a poll may find the file well past its cap).
  const lines = agent.supervisor.logs('flood', 1_000_000).lines;
  assert.equal(lines[0], `[older output dropped: ${dropped} bytes]`);
  assert.match(lines[1]!, /^flood \d{8} 0{34}$/);
  assert.equal(lines.at(-1), 'quiet');
  // Through the logs API (what the control plane's log stream and the console read): the marker
  // when the tail reaches past what is kept.
  const tail = await collect(10_000);
  assert.equal(tail.at(-1), 'quiet');
  if (lines.length <= 10_000) assert.equal(tail[0], lines[0]);
});

test('a poll that comes late (the file far past its cap) keeps only its last fileBytes, from a line start, and counts the rest', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'instance.log');
  const cap = { fileBytes: 10_000, files: 2 };
  const w = new LogWatcher(file, cap, 50, 1_000_000);
  t.after(() => w.close());
  // 50,050 bytes before the watcher looks at all: 5 caps and a half line over.
  appendFileSync(file, block(0, 500) + 'x'.repeat(49) + '\n');
  w.poll();
  const copy = readFileSync(`${file}.1`, 'utf8');
  assert.ok(copy.length <= cap.fileBytes, `the copy holds ${copy.length} bytes`);
  assert.match(copy, /^line \d{8} x{85}\n/, 'the copy starts with a whole line');
  assert.equal(droppedBytes(file) + copy.length, 50_050, 'every byte is kept or counted as dropped');
  assert.equal(readKeptLines(file, 1000, cap)[0], droppedLine(droppedBytes(file)));
});
