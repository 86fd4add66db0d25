// lib/held-limits.ts: each bound refuses past its limit naming its setting, and with addresses
// read lazily (the model gateway's streams) no address ever holds more than its bound, whatever
// the order of takes and gives; everything given back leaves nothing behind.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { HeldLimits } from '../../lib/held-limits.js';

const NAMES = { perAccount: 'RC_A', perAddress: 'RC_B', perInstance: 'RC_C' };

test('each bound refuses past its limit, instance first, and names its setting', () => {
  const h = new HeldLimits('things', { perAccount: 2, perAddress: 3, perInstance: 1 }, NAMES, 7);
  assert.equal(h.take(1, 'x', 'i1'), undefined);
  const instance = h.take(1, 'x', 'i1');
  assert.equal(instance?.message, 'Too many things for this instance: at most 1 (RC_C); wait for one to end');
  assert.equal(instance?.retryAfterSec, 7);
  assert.equal(h.take(1, 'x', 'i2'), undefined);
  assert.equal(h.take(1, 'x', 'i3')?.message, 'Too many things for this account: at most 2 (RC_A); wait for one to end');
  assert.equal(h.take(2, 'x', 'i3'), undefined);
  assert.equal(h.take(3, 'x', 'i4')?.message, 'Too many things from this address: at most 3 (RC_B); wait for one to end');
  assert.deepEqual(h.held(), { accounts: 2, addresses: 1, instances: 3, total: 3 });
  h.give(1, 'x', 'i1');
  h.give(1, 'x', 'i2');
  h.give(2, 'x', 'i3');
  assert.deepEqual(h.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
});

test('lazy addresses: none read below half the bound, and no address ever holds more than the bound', () => {
  for (const perAddress of [1, 2, 3, 8, 9]) {
    const h = new HeldLimits('streams', { perAccount: 1000, perAddress, lazyAddresses: true }, NAMES, 5);
    const open: { account: number; address: string; counted: string | undefined }[] = [];
    let seed = perAddress;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    for (let step = 0; step < 5000; step++) {
      if (open.length > 0 && random() < 0.45) {
        const [s] = open.splice(Math.floor(random() * open.length), 1);
        h.give(s!.account, s!.counted);
        continue;
      }
      const address = random() < 0.7 ? 'a' : random() < 0.5 ? 'b' : 'c';
      const counted = h.needsAddress ? address : undefined;
      if (h.held().total < Math.floor(perAddress / 2)) assert.equal(counted, undefined, 'an address read below half the bound');
      const account = Math.floor(random() * 20);
      if (h.take(account, counted) === undefined) open.push({ account, address, counted });
      const fromA = open.filter((s) => s.address === address).length;
      assert.ok(fromA <= perAddress, `${address} holds ${fromA} > ${perAddress}`);
    }
    // Everything given back leaves nothing; then one address alone gets exactly its bound.
    for (const s of open.splice(0)) h.give(s.account, s.counted);
    assert.deepEqual(h.held(), { accounts: 0, addresses: 0, instances: 0, total: 0 });
    let held = 0;
    while (h.take(held, h.needsAddress ? 'a' : undefined) === undefined) held++;
    assert.equal(held, perAddress, `one address alone gets its whole bound (${perAddress})`);
  }
});
