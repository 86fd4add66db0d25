// Faults on demand (header and setFault, standing and counted), pacing, and client aborts.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { request } from 'undici';
import { startSim, type SimServer } from '../../sim/server.js';
import { waitFor } from '../helpers.js';
import { isVllmError, postJson, simWithClient, user } from './sim-helpers.js';

let sim: SimServer;
let client: OpenAI;
before(async () => ({ sim, client } = await simWithClient()));
after(() => sim.close());

const body = (extra: Record<string, unknown> = {}) => JSON.stringify({ model: 'sim-test', messages: [user('x')], max_tokens: 10, ignore_eos: true, ...extra });

/** Opens a streamed completion and returns the events as they arrive, plus an abort. */
async function openStream(url: string, headers: Record<string, string> = {}) {
  const ac = new AbortController();
  const res = await request(`${url}/v1/chat/completions`, {
    method: 'POST',
    body: body({ stream: true }),
    headers: { 'content-type': 'application/json', ...headers },
    signal: ac.signal,
  });
  const events: string[] = [];
  let buffer = '';
  let ended: 'end' | 'error' | undefined;
  (async () => {
    try {
      for await (const chunk of res.body) {
        buffer += chunk.toString();
        let i;
        while ((i = buffer.indexOf('\n\n')) >= 0) {
          events.push(buffer.slice(0, i));
          buffer = buffer.slice(i + 2);
        }
      }
      ended = 'end';
    } catch {
      ended = 'error';
    }
  })();
  return { res, events, ended: () => ended, abort: () => ac.abort() };
}

test('fault 500 by header: vLLM 500 body; the next request is fine', async () => {
  const before = sim.stats.faulted;
  const r = await postJson(`${sim.url}/v1/chat/completions`, body(), { 'x-sim-fault': '500' });
  assert.equal(r.status, 500);
  assert.ok(isVllmError(r.body, 500));
  assert.equal(sim.stats.faulted, before + 1);
  await assert.rejects(
    client.chat.completions.create({ model: 'sim-test', messages: [user('x')] }, { headers: { 'x-sim-fault': '500' } }),
    OpenAI.InternalServerError,
  );
  const ok = await client.chat.completions.create({ model: 'sim-test', messages: [user('x')] });
  assert.equal(ok.choices[0]!.finish_reason, 'stop');
});

test('fault 429 with Retry-After, set programmatically for the next 2 requests only', async () => {
  sim.setFault({ kind: '429', count: 2, retryAfterS: 3 });
  for (let i = 0; i < 2; i++) {
    const r = await postJson(`${sim.url}/v1/chat/completions`, body());
    assert.equal(r.status, 429);
    assert.equal(r.headers.get('retry-after'), '3');
    assert.ok(isVllmError(r.body, 429));
  }
  const third = await postJson(`${sim.url}/v1/chat/completions`, body());
  assert.equal(third.status, 200);
  const viaHeader = await postJson(`${sim.url}/v1/chat/completions`, body(), { 'x-sim-fault': '429; retry-after=7' });
  assert.equal(viaHeader.status, 429);
  assert.equal(viaHeader.headers.get('retry-after'), '7');
});

test('a standing fault applies until cleared', async () => {
  sim.setFault({ kind: '500' });
  try {
    for (let i = 0; i < 3; i++) assert.equal((await postJson(`${sim.url}/v1/chat/completions`, body())).status, 500);
  } finally {
    sim.setFault(undefined);
  }
  assert.equal((await postJson(`${sim.url}/v1/chat/completions`, body())).status, 200);
});

test('close-mid-stream: a few chunks, then the connection is destroyed (stream and non-stream)', async () => {
  const chunks: unknown[] = [];
  await assert.rejects(async () => {
    const stream = await client.chat.completions.create(
      { model: 'sim-test', messages: [user('x')], max_tokens: 10, stream: true },
      { headers: { 'x-sim-fault': 'close-mid-stream; after=4' } },
    );
    for await (const c of stream) chunks.push(c);
  });
  assert.equal(chunks.length, 5, 'role chunk + 4 token chunks');
  sim.setFault({ kind: 'close-mid-stream', count: 1 });
  await assert.rejects(client.chat.completions.create({ model: 'sim-test', messages: [user('x')] }));
  assert.equal((await postJson(`${sim.url}/v1/chat/completions`, body())).status, 200);
});

test('stall-before: no headers ever; the client aborting ends the request', async () => {
  const faulted = sim.stats.faulted;
  const aborted = sim.stats.aborted;
  const ac = new AbortController();
  let settled = false;
  const p = request(`${sim.url}/v1/chat/completions`, { method: 'POST', body: body(), headers: { 'x-sim-fault': 'stall-before' }, signal: ac.signal }).then(
    () => {
      settled = true;
    },
    (err: Error) => err,
  );
  await waitFor(() => sim.stats.faulted === faulted + 1);
  assert.equal(sim.stats.inFlight, 1);
  assert.equal(settled, false);
  ac.abort();
  assert.ok((await p) instanceof Error);
  await waitFor(() => sim.stats.aborted === aborted + 1 && sim.stats.inFlight === 0);
});

test('stall-during: some chunks, then silence with the stream open; abort ends it', async () => {
  const aborted = sim.stats.aborted;
  const s = await openStream(sim.url, { 'x-sim-fault': 'stall-during; after=2' });
  assert.equal(s.res.statusCode, 200);
  await waitFor(() => s.events.length >= 3);
  assert.equal(s.events.length, 3, 'role + 2 tokens');
  assert.equal(s.ended(), undefined);
  assert.equal(sim.stats.inFlight, 1);
  s.abort();
  await waitFor(() => sim.stats.aborted === aborted + 1 && sim.stats.inFlight === 0);
});

test('an unknown x-sim-fault value: 400', async () => {
  const r = await postJson(`${sim.url}/v1/chat/completions`, body(), { 'x-sim-fault': 'explode' });
  assert.equal(r.status, 400);
  assert.ok(isVllmError(r.body, 400));
  assert.equal(r.body.error.param, 'x-sim-fault');
});

test('paced mode: streams every token; a client abort mid-stream stops it; close() cuts stalled requests', async () => {
  const paced = await startSim({ model: 'sim-test', ttftMs: 1, tokensPerSecond: 2000 });
  try {
    const c = new OpenAI({ baseURL: `${paced.url}/v1`, apiKey: 'x', maxRetries: 0 });
    let n = 0;
    for await (const ch of await c.chat.completions.create({ model: 'sim-test', messages: [user('x')], max_tokens: 15, stream: true }))
      if (ch.choices[0]?.delta.content) n++;
    assert.equal(n, 15);
    const r = await c.chat.completions.create({ model: 'sim-test', messages: [user('x')], max_tokens: 15 });
    assert.equal(r.usage!.completion_tokens, 15);

    paced.setFault(undefined);
    const slow = await startSim({ model: 'sim-test', ttftMs: 0, tokensPerSecond: 5 });
    try {
      const s = await openStream(slow.url);
      await waitFor(() => s.events.length >= 2);
      s.abort();
      await waitFor(() => slow.stats.aborted === 1 && slow.stats.inFlight === 0);
      assert.equal(slow.stats.completed, 0);
      const stalled = await openStream(slow.url, { 'x-sim-fault': 'stall-during; after=1' });
      await waitFor(() => stalled.events.length >= 2);
    } finally {
      await slow.close();
    }
    assert.equal(slow.stats.inFlight, 0);
  } finally {
    await paced.close();
  }
});
