// Finding usage in backend bytes (gateway/usage.ts): the fast search must find exactly what a
// plain search for `"usage":{` finds, and read the counts as the old regexes did.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { findUsage, indexOfUsage, lastIndexOfUsage, usageAt, USAGE_KEY } from '../../gateway/usage.js';

const b = (s: string) => Buffer.from(s);

describe('gateway usage scanning', () => {
  it('finds "usage":{ and only it, past look-alikes such as "message":{', () => {
    const cases = [
      '{"message":{"role":"assistant"},"usage":{"prompt_tokens":3,"completion_tokens":4}}',
      '"usage":{"prompt_tokens":1}',
      'ge":{ "usage":null "xusage":{ "usage":{"completion_tokens":9}',
      'data: {"choices":[],"usage":{"prompt_tokens":5,"total_tokens":12,"completion_tokens":7}}\n\ndata: [DONE]\n\n',
      'no usage here at all, "message":{"content":"ge\\":{"}',
      '',
      'ge":{',
    ];
    for (const text of cases) {
      const buf = b(text);
      assert.equal(indexOfUsage(buf), buf.indexOf(USAGE_KEY), `first in ${text}`);
      assert.equal(lastIndexOfUsage(buf), buf.lastIndexOf(USAGE_KEY), `last in ${text}`);
    }
    // The searches try the nearest few `{` one by one, then search for the key: any number of
    // other objects before or after the usage (or none, or no usage at all), from any offset,
    // finds what a plain search finds.
    for (let k = 0; k <= 20; k++) {
      const others = '{"a":{}}'.repeat(k);
      for (const text of [
        `{"x":1,"usage":{"prompt_tokens":1,"prompt_tokens_details":{"cached_tokens":0}},"y":[${others}]}`,
        `"usage":{${others}`,
        `{${others}"usage":{"usage":{}}`,
        `{"usage":1,${others}}`,
        `${others}{"choices":[{"delta":{"content":"{{"}}],"usage":{"prompt_tokens":1}}${others}`,
        others,
      ]) {
        const buf = b(text);
        assert.equal(lastIndexOfUsage(buf), buf.lastIndexOf(USAGE_KEY), `last in ${text}`);
        for (let from = 0; from <= buf.length; from += 3) assert.equal(indexOfUsage(buf, from), buf.indexOf(USAGE_KEY, from), `first from ${from} in ${text}`);
      }
    }
    const two = b('{"usage":{"prompt_tokens":1}} {"usage":{"prompt_tokens":2}}');
    const first = indexOfUsage(two);
    assert.equal(indexOfUsage(two, first + 1), two.indexOf(USAGE_KEY, first + 1));
    assert.equal(indexOfUsage(two, two.length), -1);
  });

  it('reads the counts, allowing whitespace after the colon, and reports missing ones as 0', () => {
    assert.deepEqual(findUsage(b('{"usage":{"prompt_tokens": 12,"total_tokens":30,"completion_tokens":\n18,"prompt_tokens_details":null}}')), {
      inputTokens: 12,
      outputTokens: 18,
    });
    assert.deepEqual(findUsage(b('{"usage":{"completion_tokens":7}}')), { inputTokens: 0, outputTokens: 7 });
    assert.equal(findUsage(b('{"usage":{"total_tokens":7}}')), undefined);
    // vLLM's prefix cache hits (issue 15): part of the prompt tokens, reported apart.
    assert.deepEqual(findUsage(b('{"usage":{"prompt_tokens":40,"total_tokens":45,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":32}}}')), {
      inputTokens: 40,
      outputTokens: 5,
      cachedTokens: 32,
    });
    assert.equal(findUsage(b('{"usage":null}')), undefined);
    // String values, escaped quotes and backslashes included, do not hide the names after them.
    assert.deepEqual(findUsage(b('{"usage":{"note":"a \\"q\\": \\\\","prompt_tokens":4,"x":"\\\\","completion_tokens":5}}')), {
      inputTokens: 4,
      outputTokens: 5,
    });
    // A string value that reads like a name is not one.
    assert.deepEqual(findUsage(b('{"usage":{"k":"prompt_tokens","prompt_tokens":6,"completion_tokens":1}}')), { inputTokens: 6, outputTokens: 1 });
    assert.equal(findUsage(b('{"usage":{"prompt_tokens":"12"}}')), undefined, 'a count must be a number');
    // The last usage object wins (a whole body may carry an earlier one in its content).
    assert.deepEqual(findUsage(b('{"a":{"usage":{"prompt_tokens":1,"completion_tokens":1}},"usage":{"prompt_tokens":2,"completion_tokens":3}}')), {
      inputTokens: 2,
      outputTokens: 3,
    });
  });

  it("reads vLLM's compact usage as the general scan does (a space after a colon takes the scan)", () => {
    for (const details of [
      '',
      ',"prompt_tokens_details":null',
      ',"prompt_tokens_details":{"cached_tokens":32}',
      ',"prompt_tokens_details":{"cached_tokens":0}',
    ]) {
      const compact = `{"usage":{"prompt_tokens":40,"total_tokens":45,"completion_tokens":5${details}},"prompt_logprobs":null}`;
      const spaced = compact.replace('"prompt_tokens":40', '"prompt_tokens": 40');
      assert.deepEqual(findUsage(b(compact)), findUsage(b(spaced)), details);
      assert.equal(findUsage(b(compact))!.inputTokens, 40);
    }
    assert.deepEqual(findUsage(b('{"usage":{"prompt_tokens":123456789012345,"total_tokens":1,"completion_tokens":0}}')), {
      inputTokens: 123456789012345,
      outputTokens: 0,
    });
  });

  it('reads only the usage object: names after its closing brace are not its counts', () => {
    assert.deepEqual(findUsage(b('{"usage":{"completion_tokens":7},"prompt_tokens":9}')), { inputTokens: 0, outputTokens: 7 });
    assert.equal(findUsage(b('{"usage":{},"prompt_tokens":3,"completion_tokens":4}')), undefined);
    // Braces inside strings and nested objects do not end it early.
    assert.deepEqual(
      findUsage(b('{"usage":{"note":"}}","prompt_tokens_details":{"cached_tokens":2},"prompt_tokens":5,"completion_tokens":1},"prompt_logprobs":null}')),
      {
        inputTokens: 5,
        outputTokens: 1,
        cachedTokens: 2,
      },
    );
  });

  it('looks no further than the end it is given', () => {
    const buf = b('data: {"usage":{"total_tokens":1}}\n\ndata: {"usage":{"prompt_tokens":4,"completion_tokens":5}}\n\n');
    const p = indexOfUsage(buf);
    const end = buf.indexOf('\n\n') + 2;
    assert.equal(usageAt(buf, p, end), undefined, "the next event's counts are not borrowed");
    assert.deepEqual(usageAt(buf, indexOfUsage(buf, end)), { inputTokens: 4, outputTokens: 5 });
  });
});
