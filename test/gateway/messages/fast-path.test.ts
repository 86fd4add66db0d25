// The relay's fast paths (issue 30) must not change what a stream translates to:
// - SseParser with onChunk matches a read's plain chunks in place (textChunkAt, one sticky regex
//   per event): each must reach the translator exactly as its data would through onData and
//   pushData, wherever the reads are cut, and a single-line event it marks notPlain must be one
//   textChunk does not read.
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
  `data: ${text('"two', 5)}\ndata: lines"}\n\n`, // two data lines: "\n" joins them, not plain
  `data: ${text('"again"', 6)}\n\n`,
  `data: ${text('"end"', 7, '"stop"')}\n\n`,
  'data: [DONE]\n\n',
];
const STREAM = sse(STREAM_PARTS);

/** The translation of `parts` (reads) through the parser with and without onChunk. */
function translate(parts: Buffer[], fast: boolean): { out: string } {
  const t = new StreamTranslator({ model: 'm', signer });
  let out = '';
  const p = fast
    ? new SseParser(
        (data, notPlain) => {
          if (notPlain) assert.equal(textChunk(data), undefined, `notPlain but plain: ${data}`);
          out += notPlain ? t.pushOther(data) : t.pushData(data);
        },
        (c) => {
          out += t.pushChunk(c);
        },
      )
    : new SseParser((data) => {
        out += t.pushData(data);
      });
  for (const part of parts) p.push(part);
  p.end();
  return { out: out.replace(/"id":"msg_[A-Za-z0-9_-]{16}"/, '"id":"msg_"') };
}

test('plain chunks matched in place translate like their data through pushData, cut anywhere', () => {
  const bytes = Buffer.from(STREAM);
  const expected = translate([bytes], false).out;
  assert.match(expected, /"text":" world"/);
  assert.match(expected, /"partial_json":"\{\\"a\\":1\}"/);
  assert.equal(translate([bytes], true).out, expected);
  for (let i = 0; i <= bytes.length; i++) {
    const two = [bytes.subarray(0, i), bytes.subarray(i)];
    assert.equal(translate(two, true).out, expected, `split at ${i}`);
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
