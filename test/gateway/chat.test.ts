// The OpenAI-compatible surface through the official `openai` client, with sim as the backend.
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import OpenAI from 'openai';
import { generateKey, hashKey } from '../../lib/keys.js';
import { waitFor } from '../helpers.js';
import { HELLO, post, startFixture, type Fixture } from './fixture.js';

describe('gateway chat completions', () => {
  let f: Fixture;
  let auth: Record<string, string>;
  before(async () => {
    f = await startFixture();
    auth = { authorization: `Bearer ${f.key}` };
  });
  after(() => f.close());

  it('lists the catalog in the OpenAI list shape', async () => {
    const page = await f.client.models.list();
    const ids = page.data.map((m) => m.id);
    assert.deepEqual(ids, ['m']);
    assert.equal(page.data[0]!.object, 'model');
    assert.equal(typeof page.data[0]!.created, 'number');
    assert.equal(page.data[0]!.owned_by, 'rc');
  });

  it('creates a completion (non-stream) with usage, relayed as the backend wrote it', async () => {
    const c = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 16 });
    assert.equal(c.object, 'chat.completion');
    assert.equal(c.choices.length, 1);
    assert.ok(typeof c.choices[0]!.message.content === 'string');
    assert.ok(c.usage && c.usage.prompt_tokens > 0 && c.usage.completion_tokens > 0);
    // Forwarded unchanged: no stream_options added to a non-stream request.
    assert.equal(f.sims[0]!.stats.lastBody!.stream_options, undefined);
    const series = f.gateway.metrics.model('m');
    assert.ok(series.tokensIn >= c.usage.prompt_tokens);
  });

  it('streams without include_usage: the client sees no usage chunk, the gateway still meters it', async () => {
    const before = f.gateway.metrics.model('m').tokensOut;
    const stream = await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 12, stream: true });
    let text = '';
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      assert.equal(chunk.usage ?? undefined, undefined, 'no usage in any chunk');
      assert.ok(chunk.choices.length > 0, 'no usage-only chunk (choices: [])');
      text += chunk.choices[0]!.delta.content ?? '';
    }
    assert.ok(chunks > 1);
    assert.ok(text.length > 0);
    // The backend was asked for usage on the client's behalf...
    assert.deepEqual(f.sims[0]!.stats.lastBody!.stream_options, { include_usage: true });
    // ...and the gateway counted it.
    assert.ok(f.gateway.metrics.model('m').tokensOut > before);
  });

  it('streams with include_usage: the client gets the usage chunk', async () => {
    const stream = await f.client.chat.completions.create({
      model: 'm',
      messages: HELLO,
      max_tokens: 12,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | undefined;
    let last: OpenAI.ChatCompletionChunk | undefined;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      last = chunk;
    }
    assert.ok(usage && usage.completion_tokens > 0);
    assert.deepEqual(last!.choices, []);
  });

  it('keeps other stream_options the client sent when adding include_usage', async () => {
    const r = await post(
      `${f.gateway.url}/v1/chat/completions`,
      JSON.stringify({
        model: 'm',
        messages: HELLO,
        max_tokens: 4,
        stream: true,
        stream_options: { include_usage: false },
      }),
      auth,
    );
    assert.equal(r.status, 200);
    assert.deepEqual(f.sims[0]!.stats.lastBody!.stream_options, { include_usage: true });
    assert.ok(!r.text.includes('"usage":{'), 'usage event stripped');
    assert.ok(r.text.trimEnd().endsWith('data: [DONE]'));
  });

  it('accepts the key in x-api-key', async () => {
    const r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO, max_tokens: 4 }), { 'x-api-key': f.key });
    assert.equal(r.status, 200);
    assert.equal(r.json.object, 'chat.completion');
  });

  it('refuses a missing key with 401 Unauthorized: No API key provided.', async () => {
    for (const headers of [{}, { authorization: 'Bearer ' }] as Record<string, string>[]) {
      const r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), headers);
      assert.equal(r.status, 401);
      assert.equal(r.json.error.message, 'Unauthorized: No API key provided.');
      assert.equal(r.json.error.type, 'authentication_error');
    }
    // The openai client refuses to start without a key; a client that sends none gets the message above.
  });

  it('refuses unknown and malformed keys with 401 Invalid bearer token, code invalid_api_key', async () => {
    const cases: Record<string, string>[] = [
      { authorization: `Bearer ${generateKey()}` }, // well formed, unknown
      { authorization: 'Bearer rc-short' }, // malformed
      { authorization: 'Bearer sk-not-ours-at-all' },
      { authorization: `Basic ${f.key}` }, // wrong scheme
      { 'x-api-key': generateKey() },
    ];
    for (const headers of cases) {
      const r = await post(`${f.gateway.url}/v1/chat/completions`, JSON.stringify({ model: 'm', messages: HELLO }), headers);
      assert.equal(r.status, 401, JSON.stringify(headers));
      assert.deepEqual(r.json, { error: { message: 'Invalid bearer token', type: 'authentication_error', param: null, code: 'invalid_api_key' } });
    }
    const bad = f.clientWith(generateKey());
    await assert.rejects(
      bad.chat.completions.create({ model: 'm', messages: HELLO }),
      (e: unknown) => e instanceof OpenAI.AuthenticationError && (e as InstanceType<typeof OpenAI.APIError>).code === 'invalid_api_key',
    );
    // /v1/models needs a key too.
    const r = await fetch(`${f.gateway.url}/v1/models`);
    assert.equal(r.status, 401);
  });

  it('follows key events: an issued key works, a revoked key is refused', async () => {
    const key = generateKey();
    const client = f.clientWith(key);
    await assert.rejects(client.models.list(), OpenAI.AuthenticationError);
    await f.bus.publish({ type: 'key.issued', keyHash: hashKey(key), accountId: 7 });
    await client.models.list();
    await f.bus.publish({ type: 'key.revoked', keyHash: hashKey(key), accountId: 7 });
    await assert.rejects(client.chat.completions.create({ model: 'm', messages: HELLO }), OpenAI.AuthenticationError);
  });

  it('rejects a model not in the catalog with 400 before any backend is reached', async () => {
    const sent = f.sims[0]!.stats.requests;
    await assert.rejects(f.client.chat.completions.create({ model: 'gpt-nope', messages: HELLO }), (e: unknown) => {
      assert.ok(e instanceof OpenAI.BadRequestError);
      assert.equal(e.message.includes('Requested model gpt-nope not supported'), true);
      assert.equal(e.param, 'model');
      assert.equal(e.type, 'invalid_request_error');
      return true;
    });
    assert.equal(f.sims[0]!.stats.requests, sent);
  });

  it('answers bad bodies with 4xx in the chat shape, never 5xx', async () => {
    const url = `${f.gateway.url}/v1/chat/completions`;
    const cases: [string, number, string][] = [
      ['{not json', 400, 'invalid_json'],
      ['', 400, 'invalid_json'],
      ['[1,2]', 400, 'invalid_json'],
      ['"m"', 400, 'invalid_json'],
      ['null', 400, 'invalid_json'],
      ['{}', 400, 'invalid_model'],
      ['{"model":42}', 400, 'invalid_model'],
      ['{"model":""}', 400, 'invalid_model'],
      ['{"model":["m"]}', 400, 'invalid_model'],
    ];
    for (const [body, status, code] of cases) {
      const r = await post(url, body, auth);
      assert.equal(r.status, status, body);
      assert.equal(r.json.error.code, code, body);
      assert.equal(typeof r.json.error.message, 'string');
    }
    // A backend-side validation error passes through with the backend's status and body.
    const r = await post(url, JSON.stringify({ model: 'm', messages: 'not a list' }), auth);
    assert.equal(r.status, 400);
  });

  it('refuses oversized bodies with 413 (declared and chunked)', async () => {
    const g = await startFixture({ limits: { maxBodyBytes: 1024 } });
    try {
      const big = JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'x'.repeat(5000) }] });
      const r = await post(`${g.gateway.url}/v1/chat/completions`, big, { authorization: `Bearer ${g.key}` });
      assert.equal(r.status, 413);
      assert.equal(r.json.error.code, 'body_too_large');
      // Without Content-Length (chunked upload).
      const chunked = new ReadableStream({
        start(c) {
          for (let i = 0; i < 5; i++) c.enqueue(new TextEncoder().encode(big));
          c.close();
        },
      });
      const r2 = await fetch(`${g.gateway.url}/v1/chat/completions`, {
        method: 'POST',
        body: chunked,
        duplex: 'half',
        headers: { authorization: `Bearer ${g.key}`, 'content-type': 'application/json' },
      } as RequestInit);
      assert.equal(r2.status, 413);
      // The gateway still serves afterwards.
      const ok = await g.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2 });
      assert.equal(ok.object, 'chat.completion');
    } finally {
      await g.close();
    }
  });

  it('answers 404 in the chat shape for unserved /v1 paths (embeddings included), 405 for a wrong method', async () => {
    await assert.rejects(f.client.embeddings.create({ model: 'm', input: 'x' }), OpenAI.NotFoundError);
    for (const path of ['/v1/embeddings', '/v1/completions', '/v1/nope', '/elsewhere']) {
      const r = await post(`${f.gateway.url}${path}`, '{}', auth);
      assert.equal(r.status, 404, path);
      assert.equal(r.json.error.code, 'not_found');
    }
    const r = await fetch(`${f.gateway.url}/v1/chat/completions`, { headers: auth });
    assert.equal(r.status, 405);
    assert.equal(((await r.json()) as { error: { code: string } }).error.code, 'method_not_allowed');
  });

  it('exposes Prometheus metrics', async () => {
    await f.client.chat.completions.create({ model: 'm', messages: HELLO, max_tokens: 2 });
    const text = await (await fetch(`${f.gateway.metricsUrl}/metrics`)).text();
    assert.match(text, /^rc_gateway_requests_total\{route="chat",model="m",status="200"\} \d+$/m);
    assert.match(text, /^rc_gateway_requests_total\{route="chat",model="-",status="401"\} \d+$/m);
    assert.match(text, /^rc_gateway_inflight_requests 0$/m);
    assert.match(text, /^rc_gateway_upstream_ttfb_seconds_count\{model="m"\} [1-9]\d*$/m);
    assert.match(text, /^rc_gateway_upstream_duration_seconds_bucket\{model="m",le="\+Inf"\} [1-9]\d*$/m);
    assert.match(text, /^rc_gateway_tokens_total\{model="m",direction="out"\} [1-9]\d*$/m);
    assert.match(text, /^rc_gate_admitted_total \d+$/m, "the gates' counters are part of /metrics");
    assert.match(text, /^rc_gate_redis_fallback_total \d+$/m);
    await waitFor(() => f.gateway.context.admission.inflight === 0);
  });

  it('serves /metrics only on its own listener, never on the public port', async () => {
    const pub = await fetch(`${f.gateway.url}/metrics`, { headers: auth });
    assert.equal(pub.status, 404, 'the public port does not show the counters');
    assert.doesNotMatch(await pub.text(), /rc_gateway_requests_total/);
    assert.notEqual(f.gateway.metricsUrl, f.gateway.url);
    const other = await fetch(`${f.gateway.metricsUrl}/v1/models`, { headers: auth });
    assert.equal(other.status, 404, 'the metrics listener serves nothing else');
  });
});
