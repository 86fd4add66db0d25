// Small pure pieces of the agent: log lines, /proc parsing, spec validation and hashing, event replay.
import assert from 'node:assert/strict';
import { appendFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { normalizeSpec, infoFromPb, infoToPb } from '../../agent/convert.js';
import { EventHub } from '../../agent/events.js';
import { LogWatcher, readLastLines, RingBuffer, splitLines } from '../../agent/logs.js';
import { isAlive, parseProcStat, readProcStat } from '../../agent/procfs.js';
import { redactSpec, specHash, validateSpec } from '../../agent/spec.js';
import type { InstanceEvent, InstanceInfo } from '../../agent/types.js';
import { tempDir } from './harness.js';

test('ring buffer keeps the most recent lines in order', () => {
  const r = new RingBuffer(3);
  assert.deepEqual(r.last(5), []);
  for (const x of ['a', 'b', 'c', 'd', 'e']) r.push(x);
  assert.deepEqual(r.last(5), ['c', 'd', 'e']);
  assert.deepEqual(r.last(2), ['d', 'e']);
});

test('splitLines keeps partial lines, strips CR, splits very long lines', () => {
  const out: string[] = [];
  let rest = splitLines('', 'one\r\ntw', out);
  rest = splitLines(rest, 'o\n\nthree', out);
  assert.deepEqual(out, ['one', 'two', '']);
  assert.equal(rest, 'three');
  const long: string[] = [];
  splitLines('', 'x'.repeat(40_000) + '\n', long);
  assert.deepEqual(
    long.map((l) => l.length),
    [16384, 16384, 7232],
  );
});

test('readLastLines and LogWatcher read a file tail and follow appends', (t) => {
  const dir = tempDir(t);
  const file = join(dir, 'log');
  assert.deepEqual(readLastLines(file, 5), [], 'a missing file has no lines');
  writeFileSync(file, 'a\nb\nc\npartial');
  assert.deepEqual(readLastLines(file, 2), ['c', 'partial']);
  const w = new LogWatcher(file, undefined, 10, 10_000);
  t.after(() => w.close());
  const got: string[] = [];
  let ended = false;
  const { lines } = w.tailAndFollow(10, {
    onLines: (l) => got.push(...l),
    onEnd: () => {
      ended = true;
    },
  });
  assert.deepEqual(lines, ['a', 'b', 'c'], 'complete lines only: the partial one comes whole, later');
  appendFileSync(file, ' done\nnext\n');
  w.poll();
  assert.deepEqual(got, ['partial done', 'next']);
  w.close();
  assert.equal(ended, true);
});

test('/proc/PID/stat parsing survives spaces and parentheses in the command name', () => {
  const stat = parseProcStat('42 (my (odd) proc) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10 18446744073709551615');
  assert.deepEqual(stat, { pid: 42, state: 'S', ppid: 1, pgrp: 42, startTime: '987654' });
  assert.equal(parseProcStat('garbage'), undefined);
  const me = readProcStat(process.pid)!;
  assert.equal(me.pid, process.pid);
  assert.ok(isAlive(process.pid, me.startTime));
  assert.equal(isAlive(process.pid, String(Number(me.startTime) + 1)), false, 'a different start time is a different process');
});

test('spec hash ignores key order and sees every field; redaction drops file contents', () => {
  const a = normalizeSpec({ instanceId: 'x', env: { A: '1', B: '2' }, files: { 'id/key': 'secret' } });
  const b = normalizeSpec({ instanceId: 'x', env: { B: '2', A: '1' }, files: { 'id/key': 'secret' } });
  assert.equal(specHash(a), specHash(b));
  assert.notEqual(specHash(a), specHash({ ...a, files: { 'id/key': new TextEncoder().encode('other') } }));
  assert.notEqual(specHash(a), specHash({ ...a, gpuCount: 1 }));
  assert.deepEqual(redactSpec(a).files, { 'id/key': new Uint8Array() });
  assert.equal(validateSpec(a), a);
});

test('instance info survives the protobuf round trip', () => {
  const info: InstanceInfo = {
    instanceId: 'x',
    state: 'failed',
    message: 'm',
    reason: 'exited',
    detail: 'd',
    seq: 12,
    createdAtMs: 1,
    updatedAtMs: 2,
    runtime: 'process',
    gpus: [1, 3],
    endpoints: [{ port: 8000, host: '10.0.0.2', hostPort: 40000 }],
    spec: normalizeSpec({ instanceId: 'x', ports: [8000], env: { A: 'b' } }),
    runtimeId: '99',
  };
  assert.deepEqual(infoFromPb(infoToPb(info)), info);
});

test('event replay: events after a sequence number, or nothing when the buffer lost some', () => {
  const hub = new EventHub(3);
  const ev = (seq: number): InstanceEvent => ({ instanceId: 'x', state: 'pending', message: '', reason: '', detail: '', seq, timeMs: seq });
  for (let s = 1; s <= 6; s++) hub.publish(ev(s));
  assert.deepEqual(
    hub.since(4)?.map((e) => e.seq),
    [5, 6],
  );
  assert.equal(hub.since(0), undefined, 'events 1.. are no longer all buffered');
});
