// Upstreams and admission: sticky routing, backend down, backend errors passed on (chat shape), stalls,
// the in-flight limit and the gate seam.
import assert from 'node:assert/strict';
import { createServer, type Socket } from 'node:net';
import { describe, it } from 'node:test';
import OpenAI from 'openai';
import { modelEntrySchema } from '../../lib/config.js';
import type { GateDecision, GateRequest, GateUsage, RequestGate } from '../../gateway/gates/gate.js';
import { waitFor } from '../helpers.js';
import { HELLO, post, startFixture } from './fixture.js';

/** A port nothing listens on. */
async function deadPort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  const port = (s.address() as { port: number }).port;
  await new Promise((r) => s.close(r));
  return port;
}

type Stream = AsyncIterable<{ choices: { delta: { content?: string | null } }[] }>;

describe('gateway upstreams', () => {
  it('routes the same user to the same upstream (sticky), spreads users over upstreams', async () => {
    const f = await startFixture({ sims: [{ fast: true }, { fast: true }, { fast: true }] });
    try {
      const counts = () => f.sims.map((s) => s.stats.requests);
      for (let i = 0; i < 6; i++) await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2, user: 'alice' });
      const afterAlice = counts();
      assert.equal(afterAlice.filter((n) => n === 6).length, 1, `alice on one upstream: ${afterAlice}`);
      // Many users land on more than one upstream.
      for (let i = 0; i < 30; i++) await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2, user: `user-${i}` });
      const spread = counts().map((n, i) => n - afterAlice[i]!);
      assert.ok(spread.filter((n) => n > 0).length >= 2, `users spread: ${spread}`);
      // Alice still goes to the same place.
      const before = counts();
      await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2, user: 'alice' });
      const delta = counts().map((n, i) => n - before[i]!);
      assert.equal(delta[afterAlice.indexOf(6)], 1);
    } finally {
      await f.close();
    }
  });

  it('answers 502 Model gateway is unavailable when the backend is down', async () => {
    const port = await deadPort();
    const f = await startFixture({ sims: [], models: () => [modelEntrySchema.parse({ name: 'm', upstreams: [`http://127.0.0.1:${port}`] })] });
    try {
      await assert.rejects(f.client.chat.completions.create({ model: 'm', messages: HELLO }), (e: unknown) => {
        assert.ok(e instanceof OpenAI.APIError);
        assert.equal(e.status, 502);
        assert.equal(e.message.includes('Model gateway is unavailable'), true);
        assert.equal(e.code, 'upstream_unavailable');
        return true;
      });
      assert.equal(f.gateway.context.admission.inflight, 0);
      // A model without upstreams: 502 too.
      f.gateway.setModels([modelEntrySchema.parse({ name: 'm' })]);
      const r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), { authorization: `Bearer ${f.key}` });
      assert.equal(r.status, 502);
    } finally {
      await f.close();
    }
  });

  it('fails over from a refused upstream and takes it out of rotation', async () => {
    const port = await deadPort();
    // 'least-loaded': the pick rotates among tied upstreams (the prefix policy would keep these
    // identical requests on the one backend their conversation key ranks first, whichever it is).
    const f = await startFixture({
      models: (sims) => [modelEntrySchema.parse({ name: 'm', upstreams: [`http://127.0.0.1:${port}`, sims[0]!.url], routing: 'least-loaded' })],
    });
    try {
      // No `user`: the pick rotates among tied upstreams, so the dead one is tried within the first
      // two requests (with sticky users, which upstream a user hashes to depends on the random port).
      for (let i = 0; i < 4; i++) {
        const c = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2 });
        assert.equal(c.object, 'chat.completion');
      }
      assert.equal(f.sims[0]!.stats.requests, 4);
      const dead = f.gateway.context.upstreams.all().find((u) => u.url.endsWith(`:${port}`))!;
      assert.ok(dead.ejectedUntil > 0, 'the refused upstream is out');
    } finally {
      await f.close();
    }
  });

  it('passes backend 500 and 429 through with status, message and Retry-After, in the chat shape', async () => {
    const f = await startFixture();
    try {
      const sim = f.sims[0]!;
      sim.setFault({ kind: '500', count: 1 });
      let r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), { authorization: `Bearer ${f.key}` });
      assert.equal(r.status, 500);
      assert.match(r.json.error.message, /Simulated internal server error/);
      sim.setFault({ kind: '429', count: 1, retryAfterS: 7 });
      r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, stream: true }), {
        authorization: `Bearer ${f.key}`,
      });
      assert.equal(r.status, 429);
      assert.equal(r.headers.get('retry-after'), '7');
      assert.match(r.json.error.message, /Simulated rate limit/);
      // The openai client sees the same.
      sim.setFault({ kind: '429', count: 1, retryAfterS: 3 });
      await assert.rejects(
        f.client.chat.completions.create({ model: 'm', messages: HELLO }),
        (e: unknown) => e instanceof OpenAI.RateLimitError && e.headers?.get('retry-after') === '3',
      );
      // A context-length error raised by the model passes through as the backend's 400 (max
      // tokens fitting, on by default, turned off for the request).
      r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 10_000_000 }), {
        authorization: `Bearer ${f.key}`,
        'x-rc-fit-max-tokens': '0',
      });
      assert.equal(r.status, 400);
      assert.match(r.json.error.message, /maximum context length/);
      assert.equal(f.gateway.context.admission.inflight, 0);
    } finally {
      await f.close();
    }
  });

  it('waits for a busy backend past the head and idle limits, and a slow answer never takes it out', async () => {
    // Limits of 150 ms against a first token after 800 ms: a non-stream answer's head and a
    // stream's first event (the sim sends a stream's head at once) come after 5 limits. The sim
    // answers /health, so the gateway waits; one failure would take the backend out.
    const f = await startFixture({
      sims: [{ ttftMs: 800, tokensPerSecond: 200 }],
      upstream: { headersTimeoutMs: 150, idleTimeoutMs: 150, failuresToEject: 1 },
    });
    try {
      const c = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 3 });
      assert.equal(c.object, 'chat.completion');
      const stream = (await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 3, stream: true })) as unknown as Stream;
      let chunks = 0;
      for await (const _ of stream) chunks++;
      assert.ok(chunks > 0);
      const up = f.gateway.context.upstreams.all()[0]!;
      assert.equal(up.ejectedUntil, 0, 'the slow backend is still in rotation');
    } finally {
      await f.close();
    }
  });

  it('a backend that accepts and never answers, its /health neither, gets 502 upstream_timeout and is taken out', async () => {
    const sockets = new Set<Socket>();
    const silent = createServer((s) => {
      sockets.add(s);
      s.on('error', () => {});
    });
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
    const f = await startFixture({
      sims: [],
      models: () => [modelEntrySchema.parse({ name: 'm', upstreams: [url], maxContext: 4096, fitMaxTokens: false })],
      upstream: { headersTimeoutMs: 150, failuresToEject: 1 },
    });
    try {
      const r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 5 }), {
        authorization: `Bearer ${f.key}`,
      });
      assert.equal(r.status, 502);
      assert.equal(r.json.error.code, 'upstream_timeout');
      assert.ok(f.gateway.context.upstreams.all()[0]!.ejectedUntil > 0, 'the dead backend is out');
      await waitFor(() => f.gateway.context.admission.inflight === 0);
    } finally {
      await f.close();
      for (const s of sockets) s.destroy();
      await new Promise((r) => silent.close(r));
    }
  });

  it('a live backend that never answers a request gets 502 upstream_timeout at the total limit, and stays in', async () => {
    const f = await startFixture({ upstream: { headersTimeoutMs: 150, requestTimeoutMs: 800, failuresToEject: 1 } });
    try {
      f.sims[0]!.setFault({ kind: 'stall-before' });
      await assert.rejects(f.client.chat.completions.create({ model: 'm', messages: HELLO }), (e: unknown) => {
        assert.ok(e instanceof OpenAI.APIError);
        assert.equal(e.status, 502);
        assert.equal(e.code, 'upstream_timeout');
        return true;
      });
      assert.equal(f.gateway.context.upstreams.all()[0]!.ejectedUntil, 0, 'a slow answer does not take the backend out');
      await waitFor(() => f.gateway.context.admission.inflight === 0);
    } finally {
      await f.close();
    }
  });

  it('a backend that stalls mid-stream ends the stream with an error, it does not hang', async () => {
    // The sim answers /health: its silence is waited for until the total limit.
    const f = await startFixture({ sims: [{ ttftMs: 0, tokensPerSecond: 200 }], upstream: { idleTimeoutMs: 300, requestTimeoutMs: 1000 } });
    try {
      f.sims[0]!.setFault({ kind: 'stall-during', afterChunks: 3 });
      const stream = (await f.client.chat.completions.create({
        model: 'm',
        messages: HELLO,
        max_tokens: 50,
        stream: true,
        ignore_eos: true,
      } as never)) as unknown as Stream;
      let tokens = 0;
      await assert.rejects(
        async () => {
          for await (const c of stream) if (c.choices[0]?.delta.content) tokens++;
        },
        (e: unknown) => e instanceof OpenAI.APIError && /stream failed/.test(e.message),
      );
      assert.equal(tokens, 3);
      await waitFor(() => f.gateway.context.admission.inflight === 0);
      // A backend that cuts the connection mid-stream: same ending.
      f.sims[0]!.setFault({ kind: 'close-mid-stream', afterChunks: 2 });
      const s2 = (await f.client.chat.completions.create({
        model: 'm',
        messages: HELLO,
        max_tokens: 50,
        stream: true,
        ignore_eos: true,
      } as never)) as unknown as Stream;
      await assert.rejects(async () => {
        for await (const _ of s2) {
          /* drain */
        }
      }, OpenAI.APIError);
    } finally {
      await f.close();
    }
  });

  it('relays a backend that leaves Nagle on, stream after stream', async () => {
    // As Python's http.server writes: the head in one write, then each SSE event a small write of
    // its own, TCP_NODELAY off (bench/first-token.ts times this; here, only that it all arrives).
    const event = (delta: string, finish: string) =>
      `data: {"id":"c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":${delta},"finish_reason":${finish}}]}\n\n`;
    const backend = createServer((socket) => {
      socket.setNoDelay(false);
      socket.on('error', () => {});
      let pending = '';
      socket.on('data', (d: Buffer) => {
        pending += d.toString('latin1');
        const end = pending.indexOf('\r\n\r\n');
        const length = Number(/content-length: *(\d+)/i.exec(pending)?.[1] ?? 0);
        if (end < 0 || pending.length < end + 4 + length) return;
        pending = pending.slice(end + 4 + length);
        socket.write('HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n');
        for (const e of [...['a', 'b', 'c'].map((t) => event(`{"content":"${t}"}`, 'null')), event('{}', '"stop"'), 'data: [DONE]\n\n']) {
          socket.write(`${Buffer.byteLength(e).toString(16)}\r\n${e}\r\n`);
        }
        socket.write('0\r\n\r\n');
      });
    });
    await new Promise<void>((r) => backend.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(backend.address() as { port: number }).port}`;
    const f = await startFixture({ sims: [], models: () => [modelEntrySchema.parse({ name: 'm', upstreams: [url], maxContext: 4096, fitMaxTokens: false })] });
    try {
      for (let i = 0; i < 5; i++) {
        const stream = (await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 5, stream: true })) as unknown as Stream;
        let text = '';
        for await (const c of stream) text += c.choices[0]?.delta.content ?? '';
        assert.equal(text, 'abc');
      }
      await waitFor(() => f.gateway.context.admission.inflight === 0);
    } finally {
      await f.close();
      await new Promise((r) => backend.close(r));
    }
  });

  it('answers 503 pool exhausted with Retry-After: 5 beyond the in-flight limit', async () => {
    const f = await startFixture({ limits: { maxInflight: 1 } });
    try {
      f.sims[0]!.setFault({ kind: 'stall-before', count: 1 });
      const stalled = fetch(`${f.gateway.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${f.key}` },
        body: JSON.stringify({ model: 'm', messages: HELLO }),
        signal: AbortSignal.timeout(20_000),
      }).catch(() => undefined);
      // (The first request to a model whose context is not yet known counts its prompt first, on a slot of its own.)
      await waitFor(() => f.sims[0]!.stats.requests === 1 && f.gateway.context.admission.inflight === 1);
      const r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), { authorization: `Bearer ${f.key}` });
      assert.equal(r.status, 503);
      assert.equal(r.headers.get('retry-after'), '5');
      assert.deepEqual(r.json.error.message, 'Model gateway connection pool exhausted');
      assert.equal(f.sims[0]!.stats.requests, 1);
      // Closing the gateway cuts the stalled request.
      await f.gateway.close(0);
      await stalled;
    } finally {
      await f.close();
    }
  });
});

/** A real RequestGate that records its calls and refuses when told to. */
class RecordingGate implements RequestGate {
  admitted: GateRequest[] = [];
  settled: { req: GateRequest; usage: GateUsage | undefined }[] = [];
  refuse: { code: string; retryAfterSec: number } | undefined;
  delayMs = 0;
  admit(req: GateRequest): GateDecision | Promise<GateDecision> {
    this.admitted.push(req);
    const d: GateDecision = this.refuse
      ? { allowed: false, ...this.refuse, headers: { 'x-ratelimit-remaining-requests': '0' } }
      : { allowed: true, headers: { 'x-ratelimit-remaining-requests': '9' }, reservation: req.estimatedTokens };
    return this.delayMs ? new Promise((r) => setTimeout(() => r(d), this.delayMs)) : d;
  }
  settle(req: GateRequest, _d: GateDecision & { allowed: true }, usage: GateUsage | undefined): void {
    this.settled.push({ req, usage });
  }
}

describe('gateway gate seam', () => {
  it('admits with an estimate, settles exactly once with the real usage, refuses with 429', async () => {
    const gate = new RecordingGate();
    const f = await startFixture({ gate, sims: [{ ttftMs: 0, tokensPerSecond: 50 }] });
    try {
      const res = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 5 }).withResponse();
      assert.equal(res.response.headers.get('x-ratelimit-remaining-requests'), '9');
      assert.equal(gate.admitted.length, 1);
      assert.equal(gate.admitted[0]!.accountId, f.accountId);
      assert.equal(gate.admitted[0]!.model, 'm');
      assert.ok(gate.admitted[0]!.estimatedTokens >= 5);
      await waitFor(() => gate.settled.length === 1);
      assert.deepEqual(gate.settled[0]!.usage, { inputTokens: res.data.usage!.prompt_tokens, outputTokens: res.data.usage!.completion_tokens });

      // A stream the client did not ask usage for: still settled with the real usage.
      const stream = (await f.client.chat.completions.create({
        model: 'm',
        messages: HELLO,
        max_tokens: 4,
        stream: true,
        ignore_eos: true,
      } as never)) as unknown as Stream;
      for await (const _ of stream) {
        /* drain */
      }
      await waitFor(() => gate.settled.length === 2);
      assert.equal(gate.settled[1]!.usage!.outputTokens, 4);

      // Aborted mid-stream: settled once, charged what was relayed (issue 14: an abort is not free).
      const s3 = (await f.client.chat.completions.create({
        model: 'm',
        messages: HELLO,
        max_tokens: 200,
        stream: true,
        ignore_eos: true,
      } as never)) as unknown as Stream;
      for await (const _ of s3) break;
      await waitFor(() => gate.settled.length === 3);
      const aborted = gate.settled[2]!.usage!;
      // The input charged is the estimate (bytes / 4), within what was reserved for it (the bound).
      assert.ok(aborted.inputTokens > 0 && aborted.inputTokens <= gate.admitted[2]!.inputTokens!, `charged ${aborted.inputTokens} input tokens`);
      assert.ok(aborted.outputTokens >= 1 && aborted.outputTokens < 200, `charged ${aborted.outputTokens} output tokens`);

      // Async admission works the same.
      gate.delayMs = 20;
      await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2 });
      await waitFor(() => gate.settled.length === 4);

      // Refused: 429 with Retry-After and the gate's code; nothing settled, nothing forwarded.
      gate.refuse = { code: 'token_rate_limit_exceeded', retryAfterSec: 12 };
      const sent = f.sims[0]!.stats.requests;
      await assert.rejects(f.client.chat.completions.create({ model: 'm', messages: HELLO }), (e: unknown) => {
        assert.ok(e instanceof OpenAI.RateLimitError);
        assert.equal(e.code, 'token_rate_limit_exceeded');
        assert.equal(e.type, 'rate_limit_error');
        assert.equal(e.headers?.get('retry-after'), '12');
        assert.match(e.message, /Model API rate limit exceeded; please retry later/);
        return true;
      });
      assert.equal(f.sims[0]!.stats.requests, sent);
      await new Promise((r) => setTimeout(r, 50));
      assert.equal(gate.settled.length, 4);
      assert.equal(f.gateway.context.admission.inflight, 0);
    } finally {
      await f.close();
    }
  });
});
