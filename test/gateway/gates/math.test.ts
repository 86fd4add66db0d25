import { test } from 'node:test';
import assert from 'node:assert/strict';
import { dayIndex, dayString, formatDuration, msToNextDay, normalizeEstimate, parseDay, retryAfterSeconds } from '../../../gateway/gates/math.js';

test('UTC days', () => {
  const noon = Date.UTC(2026, 1, 28, 12);
  assert.equal(dayString(dayIndex(noon)), '2026-02-28');
  assert.equal(msToNextDay(noon), 12 * 3600_000);
  assert.equal(msToNextDay(Date.UTC(2026, 0, 1)), 86_400_000);
  assert.equal(parseDay('2026-02-28'), dayIndex(noon));
  for (const bad of ['2026-02-29', '2026-13-01', '26-01-01', '2026-1-1', '', '2026-01-01T00:00:00Z']) assert.equal(parseDay(bad), undefined, bad);
});

test('Retry-After is whole seconds rounded up, at least 1', () => {
  assert.equal(retryAfterSeconds(0), 1);
  assert.equal(retryAfterSeconds(1), 1);
  assert.equal(retryAfterSeconds(1000), 1);
  assert.equal(retryAfterSeconds(1001), 2);
  assert.equal(retryAfterSeconds(59_999), 60);
});

test('estimates are whole non-negative token counts', () => {
  assert.equal(normalizeEstimate(Number.NaN), 0);
  assert.equal(normalizeEstimate(-4), 0);
  assert.equal(normalizeEstimate(2.1), 3);
  assert.equal(normalizeEstimate(Number.POSITIVE_INFINITY), 100_000_000_000);
});

test('reset durations read like the OpenAI headers', () => {
  assert.equal(formatDuration(0), '0s');
  assert.equal(formatDuration(60), '60ms');
  assert.equal(formatDuration(1000), '1s');
  assert.equal(formatDuration(1500), '1.5s');
  assert.equal(formatDuration(60_000), '1m0s');
  assert.equal(formatDuration(3_723_000), '1h2m3s');
});
