// Per-account limits: defaults, overrides, and following the bus (events with limits, or a lookup).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MemoryBus } from '../../../lib/bus.js';
import { ConfigError } from '../../../lib/errors.js';
import { AccountLimits } from '../../../gateway/gates/index.js';
import { waitFor } from '../../helpers.js';

const DEFAULTS = { rpm: 600, tpm: 1_000_000, dailyTokens: 10_000_000 };

test('overrides replace single fields; null or nothing goes back to the defaults', () => {
  const l = new AccountLimits(DEFAULTS);
  assert.deepEqual(l.get(1), DEFAULTS);
  l.set(1, { rpm: 5 });
  assert.deepEqual(l.get(1), { ...DEFAULTS, rpm: 5 });
  assert.deepEqual(l.get(2), DEFAULTS);
  l.set(1, { rpm: null, tpm: 10 });
  assert.deepEqual(l.get(1), { ...DEFAULTS, tpm: 10 });
  l.set(1, {});
  assert.deepEqual(l.get(1), DEFAULTS);
  l.load([
    [3, { dailyTokens: 7 }],
    [4, null],
  ]);
  assert.deepEqual(l.get(3), { ...DEFAULTS, dailyTokens: 7 });
  assert.deepEqual(l.get(4), DEFAULTS);
});

test('bad limits are refused', () => {
  const l = new AccountLimits(DEFAULTS);
  for (const bad of [{ rpm: 0 }, { rpm: -1 }, { tpm: 1.5 }, { tpm: 1e12 }, { dailyTokens: Number.NaN }, { rpm: '5' }, { burst: 3 }]) {
    assert.throws(() => l.set(1, bad as never), Error, JSON.stringify(bad));
  }
  assert.deepEqual(l.get(1), DEFAULTS, 'a refused override changes nothing');
  assert.throws(() => new AccountLimits({ ...DEFAULTS, tpm: 0 }), ConfigError);
});

test('account.changed events carry limits, or trigger the lookup', async () => {
  const bus = new MemoryBus();
  const l = new AccountLimits(DEFAULTS);
  const errors: number[] = [];
  const stored = new Map<number, { rpm?: number }>([[8, { rpm: 8 }]]);
  const unfollow = l.follow(
    bus,
    (id) => stored.get(id),
    (_err, id) => errors.push(id),
  );

  await bus.publish({ type: 'account.changed', accountId: 7, limits: { tpm: 70 } });
  assert.equal(l.get(7).tpm, 70);
  await bus.publish({ type: 'account.changed', accountId: 8 });
  await waitFor(() => l.get(8).rpm === 8);
  await bus.publish({ type: 'account.changed', accountId: 7, limits: null });
  assert.deepEqual(l.get(7), DEFAULTS);
  await bus.publish({ type: 'account.changed', accountId: 9, limits: { rpm: -3 } });
  assert.deepEqual(errors, [9]);
  assert.deepEqual(l.get(9), DEFAULTS);
  await bus.publish({ type: 'key.revoked', keyHash: 'x', accountId: 7 });

  unfollow();
  await bus.publish({ type: 'account.changed', accountId: 7, limits: { rpm: 1 } });
  assert.deepEqual(l.get(7), DEFAULTS, 'no longer following');
  await bus.close();
});
