// within (lib/within.ts): a promise's outcome, or TIMED_OUT once its deadline passes first.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { TIMED_OUT, within } from '../../lib/within.js';

test('a promise that settles in time: its value, or its rejection as it was', async () => {
  assert.equal(await within(Promise.resolve(7), 1000), 7);
  const err = new Error('refused');
  await assert.rejects(within(Promise.reject(err), 1000), (e) => e === err);
});

test('a promise that settles too late: TIMED_OUT, and its later rejection is not unhandled', async () => {
  assert.equal(
    await within(
      sleep(200).then(() => 7),
      20,
    ),
    TIMED_OUT,
  );
  assert.equal(
    await within(
      sleep(50).then(() => Promise.reject(new Error('late'))),
      10,
    ),
    TIMED_OUT,
  );
  await sleep(80); // the late rejection happens here; node:test fails the file on an unhandled one
});

test('the deadline keeps no timer alive once the promise settled', async () => {
  const before = process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length;
  await within(Promise.resolve(1), 60_000);
  assert.equal(process.getActiveResourcesInfo().filter((r) => r === 'Timeout').length, before);
});
