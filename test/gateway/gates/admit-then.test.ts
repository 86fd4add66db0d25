// LimitGate.admitThen (gate.ts RequestGate.admitThen): the decision through a callback, with the
// caller's context, the same as admit()'s, in memory and in Redis; the limit headers follow a
// change of the account's limits.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { GateDecision, GateRequest } from '../../../gateway/gates/gate.js';
import type { LimitGate } from '../../../gateway/gates/index.js';
import { makeGate, req, type StoreKind } from './fixtures.js';

const BIG = 100_000_000_000; // past 2^31: a double

function decide(gate: LimitGate, request: GateRequest): Promise<{ ctx: object; decision: GateDecision }> {
  const ctx = { request };
  return new Promise((resolve) => gate.admitThen(request, ctx, (c, decision) => resolve({ ctx: c, decision })));
}

for (const kind of ['memory', 'redis'] as StoreKind[]) {
  describe(`LimitGate.admitThen (${kind} store)`, () => {
    test('calls back with its context and the decision admit() gives, refusals included', async (t) => {
      const g = await makeGate(t, kind, { rpm: 2, tpm: BIG, daily: BIG });
      if (!g) return;
      const first = await decide(g.gate, req(1, 10));
      assert.equal((first.ctx as { request: GateRequest }).request.accountId, 1);
      assert.equal(first.decision.allowed, true);
      assert.equal(first.decision.headers['x-ratelimit-limit-requests'], '2');
      assert.equal(first.decision.headers['x-ratelimit-limit-tokens'], String(BIG));
      assert.equal(first.decision.headers['x-ratelimit-remaining-requests'], '1');
      const second = await g.gate.admit(req(1, 10));
      assert.equal(second.allowed, true);
      const third = await decide(g.gate, req(1, 10));
      assert.equal(third.decision.allowed, false);
      if (!third.decision.allowed) assert.equal(third.decision.code, 'request_rate_limit_exceeded');
      // New limits for the account: its headers say so on the next decision.
      g.limits.set(1, { rpm: 100, tpm: 5000 });
      const after = await decide(g.gate, req(1, 10));
      assert.equal(after.decision.headers['x-ratelimit-limit-requests'], '100');
      assert.equal(after.decision.headers['x-ratelimit-limit-tokens'], '5000');
      // Another account, on the defaults again.
      const other = await decide(g.gate, req(2, 10));
      assert.equal(other.decision.headers['x-ratelimit-limit-requests'], '2');
      assert.equal(other.decision.headers['x-ratelimit-limit-tokens'], String(BIG));
    });
  });
}
