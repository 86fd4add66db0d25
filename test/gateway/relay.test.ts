// The relay: client abort, many concurrent streams, a slow reader, a catalog change mid-stream.
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import { modelEntrySchema } from '../../lib/config.js';
import { waitFor } from '../helpers.js';
import { countEventEnds } from '../../gateway/chat/relay.js';
import { HELLO, spawnRc, startFixture, stop } from './fixture.js';

describe('gateway relay', () => {
  it('a client that goes away aborts its upstream request and frees the pool slot', async () => {
    const f = await startFixture({ sims: [{ ttftMs: 0, tokensPerSecond: 20 }] });
    try {
      const sim = f.sims[0]!;
      const stream = (await f.client.chat.completions.create({
        model: 'm',
        messages: HELLO,
        max_tokens: 500,
        stream: true,
        ignore_eos: true,
      } as never)) as unknown as AsyncIterable<unknown> & { controller: AbortController };
      let seen = 0;
      for await (const _ of stream) {
        if (++seen === 2) break; // leaving the loop aborts the request
      }
      await waitFor(() => sim.stats.aborted === 1);
      const upstream = f.gateway.context.upstreams.all()[0]!;
      await waitFor(() => f.gateway.context.admission.inflight === 0 && upstream.inflight === 0 && upstream.pool.stats.running === 0);
      assert.equal(sim.stats.completed, 0);
      assert.equal(f.gateway.metrics.count('chat', 'm', 499), 1);
      // The gateway keeps serving.
      const c = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2 });
      assert.equal(c.object, 'chat.completion');
    } finally {
      await f.close();
    }
  });

  it('relays 64 concurrent streams, each complete and in order', async () => {
    const f = await startFixture({ sims: [{ ttftMs: 5, tokensPerSecond: 400 }] });
    try {
      const one = async (i: number) => {
        const stream = (await f.client.chat.completions.create({
          model: 'm',
          messages: [{ role: 'user', content: `stream ${i}` }],
          max_tokens: 20,
          stream: true,
          ignore_eos: true,
        } as never)) as unknown as AsyncIterable<{ choices: { delta: { content?: string | null }; finish_reason: string | null }[] }>;
        let tokens = 0;
        let finish: string | null = null;
        for await (const chunk of stream) {
          const c = chunk.choices[0];
          if (c?.delta.content) tokens++;
          if (c?.finish_reason) finish = c.finish_reason;
        }
        return { tokens, finish };
      };
      const results = await Promise.all(Array.from({ length: 64 }, (_, i) => one(i)));
      for (const r of results) {
        assert.equal(r.finish, 'length');
        assert.ok(r.tokens >= 19, `tokens ${r.tokens}`);
      }
      assert.equal(f.sims[0]!.stats.requests, 64);
      assert.equal(f.gateway.metrics.count('chat', 'm', 200), 64);
      assert.equal(f.gateway.context.admission.inflight, 0);
    } finally {
      await f.close();
    }
  });

  it('a slow reader of a fast long stream pauses the backend; gateway memory stays bounded', async () => {
    // The sim runs in its own process, so this process's memory is the gateway's.
    const sim = await spawnRc(['sim', '--model', 'm', '--fast', '--port', '0', '--max-model-len', '10000000']);
    const f = await startFixture({ sims: [], models: () => [modelEntrySchema.parse({ name: 'm', upstreams: [sim.ready.url as string] })] });
    try {
      const body = JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 250_000, ignore_eos: true, stream: true });
      const url = new URL(f.gateway.url);
      const socket = connect(Number(url.port), url.hostname);
      socket.write(
        `POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${f.key}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
      );
      let received = 0;
      let tail = '';
      const done = new Promise<void>((resolve, reject) => {
        socket.on('data', (d: Buffer) => {
          received += d.length;
          tail = (tail + d.toString('latin1')).slice(-64);
          if (tail.includes('data: [DONE]\n\n')) resolve();
        });
        socket.on('error', reject);
        socket.on('close', () => resolve());
      });
      // Read a little, then stop reading.
      await waitFor(() => received > 0);
      socket.pause();
      global.gc?.();
      const base = process.memoryUsage().rss;
      await waitFor(() => f.gateway.metrics.backpressurePauses > 0);
      // Let the backend push whatever it can while the client reads nothing.
      await new Promise((r) => setTimeout(r, 500));
      const grown = process.memoryUsage().rss - base;
      // The whole stream is ~40 MB; paused, the gateway holds at most a few socket buffers' worth.
      assert.ok(grown < 16 * 1024 * 1024, `gateway rss grew by ${grown} bytes while the client read nothing`);
      assert.equal(f.gateway.context.admission.inflight, 1);
      socket.resume();
      await done;
      socket.destroy();
      assert.ok(tail.includes('data: [DONE]'), 'stream completed after the reader caught up');
      assert.ok(received > 30 * 1024 * 1024, `received ${received} bytes`);
      await waitFor(() => f.gateway.context.admission.inflight === 0);
    } finally {
      await f.close();
      await stop(sim.child);
    }
  });

  it('a catalog change while a stream is in flight does not drop it', async () => {
    const f = await startFixture({ sims: [{ ttftMs: 0, tokensPerSecond: 100 }, { fast: true }] });
    try {
      const [slow, other] = f.sims;
      const stream = (await f.client.chat.completions.create({
        model: 'm',
        messages: HELLO,
        max_tokens: 30,
        stream: true,
        ignore_eos: true,
        user: 'u',
      } as never)) as unknown as AsyncIterable<{ choices: { delta: { content?: string | null }; finish_reason: string | null }[] }>;
      // Which sim got it?
      const first = slow!.stats.requests === 1 ? slow! : other!;
      let tokens = 0;
      let finish: string | null = null;
      let changed = false;
      for await (const chunk of stream) {
        if (!changed) {
          // Replace the catalog: model m now only on a different upstream, plus a new model.
          const next = first === slow ? other! : slow!;
          f.gateway.setModels([
            modelEntrySchema.parse({ name: 'm', upstreams: [next.url] }),
            modelEntrySchema.parse({ name: 'n', servedName: 'm', upstreams: [next.url] }),
          ]);
          changed = true;
        }
        if (chunk.choices[0]?.delta.content) tokens++;
        if (chunk.choices[0]?.finish_reason) finish = chunk.choices[0].finish_reason;
      }
      assert.equal(finish, 'length');
      assert.ok(tokens >= 29);
      assert.deepEqual(
        (await f.client.models.list()).data.map((m) => m.id),
        ['m', 'n'],
      );
      // New requests follow the new catalog.
      const before = first.stats.requests;
      await f.client.chat.completions.create({ model: 'n', messages: HELLO, max_tokens: 2 });
      await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2 });
      assert.equal(first.stats.requests, before);
    } finally {
      await f.close();
    }
  });

  it('counts the ends of events (\\n\\n) a chunk holds, wherever it was cut', () => {
    const b = (t: string) => Buffer.from(t);
    assert.equal(countEventEnds(b('')), 0);
    assert.equal(countEventEnds(b('data: {}\n\ndata: {}\n\ndata: [DONE]\n\n')), 3);
    assert.equal(countEventEnds(b('data: {}\n\ndata: {')), 1);
    assert.equal(countEventEnds(b('data: a\ndata: b\n\n')), 1); // a two-line event
    assert.equal(countEventEnds(b('\n\n\n\n')), 2);
    assert.equal(countEventEnds(b('\n\n\n')), 1);
    assert.equal(countEventEnds(b('data: x\n')), 0); // an end split across chunks is not counted here
    assert.equal(countEventEnds(b('data: x\r\n\r\n')), 0); // only LF LF ends count, as the relay did before
  });
});
