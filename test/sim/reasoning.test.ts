// A reasoning model through the official openai client: `reasoning` in the message and in deltas
// (current vLLM's name; reasoning_content is gone since PR #33402, the older eras are in
// flavours.test.ts), before the answer; reasoning_effort scales the reasoning.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import type { SimServer } from '../../sim/server.js';
import { countTokens } from '../../sim/tokenizer.js';
import { simWithClient, user } from './sim-helpers.js';

let sim: SimServer;
let client: OpenAI;
before(async () => ({ sim, client } = await simWithClient({ model: 'thinker', reasoning: true })));
after(() => sim.close());

test('non-stream: reasoning carries the reasoning; usage counts it', async () => {
  const r = await client.chat.completions.create({ model: 'thinker', messages: [user('why?')] });
  const m = r.choices[0]!.message as any;
  assert.equal(typeof m.reasoning, 'string');
  assert.ok(m.reasoning.length > 0);
  assert.ok(!('reasoning_content' in m));
  assert.ok(m.content.length > 0);
  assert.equal(r.usage!.completion_tokens, countTokens(m.reasoning) + countTokens(m.content));
  assert.equal(r.choices[0]!.finish_reason, 'stop');
});

async function reasoningTokens(effort?: string): Promise<number> {
  const body: Record<string, unknown> = { model: 'thinker', messages: [user('effort')], seed: 1 };
  if (effort) body.reasoning_effort = effort;
  const r = (await client.chat.completions.create(body as any)) as OpenAI.Chat.Completions.ChatCompletion;
  return countTokens((r.choices[0]!.message as any).reasoning ?? '');
}

test('reasoning_effort: more reasoning for higher effort; medium is the default', async () => {
  const low = await reasoningTokens('low');
  const medium = await reasoningTokens('medium');
  const high = await reasoningTokens('high');
  assert.ok(low > 0 && low < medium && medium < high, `${low} < ${medium} < ${high}`);
  assert.equal(await reasoningTokens(), medium);
  assert.equal(await reasoningTokens('none'), 0);
});

test('chat_template_kwargs.enable_thinking false turns reasoning off', async () => {
  const r = (await client.chat.completions.create({
    model: 'thinker',
    messages: [user('x')],
    chat_template_kwargs: { enable_thinking: false },
  } as any)) as OpenAI.Chat.Completions.ChatCompletion;
  assert.equal((r.choices[0]!.message as any).reasoning, null);
});

test('stream: reasoning deltas first, then content deltas, each one token', async () => {
  const kinds: string[] = [];
  let reasoning = '';
  let content = '';
  const stream = await client.chat.completions.create({ model: 'thinker', messages: [user('why?')], reasoning_effort: 'low', stream: true });
  for await (const c of stream) {
    const d = c.choices[0]?.delta as any;
    if (!d) continue;
    if (d.reasoning) {
      assert.ok(!('reasoning_content' in d));
      assert.equal(countTokens(d.reasoning), 1);
      reasoning += d.reasoning;
      kinds.push('r');
    } else if (d.content) {
      content += d.content;
      kinds.push('c');
    }
  }
  assert.ok(reasoning.length > 0 && content.length > 0);
  assert.equal(kinds.join('').replace(/^r+c+$/, 'ok'), 'ok', 'all reasoning before any content');
  const whole = await client.chat.completions.create({ model: 'thinker', messages: [user('why?')], reasoning_effort: 'low' });
  assert.equal((whole.choices[0]!.message as any).reasoning, reasoning);
  assert.equal(whole.choices[0]!.message.content, content);
});

test('max_tokens smaller than the reasoning: only reasoning, finish_reason length', async () => {
  const r = await client.chat.completions.create({ model: 'thinker', messages: [user('x')], max_tokens: 5 });
  assert.equal(countTokens((r.choices[0]!.message as any).reasoning), 5);
  assert.equal(r.choices[0]!.message.content, '');
  assert.equal(r.choices[0]!.finish_reason, 'length');
});
