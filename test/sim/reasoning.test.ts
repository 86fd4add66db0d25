// A reasoning model through the official openai client: reasoning_content and reasoning in the
// message and in deltas, before the answer; reasoning_effort scales the reasoning.
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

test('non-stream: reasoning_content and reasoning carry the reasoning; usage counts it', async () => {
  const r = await client.chat.completions.create({ model: 'thinker', messages: [user('why?')] });
  const m = r.choices[0]!.message as any;
  assert.equal(typeof m.reasoning_content, 'string');
  assert.ok(m.reasoning_content.length > 0);
  assert.equal(m.reasoning, m.reasoning_content);
  assert.ok(m.content.length > 0);
  assert.equal(r.usage!.completion_tokens, countTokens(m.reasoning_content) + countTokens(m.content));
  assert.equal(r.choices[0]!.finish_reason, 'stop');
});

async function reasoningTokens(effort?: string): Promise<number> {
  const body: Record<string, unknown> = { model: 'thinker', messages: [user('effort')], seed: 1 };
  if (effort) body.reasoning_effort = effort;
  const r = (await client.chat.completions.create(body as any)) as OpenAI.Chat.Completions.ChatCompletion;
  return countTokens((r.choices[0]!.message as any).reasoning_content ?? '');
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
  assert.equal((r.choices[0]!.message as any).reasoning_content, null);
});

test('stream: reasoning deltas first, then content deltas, each one token', async () => {
  const kinds: string[] = [];
  let reasoning = '';
  let content = '';
  const stream = await client.chat.completions.create({ model: 'thinker', messages: [user('why?')], reasoning_effort: 'low', stream: true });
  for await (const c of stream) {
    const d = c.choices[0]?.delta as any;
    if (!d) continue;
    if (d.reasoning_content) {
      assert.equal(d.reasoning, d.reasoning_content);
      assert.equal(countTokens(d.reasoning_content), 1);
      reasoning += d.reasoning_content;
      kinds.push('r');
    } else if (d.content) {
      content += d.content;
      kinds.push('c');
    }
  }
  assert.ok(reasoning.length > 0 && content.length > 0);
  assert.equal(kinds.join('').replace(/^r+c+$/, 'ok'), 'ok', 'all reasoning before any content');
  const whole = await client.chat.completions.create({ model: 'thinker', messages: [user('why?')], reasoning_effort: 'low' });
  assert.equal((whole.choices[0]!.message as any).reasoning_content, reasoning);
  assert.equal(whole.choices[0]!.message.content, content);
});

test('max_tokens smaller than the reasoning: only reasoning, finish_reason length', async () => {
  const r = await client.chat.completions.create({ model: 'thinker', messages: [user('x')], max_tokens: 5 });
  assert.equal(countTokens((r.choices[0]!.message as any).reasoning_content), 5);
  assert.equal(r.choices[0]!.message.content, '');
  assert.equal(r.choices[0]!.finish_reason, 'length');
});
