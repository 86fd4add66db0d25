// Every backend's bytes (flavours.ts: vLLM 0.10.1 to current main, SGLang 0.5 and current,
// llama.cpp) through the messages stream: the fast path (plain chunks matched in place, text
// merged per read) must give exactly what the fallback (every chunk through JSON.parse) gives,
// wherever the reads are cut, and must be taken for every text, role, finish and usage chunk of
// every flavour. One read's text tokens become one text_delta on both paths.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { NO_USAGE, textChunk, textChunksAt } from '../../../gateway/messages/chunk-parse.js';
import { ThinkingSigner } from '../../../gateway/messages/signature.js';
import { SseParser } from '../../../gateway/messages/sse.js';
import { StreamTranslator, type ChatChunk } from '../../../gateway/messages/stream.js';
import { gateUsage } from '../../../gateway/messages/translate-response.js';
import { COMPACT_USAGE_AT, findUsage, indexOfUsage, usageAt } from '../../../gateway/usage.js';
import { completionBody, FLAVOURS, GOLDEN, GOLDEN_PLAN, streamBody, streamChunks, type StreamPlan, textPlan } from './flavours.js';

const signer = new ThinkingSigner('s');

interface Translation {
  out: string;
  /** The gate's usage as of the end of every read. */
  usage: StreamTranslator['reportedUsage'][];
  /** Events handed to the translator as plain chunks read in place / as data. */
  inPlace: number;
  asData: string[];
}

/**
 * `body` cut into `reads`, through the relay's parser and translator (mergeText, the text taken
 * at each read's end); `fast`: with onChunk (the fast path), else every event's data through
 * JSON.parse (pushOther).
 */
function translate(reads: Buffer[], fast: boolean, thinking = true): Translation {
  const t = new StreamTranslator({ model: 'm', signer, mergeText: true, thinking, inputTokens: 7 });
  const r: Translation = { out: '', usage: [], inPlace: 0, asData: [] };
  const p = fast
    ? new SseParser(
        (data, notPlain) => {
          r.asData.push(data);
          if (notPlain) assert.equal(textChunk(data), undefined, `notPlain but plain: ${data}`);
          r.out += notPlain ? t.pushOther(data) : t.pushData(data);
        },
        (c, plain) => {
          r.inPlace++;
          r.out += t.pushChunk(c, plain);
        },
      )
    : new SseParser((data) => {
        r.asData.push(data);
        r.out += t.pushOther(data);
      });
  for (const read of reads) {
    p.push(read);
    r.out += t.takeText();
    r.usage.push(t.reportedUsage);
  }
  p.end();
  if (!t.done) r.out += t.finished ? t.end() : t.fail('api_error', 'ended early');
  r.out = r.out.replace(/"id":"msg_[A-Za-z0-9_-]{16}"/, '"id":"msg_"').replace(/"id":"toolu_[A-Za-z0-9_-]+"/g, '"id":"toolu_"');
  return r;
}

/** `s` cut before each offset in `cuts`. */
function cut(s: string, cuts: number[]): Buffer[] {
  const b = Buffer.from(s);
  const out: Buffer[] = [];
  let from = 0;
  for (const c of cuts) {
    out.push(b.subarray(from, c));
    from = c;
  }
  out.push(b.subarray(from));
  return out;
}

/** Whether a chunk is one the fast path must read (text, role, finish or usage only: no reasoning, tool call or error). */
function plainShape(chunk: string): boolean {
  const c = JSON.parse(chunk) as ChatChunk;
  const d = c.choices?.[0]?.delta;
  return !d?.reasoning_content && !d?.reasoning && !d?.tool_calls;
}

const PLANS: [string, StreamPlan][] = [
  ['golden (reasoning, text, tool call)', GOLDEN_PLAN],
  ['20 text tokens, max_tokens', textPlan(20)],
  ['text ended by EOS, no continuous usage', textPlan(5, { finish: 'stop', continuousUsage: false, cachedTokens: 9 })],
  ['text without any usage', textPlan(4, { finish: 'stop', continuousUsage: false, includeUsage: false })],
  [
    'adversarial text: quotes, backslashes, the chunk keys inside the content, unicode',
    textPlan(0, {
      text: [
        '"usage":{"prompt_tokens":9}',
        '\\',
        '"},"logprobs":null,"finish_reason":"stop"}],"usage":{}}',
        'data: {"id":"x"}\n\n',
        'café ✓ 🎉',
        '\u2028',
        '',
        'end"',
      ],
      finish: 'stop',
    }),
  ],
];

test('each flavour writes its golden stream byte for byte, and every chunk is JSON', () => {
  for (const f of FLAVOURS) {
    const chunks = streamChunks(f, GOLDEN_PLAN);
    assert.deepEqual(chunks, GOLDEN[f], f);
    for (const c of chunks) assert.doesNotThrow(() => JSON.parse(c), c);
  }
});

test('every flavour: the fast path translates exactly as JSON.parse does, and takes every plain chunk', () => {
  for (const f of FLAVOURS) {
    for (const [name, plan] of PLANS) {
      const body = streamBody(f, plan);
      for (const thinking of [true, false]) {
        const slow = translate([Buffer.from(body)], false, thinking);
        const fast = translate([Buffer.from(body)], true, thinking);
        assert.equal(fast.out, slow.out, `${f}, ${name}`);
        assert.deepEqual(fast.usage, slow.usage, `${f}, ${name}`);
        // Every chunk without reasoning or tool calls was read in place (the fast path), in an
        // ASCII read; the others and [DONE] reached onData.
        if (Buffer.from(body).every((b) => b < 0x80)) {
          const chunks = streamChunks(f, plan);
          const plain = chunks.filter(plainShape).length;
          assert.equal(fast.inPlace, plain, `${f}, ${name}: chunks read in place`);
          assert.deepEqual(fast.asData, [...chunks.filter((c) => !plainShape(c)), '[DONE]'], `${f}, ${name}`);
        }
      }
      // The message the client accumulates is whole (a stop reason, the text in order).
      const out = translate([Buffer.from(body)], true).out;
      assert.match(out, /event: message_stop/, `${f}, ${name}`);
      const text = [...out.matchAll(/"type":"text_delta","text":("(?:[^"\\]|\\.)*")/g)].map((m) => JSON.parse(m[1]!) as string).join('');
      assert.equal(text, plan.text.join(''), `${f}, ${name}`);
    }
  }
});

test('every flavour: one read of text tokens is one text_delta, on the fast path and off it', () => {
  for (const f of FLAVOURS) {
    const body = streamBody(f, textPlan(20));
    for (const fast of [true, false]) {
      const r = translate([Buffer.from(body)], fast);
      assert.equal(r.out.match(/"text_delta"/g)?.length, 1, `${f}, fast ${fast}`);
    }
    // One read per event: one text_delta per token, both ways alike.
    const events = body.split(/(?<=\n\n)/).map((e) => Buffer.from(e));
    const slow = translate(events, false);
    assert.equal(slow.out.match(/"text_delta"/g)?.length, 20, f);
    assert.equal(translate(events, true).out, slow.out, f);
  }
});

test('every flavour: reads cut anywhere translate alike, both ways', () => {
  for (const f of FLAVOURS) {
    for (const [name, plan] of [PLANS[0]!, PLANS[4]!]) {
      const body = streamBody(f, plan);
      const n = Buffer.byteLength(body);
      const whole = translate([Buffer.from(body)], false).out;
      // Every cut into two reads (the text of a read merged, so the deltas differ by where the
      // reads end: compared with the slow path over the same reads), and some into three.
      for (let i = 1; i < n; i += 1) {
        const reads = cut(body, [i]);
        const slow = translate(reads, false);
        const fast = translate(reads, true);
        assert.equal(fast.out, slow.out, `${f}, ${name}, cut at ${i}`);
        assert.deepEqual(fast.usage, slow.usage, `${f}, ${name}, cut at ${i}`);
        // Merged per read or not, the text and the blocks are the same as in one read.
        assert.equal(joined(fast.out), joined(whole), `${f}, ${name}, cut at ${i}`);
      }
      for (let i = 1; i + 97 < n; i += 31) {
        const reads = cut(body, [i, i + 97]);
        assert.equal(translate(reads, true).out, translate(reads, false).out, `${f}, ${name}, cut at ${i}, ${i + 97}`);
      }
    }
  }
});

/** The events with consecutive text deltas of one block joined into one (how a client reads them). */
function joined(out: string): string {
  const events = out.split(/(?<=\n\n)/);
  const res: string[] = [];
  let text: { index: number; text: string } | undefined;
  const flush = () => {
    if (text) res.push(`text ${text.index} ${JSON.stringify(text.text)}`);
    text = undefined;
  };
  for (const e of events) {
    const m = /^event: content_block_delta\ndata: (.*)\n\n$/s.exec(e);
    const d = m ? (JSON.parse(m[1]!) as { index: number; delta: { type: string; text?: string } }) : undefined;
    if (d?.delta.type === 'text_delta') {
      if (text && text.index !== d.index) flush();
      text ??= { index: d.index, text: '' };
      text.text += d.delta.text;
      continue;
    }
    flush();
    res.push(e);
  }
  flush();
  return res.join('');
}

test('every flavour: textChunk (a non-ASCII read) reads the plain chunks as JSON.parse does', () => {
  for (const f of FLAVOURS) {
    for (const [, plan] of PLANS) {
      for (const chunk of streamChunks(f, plan)) {
        const c = textChunk(chunk);
        if (!plainShape(chunk)) {
          assert.equal(c, undefined, chunk);
          continue;
        }
        assert.ok(c, `${f}: not read: ${chunk}`);
        const parsed = JSON.parse(chunk) as ChatChunk;
        const choice = parsed.choices?.[0];
        assert.equal(c.content || undefined, choice?.delta?.content || undefined, chunk);
        assert.equal(c.finish, choice?.finish_reason ?? null, chunk);
        assert.deepEqual(c.usage && gateUsage(c.usage), parsed.usage ? gateUsage(parsed.usage) : undefined, chunk);
      }
    }
  }
});

test('chunks read in place say whether they carry usage, as JSON.parse finds it', () => {
  for (const f of FLAVOURS) {
    for (const [, plan] of PLANS) {
      for (const chunk of streamChunks(f, plan).filter(plainShape)) {
        if (!Buffer.from(chunk).every((b) => b < 0x80)) continue;
        const s = `data: ${chunk}\n\n`;
        let usage: number | undefined;
        assert.equal(
          textChunksAt(s, 0, (c) => {
            usage = c.usage;
          }),
          s.length,
          chunk,
        );
        assert.equal(usage !== NO_USAGE, Boolean((JSON.parse(chunk) as ChatChunk).usage), chunk);
      }
    }
  }
});

test('adversarial chunks of the new shapes: what is not exactly a plain chunk goes to JSON.parse', () => {
  const sg = streamChunks('sglang', textPlan(1, { continuousUsage: true }))[1]!;
  const ll = streamChunks('llama.cpp', textPlan(1, { finish: 'stop' })).at(-1)!; // the usage chunk
  const llFinish = streamChunks('llama.cpp', textPlan(1, { finish: 'stop' })).at(-2)!;
  const vl = streamChunks('vllm-0.11.1', textPlan(1))[1]!;
  const other = [
    // A second content, or reasoning beside the text: not a null member.
    vl.replace('"reasoning_content":null', '"reasoning_content":"r"'),
    vl.replace('"reasoning_content":null', '"content":"again"'),
    vl.replace('"reasoning_content":null', '"tool_calls":[{"index":0}]'),
    // Extra or reordered members, a non-null token_ids, an unknown usage member.
    vl.replace('"token_ids":null', '"token_ids":[1,2]'),
    sg.replace('"matched_stop":null', '"matched_stop":null,"hidden_states":[1]'),
    sg.replace('"reasoning_tokens":0', '"reasoning_tokens":0,"cached_tokens":3'),
    sg.replace('"prompt_tokens_details":null', '"prompt_tokens_details":{"cached_tokens":3,"image_tokens":1}'),
    llFinish.replace('"finish_reason":"stop","index":0', '"index":0,"finish_reason":"stop"'),
    ll.replace('"total_tokens"', '"extra":1,"total_tokens"'),
    ll.replace('"timings":{', '"timings":{"x":"y",'),
    // Two choices.
    vl.replace('"choices":[{', `"choices":[${JSON.stringify((JSON.parse(vl) as ChatChunk).choices![0])},{`),
  ];
  for (const data of other) {
    assert.doesNotThrow(() => JSON.parse(data), data);
    assert.equal(textChunk(data), undefined, data);
    let read = false;
    textChunksAt(`data: ${data}\n\n`, 0, () => {
      read = true;
    });
    assert.equal(read, false, data);
    // Through the translator both ways alike.
    const body = `data: ${data}\n\ndata: [DONE]\n\n`;
    assert.equal(translate([Buffer.from(body)], true).out, translate([Buffer.from(body)], false).out, data);
  }
  // Malformed in the new shapes: the stream fails as JSON.parse fails.
  for (const data of [sg.replace('"content":"Hello"', '"content":"He\\xllo"'), ll.replace('"total_tokens":', '"total_tokens":0'), vl.slice(0, -1)]) {
    assert.throws(() => JSON.parse(data), data);
    assert.equal(textChunk(data), undefined, data);
    const body = `data: ${data}\n\ndata: [DONE]\n\n`;
    const fast = translate([Buffer.from(body)], true).out;
    assert.match(fast, /malformed stream chunk/, data);
    assert.equal(fast, translate([Buffer.from(body)], false).out, data);
  }
});

test('every flavour: the chat usage scan reads the compact usage of bodies and final chunks, as the general scan does', () => {
  const expected = (u: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } | null }) =>
    u.prompt_tokens_details?.cached_tokens
      ? { inputTokens: u.prompt_tokens, outputTokens: u.completion_tokens, cachedTokens: u.prompt_tokens_details.cached_tokens }
      : { inputTokens: u.prompt_tokens, outputTokens: u.completion_tokens };
  for (const f of FLAVOURS) {
    const body = completionBody(f, textPlan(20));
    const buf = Buffer.from(body);
    const parsed = JSON.parse(body) as { usage: Parameters<typeof expected>[0] };
    assert.deepEqual(findUsage(buf), expected(parsed.usage), f);
    const at = body.lastIndexOf('"usage":{');
    COMPACT_USAGE_AT.lastIndex = at;
    assert.ok(COMPACT_USAGE_AT.exec(body), `${f}: the compact pattern reads ${body.slice(at)}`);
    // A stream's final usage (cached tokens reported): the last event with usage.
    const stream = Buffer.from(streamBody(f, textPlan(3, { finish: 'stop', continuousUsage: false, cachedTokens: 5 })));
    let p = indexOfUsage(stream);
    let last: ReturnType<typeof usageAt>;
    while (p >= 0) {
      last = usageAt(stream, p);
      COMPACT_USAGE_AT.lastIndex = 0;
      const s = stream.toString('latin1', p);
      assert.ok(COMPACT_USAGE_AT.exec(s), `${f}: ${s}`);
      p = indexOfUsage(stream, p + 1);
    }
    assert.deepEqual(last!, { inputTokens: 21, outputTokens: 4, cachedTokens: 5 }, f);
  }
});
