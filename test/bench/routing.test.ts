// The routing benchmark's harness (bench/routing/) on a small shape: every policy runs the
// conversations and the burst through real gateways and sims with no request failing, and the
// figures the table reports come from real counters. Figures are reported, never asserted as
// speeds: only what holds by construction (counts, shares within 0..1) is checked.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { runRouting } from '../../bench/routing/run.js';
import { POLICIES, routingEngine } from '../../bench/routing/stack.js';
import { burst, conversations, routingTraffic } from '../../bench/routing/traffic.js';
import { countChatTokens } from '../../sim/tokenizer.js';

const shape = routingTraffic({ conversations: 4, turns: 3, prefixTokens: 600, userTokens: 40, replyTokens: 8, burst: 4 });

test('traffic: conversations share one system prompt, speak both protocols and grow by a user turn and a reply', () => {
  const cs = conversations(shape);
  assert.deepEqual(
    cs.map((c) => c.protocol),
    ['chat', 'messages', 'chat', 'messages'],
  );
  assert.equal(new Set(cs.map((c) => c.system)).size, 1);
  const c = cs[0]!;
  c.nextTurn(0);
  const first = countChatTokens(c.chatBody().messages as never);
  c.nextTurn(1);
  const second = countChatTokens(c.chatBody().messages as never);
  assert.ok(first >= shape.prefixTokens, 'the shared prefix is at least prefixTokens sim tokens');
  assert.ok(second - first >= shape.userTokens + shape.replyTokens, 'a turn adds the reply and the next user turn');
  assert.equal(cs[1]!.messagesBody().metadata && (cs[1]!.messagesBody().metadata as { user_id: string }).user_id, 'user-1');
  assert.notEqual(burst(shape)[0]!.system, c.system, 'the burst has a hot prefix of its own');
});

test('every policy runs the conversations and the burst with no failure, with figures from the sims', async () => {
  const results = await runRouting(POLICIES, shape, routingEngine({ sims: 2, ttftMs: 1, tokensPerSecond: 5000, prefillTokensPerSecond: 1e6 }));
  assert.deepEqual(
    results.map((r) => r.policy),
    [...POLICIES],
  );
  for (const r of results) {
    assert.equal(r.requests, shape.conversations * shape.turns + shape.burst, r.policy);
    assert.equal(r.failed, 0, r.policy);
    assert.ok(r.hitShare > 0 && r.hitShare < 1, `${r.policy}: hit share ${r.hitShare}`);
    assert.ok(r.ttftP50Ms > 0 && r.ttftP99Ms >= r.ttftP50Ms, r.policy);
    // The sims' own figures: every generation's, and the chat conversations' from their answers.
    assert.ok(r.engineTtftP50Ms > 0 && r.engineTtftP99Ms >= r.engineTtftP50Ms, `${r.policy}: engine ${r.engineTtftP50Ms}`);
    assert.ok(r.engineTtftP50ChatMs > 0, `${r.policy}: chat engine ${r.engineTtftP50ChatMs}`);
    assert.ok(r.imbalance >= 1 && r.burstImbalance >= 1, r.policy);
    assert.ok(r.agreement !== undefined && r.agreement >= 0 && r.agreement <= 1, `${r.policy}: the sims named themselves`);
  }
});
