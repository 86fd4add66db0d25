// Bucket maths, Retry-After, reconciliation and the daily cap: the same scenarios against the
// memory store and against real Redis, both on a fake clock (which the Redis script then uses
// instead of Redis TIME).
import { describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { admitted, denied, makeGate, req, type StoreKind } from './fixtures.js';
import { type HourUsage, InvalidDayError } from '../../../gateway/gates/index.js';

const BIG = 1_000_000_000;

for (const kind of ['memory', 'redis'] as StoreKind[]) {
  describe(`gates (${kind} store)`, () => {
    test('the request bucket admits rpm requests, then refuses with the exact wait', async (t) => {
      const g = await makeGate(t, kind, { rpm: 3, tpm: BIG, daily: BIG });
      if (!g) return;
      for (let i = 0; i < 3; i++) admitted(await g.gate.admit(req(1, 10)));
      const d = denied(await g.gate.admit(req(1, 10)));
      assert.equal(d.code, 'request_rate_limit_exceeded');
      assert.equal(d.retryAfterSec, 20); // 3 per minute: one every 20 s
      assert.equal(d.headers['x-ratelimit-remaining-requests'], '0');
      assert.equal(d.headers['x-ratelimit-limit-requests'], '3');
      g.clock.advance(19_000);
      assert.equal(denied(await g.gate.admit(req(1, 10))).retryAfterSec, 1);
      g.clock.advance(999);
      assert.equal(denied(await g.gate.admit(req(1, 10))).retryAfterSec, 1, 'one millisecond short still waits a whole second');
      g.clock.advance(1);
      admitted(await g.gate.admit(req(1, 10)));
      // Another account has its own buckets.
      admitted(await g.gate.admit(req(2, 10)));
    });

    test('the token bucket reserves the estimate and refuses with the exact wait', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: 600, daily: BIG }); // 10 tokens per second
      if (!g) return;
      const first = admitted(await g.gate.admit(req(1, 100)));
      assert.equal(first.headers['x-ratelimit-limit-tokens'], '600');
      assert.equal(first.headers['x-ratelimit-remaining-tokens'], '500');
      assert.equal(first.headers['x-ratelimit-reset-tokens'], '10s');
      assert.equal(first.headers['x-ratelimit-remaining-requests'], '999');
      assert.equal(first.headers['x-ratelimit-reset-requests'], '60ms');
      for (let i = 0; i < 5; i++) admitted(await g.gate.admit(req(1, 100)));
      const d = denied(await g.gate.admit(req(1, 100)));
      assert.equal(d.code, 'token_rate_limit_exceeded');
      assert.equal(d.retryAfterSec, 10);
      assert.equal(d.headers['x-ratelimit-remaining-tokens'], '0');
      assert.equal(d.headers['x-ratelimit-reset-tokens'], '1m0s');
      // A smaller request fits sooner: 15 tokens need 1.5 s.
      assert.equal(denied(await g.gate.admit(req(1, 15))).retryAfterSec, 2);
      g.clock.advance(9_999);
      assert.equal(denied(await g.gate.admit(req(1, 100))).retryAfterSec, 1);
      g.clock.advance(1);
      admitted(await g.gate.admit(req(1, 100)));
      denied(await g.gate.admit(req(1, 1)));
    });

    test('when several gates refuse, Retry-After is the longest wait and the code names that gate', async (t) => {
      const g = await makeGate(t, kind, { rpm: 2, tpm: 20, daily: BIG });
      if (!g) return;
      admitted(await g.gate.admit(req(1, 20)));
      admitted(await g.gate.admit(req(1, 0)));
      const d = denied(await g.gate.admit(req(1, 20))); // requests: 30 s, tokens: 60 s
      assert.equal(d.code, 'token_rate_limit_exceeded');
      assert.equal(d.retryAfterSec, 60);
      g.clock.advance(30_000); // 1 request and 10 tokens back
      const d2 = denied(await g.gate.admit(req(1, 20)));
      assert.equal(d2.code, 'token_rate_limit_exceeded');
      assert.equal(d2.retryAfterSec, 30);
      admitted(await g.gate.admit(req(1, 0)));
      const r = denied(await g.gate.admit(req(1, 5))); // tokens suffice, requests empty
      assert.equal(r.code, 'request_rate_limit_exceeded');
      assert.equal(r.retryAfterSec, 30);
    });

    test('an estimate above the bucket passes a full bucket and leaves a debt', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: 600, daily: BIG });
      if (!g) return;
      admitted(await g.gate.admit(req(1, 1200)));
      const d = denied(await g.gate.admit(req(1, 60)));
      // Level is -600 tokens; 60 needed: 660 tokens at 10/s.
      assert.equal(d.retryAfterSec, 66);
      assert.equal(d.headers['x-ratelimit-remaining-tokens'], '0');
    });

    test('reconciliation refunds what the request did not use (an early end)', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: 1000, daily: BIG });
      if (!g) return;
      const r1 = req(1, 1000);
      const a = admitted(await g.gate.admit(r1));
      denied(await g.gate.admit(req(1, 900)));
      g.gate.settle(r1, a, { inputTokens: 60, outputTokens: 40 }); // stream cut short after 40 tokens
      await settled(g.gate, 1, 100);
      admitted(await g.gate.admit(req(1, 900)));
      denied(await g.gate.admit(req(1, 1)));
    });

    test('reconciliation charges usage beyond the estimate, once', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: 600, daily: BIG });
      if (!g) return;
      const r1 = req(1, 100);
      const a = admitted(await g.gate.admit(r1));
      g.gate.settle(r1, a, { inputTokens: 100, outputTokens: 500 }); // 600 used: 500 more than reserved
      g.gate.settle(r1, a, { inputTokens: 100, outputTokens: 500 }); // a second settle is ignored
      await settled(g.gate, 1, 600);
      const d = denied(await g.gate.admit(req(1, 60)));
      assert.equal(d.retryAfterSec, 6);
      g.clock.advance(6_000);
      admitted(await g.gate.admit(req(1, 60)));
    });

    test('a response without usage returns the whole reservation', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: 600, daily: 1000 });
      if (!g) return;
      const r1 = req(1, 600);
      const a = admitted(await g.gate.admit(r1));
      g.gate.settle(r1, a, undefined);
      await waitUsage(g.gate, 1, (u) => u.tokens_reserved === 0);
      admitted(await g.gate.admit(req(1, 600)));
      const u = await g.gate.readUsage(1);
      assert.equal(u.requests, 2);
      assert.equal(u.tokens_used, 0);
      assert.equal(u.tokens_reserved, 600);
    });

    test('the daily cap counts reservations, refuses until the next UTC day, then resets', async (t) => {
      const start = Date.UTC(2026, 0, 1, 23, 0, 0); // one hour before midnight
      const g = await makeGate(t, kind, { rpm: 1000, tpm: BIG, daily: 1000 });
      if (!g) return;
      g.clock.set(start);
      const r1 = req(7, 400, 'sim-chat');
      const r2 = req(7, 400, 'sim-reasoner');
      const a1 = admitted(await g.gate.admit(r1));
      const a2 = admitted(await g.gate.admit(r2));
      const d = denied(await g.gate.admit(req(7, 400)));
      assert.equal(d.code, 'daily_token_cap_exceeded');
      assert.equal(d.retryAfterSec, 3600);
      g.gate.settle(r1, a1, { inputTokens: 50, outputTokens: 50 });
      // 80 of the 100 prompt tokens came from the prefix cache: they count fully (tokens_used 400).
      g.gate.settle(r2, a2, { inputTokens: 100, outputTokens: 200, cachedTokens: 80 });
      await settled(g.gate, 7, 400);
      admitted(await g.gate.admit(req(7, 600))); // 400 used + 600 reserved = the cap
      const full = denied(await g.gate.admit(req(7, 1)));
      assert.equal(full.code, 'daily_token_cap_exceeded');
      g.clock.advance(3_599_001);
      assert.equal(denied(await g.gate.admit(req(7, 1))).retryAfterSec, 1);
      const before = await g.gate.readUsage(7);
      assert.deepEqual(before, {
        day: '2026-01-01',
        daily_cap: 1000,
        tokens_used: 400,
        tokens_reserved: 600,
        tokens_remaining: 0,
        requests: 3,
        resets_at: '2026-01-02T00:00:00.000Z',
        by_model: {
          'sim-chat': { requests: 2, input_tokens: 50, output_tokens: 50, cached_input_tokens: 0 },
          'sim-reasoner': { requests: 1, input_tokens: 100, output_tokens: 200, cached_input_tokens: 80 },
        },
        by_hour: hours({
          23: { tokens: 400, requests: 2, by_model: { 'sim-chat': { tokens: 100, requests: 1 }, 'sim-reasoner': { tokens: 300, requests: 1 } } },
        }),
      });
      g.clock.advance(999); // midnight UTC
      admitted(await g.gate.admit(req(7, 1000)));
      const today = await g.gate.readUsage(7);
      assert.equal(today.day, '2026-01-02');
      assert.equal(today.tokens_reserved, 1000);
      assert.equal(today.requests, 1);
      assert.deepEqual(await g.gate.readUsage(7, '2026-01-01'), before, 'the previous day stays readable');
      const empty = await g.gate.readUsage(8, '2025-12-31');
      assert.equal(empty.tokens_used, 0);
      assert.deepEqual(empty.by_model, {});
    });

    test('usage by hour: finished requests count in the UTC hour they were admitted in, per model', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: BIG, daily: BIG });
      if (!g) return;
      g.clock.set(Date.UTC(2026, 0, 1, 10, 59, 59));
      const late = req(3, 100, 'org:model-a'); // a colon in the name: the Redis fields hold it
      const a1 = admitted(await g.gate.admit(late));
      g.clock.advance(2_000); // 11:00:01: settled in the next hour, counted in the hour of admission
      g.gate.settle(late, a1, { inputTokens: 30, outputTokens: 12 });
      const r2 = req(3, 100, 'sim-chat');
      const a2 = admitted(await g.gate.admit(r2));
      g.gate.settle(r2, a2, { inputTokens: 5, outputTokens: 5 });
      const failed = req(3, 100, 'sim-chat');
      g.gate.settle(failed, admitted(await g.gate.admit(failed)), undefined); // no usage: a request, no tokens
      admitted(await g.gate.admit(req(3, 100, 'sim-chat'))); // in flight: not in by_hour yet
      g.clock.set(Date.UTC(2026, 0, 1, 23, 59, 59));
      const r3 = req(3, 100, 'sim-chat');
      const a3 = admitted(await g.gate.admit(r3));
      g.clock.advance(2_000); // after midnight: still the previous day's hour 23
      g.gate.settle(r3, a3, { inputTokens: 1, outputTokens: 2 });
      const u = await waitUsage(g.gate, 3, (x) => x.tokens_used === 55, '2026-01-01');
      assert.equal(u.requests, 5);
      assert.deepEqual(
        u.by_hour,
        hours({
          10: { tokens: 42, requests: 1, by_model: { 'org:model-a': { tokens: 42, requests: 1 } } },
          11: { tokens: 10, requests: 2, by_model: { 'sim-chat': { tokens: 10, requests: 2 } } },
          23: { tokens: 3, requests: 1, by_model: { 'sim-chat': { tokens: 3, requests: 1 } } },
        }),
      );
      assert.deepEqual((await g.gate.readUsage(3)).by_hour, hours({}), 'the new day starts empty');
    });

    test('an estimate above the daily cap passes only an unused day', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: BIG, daily: 100 });
      if (!g) return;
      const r1 = req(1, 500);
      const a = admitted(await g.gate.admit(r1));
      denied(await g.gate.admit(req(1, 500)));
      g.gate.settle(r1, a, undefined);
      await waitUsage(g.gate, 1, (u) => u.tokens_reserved === 0);
      admitted(await g.gate.admit(req(1, 500)));
    });

    test('bad estimates and usage are normalised, never poison the buckets', async (t) => {
      const g = await makeGate(t, kind, { rpm: 1000, tpm: 100, daily: 1000 });
      if (!g) return;
      for (const est of [Number.NaN, -5, 0, Number.NEGATIVE_INFINITY]) {
        const r = req(1, est);
        const a = admitted(await g.gate.admit(r));
        g.gate.settle(r, a, { inputTokens: Number.NaN, outputTokens: -3 });
      }
      const a = admitted(await g.gate.admit(req(1, 0.2))); // rounds up to 1 token
      assert.equal(a.headers['x-ratelimit-remaining-tokens'], '99');
      const u = await waitUsage(g.gate, 1, (x) => x.tokens_reserved === 1);
      assert.equal(u.tokens_used, 0);
      await assert.rejects(g.gate.readUsage(1, '2026-02-30'), InvalidDayError);
      await assert.rejects(g.gate.readUsage(1, 'yesterday'), InvalidDayError);
    });

    test('lowered limits take effect at once; raised ones refill from the current level', async (t) => {
      const g = await makeGate(t, kind, { rpm: 10, tpm: BIG, daily: BIG });
      if (!g) return;
      admitted(await g.gate.admit(req(3, 1)));
      g.limits.set(3, { rpm: 2 }); // as `rc account set-limits` would
      const a = admitted(await g.gate.admit(req(3, 1)));
      assert.equal(a.headers['x-ratelimit-limit-requests'], '2');
      assert.equal(a.headers['x-ratelimit-remaining-requests'], '1');
      admitted(await g.gate.admit(req(3, 1)));
      assert.equal(denied(await g.gate.admit(req(3, 1))).retryAfterSec, 30);
      g.limits.set(3, null); // back to 10 per minute: one every 6 s
      assert.equal(denied(await g.gate.admit(req(3, 1))).retryAfterSec, 6);
      g.clock.advance(6_000);
      const back = admitted(await g.gate.admit(req(3, 1)));
      assert.equal(back.headers['x-ratelimit-limit-requests'], '10');
      assert.equal(back.headers['x-ratelimit-remaining-requests'], '0');
    });
  });
}

/** Waits until account's settled tokens reach `tokens` (Redis reconciliation is fire-and-forget). */
async function settled(gate: import('../../../gateway/gates/index.js').LimitGate, accountId: number, tokens: number) {
  await waitUsage(gate, accountId, (u) => u.tokens_used === tokens);
}

async function waitUsage(
  gate: import('../../../gateway/gates/index.js').LimitGate,
  accountId: number,
  ok: (u: import('../../../gateway/gates/index.js').ModelUsage) => boolean,
  day?: string,
) {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const u = await gate.readUsage(accountId, day);
    if (ok(u)) return u;
    if (Date.now() > deadline) throw new Error(`usage not reached: ${JSON.stringify(u)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** The 24 entries of `by_hour`: those given, the other hours empty. */
function hours(given: Record<number, Omit<HourUsage, 'hour'>>): HourUsage[] {
  return Array.from({ length: 24 }, (_, hour) => ({ hour, ...(given[hour] ?? { tokens: 0, requests: 0, by_model: {} }) }));
}
