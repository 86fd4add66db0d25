// The chat stream relay's usage handling, against a raw backend that writes chosen bytes: the
// usage-only event is left out for a client that did not ask for it, at every cut of the stream
// into two backend reads; the usage is metered; a stream cut short is charged its relayed events
// only while the backend's usage has not come.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { waitFor } from '../helpers.js';
import { HELLO, post, startFixture, type Fixture } from './fixture.js';
import { rawServer } from './raw-server.js';

/** What the raw backend answers to one request: body pieces (each one HTTP chunk), then an end or a cut. */
interface Script {
  pieces: string[];
  /** Destroy the connection after the pieces instead of ending the chunked body. */
  cut?: boolean;
}

/** A backend that answers each request with the next script, each piece its own HTTP chunk. */
function scriptedBackend(next: () => Script) {
  return rawServer((r) => {
    const s = next();
    let out = 'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n';
    for (const p of s.pieces) out += `${Buffer.byteLength(p).toString(16)}\r\n${p}\r\n`;
    if (s.cut) r.socket.end(out, () => r.socket.destroy());
    else r.socket.write(`${out}0\r\n\r\n`);
  });
}

const chunk = (id: string, delta: string, finish = 'null', usage = ''): string =>
  `data: {"id":"${id}","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":${delta},"logprobs":null,"finish_reason":${finish}}]${usage}}\n\n`;
const usageOnly = (id: string, model = 'm'): string =>
  `data: {"id":"${id}","object":"chat.completion.chunk","created":1,"model":"${model}","choices":[],"usage":{"prompt_tokens":7,"total_tokens":12,"completion_tokens":5}}\n\n`;

describe('chat stream relay: usage', () => {
  let f: Fixture;
  let backend: Awaited<ReturnType<typeof rawServer>>;
  let script: Script = { pieces: [] };
  let auth: Record<string, string>;
  before(async () => {
    backend = await scriptedBackend(() => script);
    f = await startFixture({ models: () => [modelEntrySchema.parse({ name: 'm', upstreams: [backend.url] })] });
    auth = { authorization: `Bearer ${f.key}` };
  });
  after(async () => {
    await f.close();
    await backend.close();
  });

  const stream = (extra: Record<string, unknown> = {}) =>
    post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 8, stream: true, ...extra }), auth);
  const series = () => f.gateway.metrics.model('m');

  const tokens = [
    chunk('c-1', '{"role":"assistant","content":""}'),
    chunk('c-1', '{"content":"Hi"}'),
    chunk('c-1', '{"content":" [there] data: x"}', '"stop"'),
  ].join('');
  const done = 'data: [DONE]\n\n';

  it('leaves the usage-only event out at every cut of the stream into two reads, and meters its usage', async () => {
    // Ids and a model name with "data:" and "[" in them: the event is still cut at its line.
    for (const [id, model] of [
      ['c-1', 'm'],
      ['c-data:1', 'm[1]'],
    ] as const) {
      const body = tokens + usageOnly(id, model) + done;
      for (let cut = 0; cut < body.length; cut++) {
        script = { pieces: cut === 0 ? [body] : [body.slice(0, cut), body.slice(cut)] };
        const before = series().tokensOut;
        const r = await stream();
        assert.equal(r.status, 200);
        assert.equal(r.text, tokens + done, `cut at ${cut}`);
        assert.equal(series().tokensOut - before, 5, `cut at ${cut}`);
      }
    }
  });

  it('relays the usage-only event to a client that asked for it', async () => {
    const body = tokens + usageOnly('c-1') + done;
    script = { pieces: [body] };
    const r = await stream({ stream_options: { include_usage: true } });
    assert.equal(r.text, body);
  });

  it('ends an event at a CRLF blank line: what follows the usage-only event is kept', async () => {
    const crlf = (s: string) => s.replace(/\n\n$/, '\r\n\r\n');
    script = { pieces: [crlf(chunk('c-1', '{"content":"Hi"}', '"stop"')), crlf(usageOnly('c-1')) + crlf(done)] };
    const r = await stream();
    assert.equal(r.text, crlf(chunk('c-1', '{"content":"Hi"}', '"stop"')) + crlf(done));
  });

  it('a stream cut before any usage is charged one output token per relayed event', async () => {
    const before = series().tokensOut;
    script = { pieces: [tokens.slice(0, 100), tokens.slice(100)], cut: true };
    const r = await stream();
    assert.match(r.text, /Model backend stream failed/);
    await waitFor(() => series().tokensOut - before === 3);
  });

  it('a stream cut after the backend reported usage is charged that usage, not its events', async () => {
    const before = series().tokensOut;
    const withUsage = chunk('c-1', '{"content":"Hi"}', 'null', ',"usage":{"prompt_tokens":7,"total_tokens":9,"completion_tokens":2}');
    script = { pieces: [tokens + withUsage], cut: true };
    const r = await stream({ stream_options: { include_usage: true, continuous_usage_stats: true } });
    assert.match(r.text, /Model backend stream failed/);
    await waitFor(() => series().tokensOut - before === 2);
  });
});

describe('chat relay: a non-stream body the backend cuts short', () => {
  it('cuts the client connection and counts the request under the backend status, not as a client that went away', async () => {
    // Content-Length 400, 40 bytes sent, then the backend closes.
    const backend = await rawServer((r) => {
      r.socket.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 400\r\n\r\n{"id":"c-1","object":"chat.completion",', () =>
        r.socket.destroy(),
      );
    });
    const f = await startFixture({ models: () => [modelEntrySchema.parse({ name: 'm', upstreams: [backend.url] })] });
    try {
      await assert.rejects(
        post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 8 }), { authorization: `Bearer ${f.key}` }),
      );
      await waitFor(() => f.gateway.metrics.count('chat', 'm', 200) === 1);
      assert.equal(f.gateway.metrics.count('chat', 'm', 499), 0, 'our own cut is not counted as the client going away');
    } finally {
      await f.close();
      await backend.close();
    }
  });
});
