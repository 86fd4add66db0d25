// The relay's fast paths (issue 30) must not change what a stream translates to:
// - SseParser with onChunk matches a read's plain chunks in place (textChunkAt, one sticky regex
//   per event): each must reach the translator exactly as its data would through onData and
//   pushData, wherever the reads are cut, and a single-line event it marks notPlain must be one
//   textChunk does not read;
// - mergeText (the relay's): the text tokens of one read in one text_delta event, everything
//   else, and the text a client accumulates, as without it.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { textChunk } from '../../../gateway/messages/chunk-parse.js';
import { ThinkingSigner } from '../../../gateway/messages/signature.js';
import { SseParser } from '../../../gateway/messages/sse.js';
import { StreamTranslator } from '../../../gateway/messages/stream.js';

const signer = new ThinkingSigner('s');
const head = '{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1795679366,"model":"m",';
const usage = (c: number) => `"usage":{"prompt_tokens":21,"total_tokens":${21 + c},"completion_tokens":${c}}}`;
const text = (contentJson: string, c: number, finish = 'null') =>
  `${head}"choices":[{"index":0,"delta":{"content":${contentJson}},"logprobs":null,"finish_reason":${finish}}],${usage(c)}`;

/** A stream with plain chunks and every kind of fallback between them. */
const EVENTS = [
  `${head}"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],${usage(0)}`,
  text('"Hello"', 1),
  text('" \\"quoted\\" \\\\ back"', 2), // escapes: plain, decoded by JSON.parse
  text('"caf\\u00e9"', 3), // an escape that decodes beyond ASCII
  text('"bad \\x escape"', 4), // malformed: must end the stream as JSON.parse would
];
const TOOL = `${head}"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\\"a\\":1}"}}]},"logprobs":null,"finish_reason":null}],${usage(5)}`;

/** SSE framings of data: one line, a multi-line event (not plain as data), CRLF, a comment. */
function sse(parts: string[]): string {
  return parts.join('');
}

const STREAM_PARTS = [
  `data: ${EVENTS[0]}\n\n`,
  `data: ${EVENTS[1]}\n\n`,
  ': keep-alive\n\n',
  `data: ${EVENTS[2]}\n\n`,
  `data: ${text('" world"', 3)}\r\n\r\n`, // CRLF: the general line path
  `data: ${text('"!"', 4)}\n\n`,
  `data: ${TOOL}\n\n`,
  `data: ${text('"two lines"', 5).replace(',"usage"', '\ndata: ,"usage"')}\n\n`, // two data lines: "\n" joins them (JSON whitespace), not plain
  `data: ${text('"again"', 6)}\n\n`,
  `data: ${text('"end"', 7, '"stop"')}\n\n`,
  `data: ${head}"choices":[],"usage":{"prompt_tokens":21,"total_tokens":28,"completion_tokens":7,"prompt_tokens_details":null}}\n\n`,
  `data: ${head}"choices":[],"usage":{"prompt_tokens":21,"total_tokens":28,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":16}}}\n\n`,
  'data: [DONE]\n\n',
];
const STREAM = sse(STREAM_PARTS);

/** The translation of `parts` (reads) through the parser with and without onChunk. */
function translate(parts: Buffer[], fast: boolean, mergeText = false): { out: string; usage: StreamTranslator['reportedUsage'][] } {
  const t = new StreamTranslator({ model: 'm', signer, mergeText });
  let out = '';
  const p = fast
    ? new SseParser(
        (data, notPlain) => {
          if (notPlain) assert.equal(textChunk(data), undefined, `notPlain but plain: ${data}`);
          out += notPlain ? t.pushOther(data) : t.pushData(data);
        },
        (c, plain) => {
          if (plain) assert.equal(JSON.stringify(c.content ?? ''), `"${c.content ?? ''}"`, 'plain text needs no escape');
          out += t.pushChunk(c, plain);
        },
      )
    : new SseParser((data) => {
        out += t.pushData(data);
      });
  const usage: StreamTranslator['reportedUsage'][] = [];
  for (const part of parts) {
    p.push(part);
    out += t.takeText();
    usage.push(t.reportedUsage);
  }
  p.end();
  return { out: out.replace(/"id":"msg_[A-Za-z0-9_-]{16}"/, '"id":"msg_"'), usage };
}

test('plain chunks matched in place translate like their data through pushData, cut anywhere', () => {
  const bytes = Buffer.from(STREAM);
  const expected = translate([bytes], false).out;
  assert.match(expected, /"text":" world"/);
  assert.match(expected, /"partial_json":"\{\\"a\\":1\}"/);
  assert.match(expected, /"cache_read_input_tokens":16/);
  assert.equal(translate([bytes], true).out, expected);
  for (let i = 0; i <= bytes.length; i++) {
    const two = [bytes.subarray(0, i), bytes.subarray(i)];
    const fast = translate(two, true);
    assert.equal(fast.out, expected, `split at ${i}`);
    // The usage as of each read (what a stream cut there is charged): the same either way.
    assert.deepEqual(fast.usage, translate(two, false).usage, `usage, split at ${i}`);
    assert.deepEqual(coalesced(translate(two, true, true).out), coalesced(expected), `split at ${i}, text merged`);
    for (let j = i; j <= bytes.length; j += 37) {
      const three = [bytes.subarray(0, i), bytes.subarray(i, j), bytes.subarray(j)];
      assert.equal(translate(three, true).out, expected, `split at ${i}, ${j}`);
    }
  }
});

test('a malformed plain-looking chunk ends the stream as through pushData', () => {
  const bytes = Buffer.from(sse([`data: ${EVENTS[0]}\n\n`, `data: ${EVENTS[1]}\n\n`, `data: ${EVENTS[4]}\n\n`, `data: ${EVENTS[1]}\n\n`]));
  const { out } = translate([bytes], true);
  assert.equal(out, translate([bytes], false).out);
  assert.match(out, /event: error\ndata: .*malformed stream chunk/);
});

test('non-ASCII reads (UTF-8 text) take the byte path and translate the same', () => {
  const bytes = Buffer.from(sse([`data: ${EVENTS[0]}\n\n`, `data: ${text('"日本語 🎉"', 1)}\n\n`, `data: ${text('" ok"', 2)}\n\n`, 'data: [DONE]\n\n']));
  const expected = translate([bytes], false).out;
  assert.match(expected, /"text":"日本語 🎉"/);
  for (let i = 0; i <= bytes.length; i++) assert.equal(translate([bytes.subarray(0, i), bytes.subarray(i)], true).out, expected, `split at ${i}`);
});

/**
 * The events of SSE text with consecutive text_delta events of one block joined into one: what a
 * client accumulates. Each event's framing is checked on the way.
 */
function coalesced(out: string): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  for (const block of out.slice(0, -2).split('\n\n')) {
    const m = /^event: ([a-z_]+)\ndata: (.*)$/s.exec(block);
    assert.ok(m, `event framing: ${JSON.stringify(block)}`);
    const e = JSON.parse(m[2]!) as Record<string, unknown>;
    assert.equal(e.type, m[1]);
    const last = events[events.length - 1];
    const delta = e.delta as { type: string; text: string } | undefined;
    const lastDelta = last?.delta as { type: string; text: string } | undefined;
    if (delta?.type === 'text_delta' && lastDelta?.type === 'text_delta' && last!.index === e.index) {
      last!.delta = { type: 'text_delta', text: lastDelta.text + delta.text };
    } else events.push(e);
  }
  return events;
}

/** The translation of `reads` (lists of data payloads) with mergeText, the held text taken after each read. */
function merged(reads: string[][]): { out: string; perRead: string[] } {
  const t = new StreamTranslator({ model: 'm', signer, mergeText: true });
  const perRead: string[] = [];
  for (const read of reads) {
    let out = '';
    for (const data of read) out += t.pushData(data);
    out += t.takeText();
    perRead.push(out);
  }
  return { out: perRead.join('').replace(/"id":"msg_[A-Za-z0-9_-]{16}"/, '"id":"msg_"'), perRead };
}

const reasoning = (r: string, c: number) =>
  `${head}"choices":[{"index":0,"delta":{"reasoning_content":${JSON.stringify(r)}},"logprobs":null,"finish_reason":null}],${usage(c)}`;

test('mergeText: the text tokens of one read in one event, everything else as without it, however the reads are cut', () => {
  const datas = [
    EVENTS[0]!,
    reasoning('think', 1),
    text('"Hello"', 2),
    text('" \\"quoted\\""', 3),
    text('"\\ud83c"', 4), // a surrogate pair cut between two tokens
    text('"\\udf89 é"', 5),
    TOOL,
    text('" after"', 6),
    text('"!"', 7, '"stop"'),
    '[DONE]',
  ];
  const plain = new StreamTranslator({ model: 'm', signer });
  const expected = coalesced(
    datas
      .map((d) => plain.pushData(d))
      .join('')
      .replace(/"id":"msg_[A-Za-z0-9_-]{16}"/, '"id":"msg_"'),
  );
  for (let i = 0; i <= datas.length; i++) {
    for (let j = i; j <= datas.length; j++) {
      const reads = [datas.slice(0, i), datas.slice(i, j), datas.slice(j)];
      const { out, perRead } = merged(reads);
      assert.deepEqual(coalesced(out), expected, `reads cut at ${i}, ${j}`);
      // Nothing is held past a read: each read's output is whole events.
      for (const r of perRead) assert.ok(r === '' || r.endsWith('\n\n'));
    }
  }
  // All in one read: the tokens of each text block (the first included) are one event each.
  const one = merged([datas]).out;
  assert.equal(one.match(/"text_delta"/g)?.length, 2, one);
});

test('mergeText: held text comes before an error event and before the end', () => {
  const t = new StreamTranslator({ model: 'm', signer, mergeText: true });
  let out = t.pushData(EVENTS[0]!) + t.pushData(text('"a"', 1)) + t.pushData(text('"b"', 2)) + t.pushData(text('"c"', 3));
  out += t.pushData('{"error":{"message":"boom","code":503}}');
  const events = coalesced(out);
  assert.deepEqual(
    events.map((e) => e.type),
    ['message_start', 'content_block_start', 'content_block_delta', 'error'],
  );
  assert.deepEqual(events[2]!.delta, { type: 'text_delta', text: 'abc' });
  const u = new StreamTranslator({ model: 'm', signer, mergeText: true });
  const ended = coalesced(u.pushData(EVENTS[0]!) + u.pushData(text('"a"', 1)) + u.pushData(text('"b"', 2)) + u.end());
  assert.deepEqual(
    ended.map((e) => e.type),
    ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop'],
  );
  assert.deepEqual(ended[2]!.delta, { type: 'text_delta', text: 'ab' });
});

test('rows of plain chunks, several matched by one exec, translate like their data, whatever ends a row', () => {
  const row = [
    EVENTS[0]!,
    text('"a"', 1),
    text('" b"', 2),
    text('" \\"c\\""', 3),
    text('" d"', 4),
    text('" e"', 5),
    `${head}"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":null}],${usage(5)}`, // another shape inside a row
    text('" f"', 6),
    text('" g"', 7),
    text('" h"', 8),
    text('" i"', 9),
    text('" j"', 10),
    text('" k"', 11, '"stop"'),
    `${head}"choices":[],"usage":{"prompt_tokens":21,"total_tokens":32,"completion_tokens":11,"prompt_tokens_details":{"cached_tokens":8}}}`,
  ];
  const withBadEscape = [...row.slice(0, 4), EVENTS[4]!, ...row.slice(4)]; // a malformed chunk inside a row
  for (const datas of [row, withBadEscape]) {
    const bytes = Buffer.from(`${datas.map((d) => `data: ${d}\n\n`).join('')}data: [DONE]\n\n`);
    const expected = translate([bytes], false);
    assert.equal(translate([bytes], true).out, expected.out);
    for (let i = 0; i <= bytes.length; i++) {
      const two = [bytes.subarray(0, i), bytes.subarray(i)];
      const fast = translate(two, true);
      assert.equal(fast.out, expected.out, `split at ${i}`);
      assert.deepEqual(fast.usage, translate(two, false).usage, `usage, split at ${i}`);
    }
  }
  assert.match(translate([Buffer.from(`${withBadEscape.map((d) => `data: ${d}\n\n`).join('')}`)], true).out, /malformed stream chunk/);
});
