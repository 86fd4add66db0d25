// Bad-input sweep of the instance surfaces: dedicated endpoints (`/dedicated/...` and the
// `/instances/...` alias on the gateway), the instance proxy, and the tunnel broker
// (`/tunnel/connect`, a host name per tunnel on its listener; the old `/t/...` redirects). A real vllm-demo instance (the sim as a child process of the
// local agent) and a real rc-tunnel client. Refusals of these surfaces are `{detail}`; after
// admission the backend's answer (the sim's vLLM-shaped errors) is relayed verbatim.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import WebSocket from 'ws';
import { TunnelClient, type TunnelStatus } from '../../agent/tunnel/client.js';
import { issueTunnelToken, tunnelSecret } from '../../lib/tunnel/identity.js';
import { decodeFrame, encodeFrame, FrameType } from '../../lib/tunnel/protocol.js';
import { waitFor } from '../helpers.js';
import { hashKey } from '../../lib/keys.js';
import {
  assertRefused,
  BAD_BODIES,
  BAD_VALUES,
  exchange,
  Failures,
  request,
  requestBytes,
  shapeProblem,
  startSweepPlatform,
  withField,
  type RawReply,
  type Shape,
  type SweepPlatform,
} from './harness.js';

let p: SweepPlatform;
let ownerKey: string;
let owner: { cookie: string; csrf: string };
/** The owner's proxy cookie on the instance's origin (from the hand-over), and that origin's Host. */
let ownerProxy: string;
let proxyHost: string;
let instanceId: string;
let dedicatedPath: string;
/** The old path form of the tunnel's URL, `/t/<id>` (now only redirected to its origin). */
let tunnelPath: string;
/** The tunnel's own host name (`<id>.localhost:<port>`): the tunnels' listener routes by it. */
let tunnelHost: string;
let tunnel: TunnelClient;
let secret: string;

const json = { 'content-type': 'application/json' };
const CHAT = { model: 'demo', messages: [{ role: 'user', content: 'hi' }], max_tokens: 3 };

before(async () => {
  p = await startSweepPlatform();
  const a = await p.account('owner@example.com', { verified: true, credits: 10, password: 'long enough pw' });
  ownerKey = a.api_token!;
  owner = await p.login('owner@example.com', 'long enough pw');
  const templates = JSON.parse((await request(p.api, 'GET', '/api/templates')).body) as { templates: { id: number; slug: string }[] };
  const vllm = templates.templates.find((t) => t.slug === 'vllm-demo')!;
  const launched = await request(p.api, 'POST', `/api/templates/${vllm.id}/launch`, { headers: { ...json, authorization: `Bearer ${ownerKey}` }, body: '{}' });
  assert.equal(launched.status, 200, launched.body);
  const ready = await waitFor(
    async () => {
      const st = JSON.parse((await request(p.api, 'GET', '/api/notebook/status', { headers: { authorization: `Bearer ${ownerKey}` } })).body) as {
        status: string;
        instance_id: string;
        dedicated_base_url: string;
      };
      assert.notEqual(st.status, 'failed', JSON.stringify(st));
      return st.status === 'ready' ? st : undefined;
    },
    30_000,
    50,
  );
  instanceId = ready.instance_id;
  // The hand-over: the API's open route, then the ticket on the instance's own origin.
  proxyHost = `${instanceId}.localhost:${p.proxy}`;
  const opened = await request(p.api, 'GET', `/api/instances/${instanceId}/open`, { headers: { cookie: owner.cookie } });
  assert.equal(opened.status, 302, opened.body);
  const location = new URL(opened.headers.location!);
  const redeemed = await request(p.proxy, 'GET', `${location.pathname}${location.search}`, { headers: { host: proxyHost } });
  assert.equal(redeemed.status, 302, redeemed.body);
  ownerProxy = redeemed.headers['set-cookie']!.split(';')[0]!;
  dedicatedPath = new URL(ready.dedicated_base_url).pathname.replace(/\/+$/, ''); // /dedicated/<id>/8000/v1
  // rc-tunnel, as inside the instance, exposing the catalog sim.
  secret = tunnelSecret(p.platform.config.tunnelSecret, p.dataDir);
  const statuses: TunnelStatus[] = [];
  tunnel = new TunnelClient({
    broker: p.platform.gateway.url,
    token: issueTunnelToken(secret, instanceId),
    port: p.platform.sims[0]!.port,
    log: () => {},
    onStatus: (s) => statuses.push(s),
    maxBackoffMs: 200,
  });
  tunnel.start();
  const connected = await waitFor(() => statuses.find((s) => s.state === 'connected' && s.publicUrl));
  tunnelHost = new URL(connected.publicUrl!).host;
  tunnelPath = `/t/${connected.tunnelId}`;
});
after(async () => {
  tunnel?.stop();
  await p?.close();
});

const keyHeaders = () => ({ ...json, authorization: `Bearer ${ownerKey}` });
/** What a browser sends to the instance's origin: its Host and the proxy cookie (the console's cookie is another host's). */
const sessionHeaders = () => ({ ...json, host: proxyHost, cookie: ownerProxy });
const ANY_ANSWER = [200, 400, 401, 403, 404, 405, 413, 422];

interface Surface {
  name: string;
  port: () => number;
  /** Base path; the sim's routes follow. */
  base: () => string;
  headers: () => Record<string, string>;
}

const SURFACES: Surface[] = [
  { name: 'dedicated', port: () => p.gateway, base: () => dedicatedPath.replace(/\/v1$/, ''), headers: keyHeaders },
  { name: 'gateway /instances alias', port: () => p.gateway, base: () => `/instances/${instanceId}`, headers: keyHeaders },
  { name: 'instance proxy', port: () => p.proxy, base: () => '', headers: sessionHeaders },
  { name: 'tunnel', port: () => p.tunnels, base: () => '', headers: () => ({ ...json, host: tunnelHost }) },
];

/** After admission the sim answers (vLLM shape); refusals of the surface itself are {detail}. */
const RELAYED: Shape[] = ['vllm', 'detail'];

async function assertServing(): Promise<void> {
  for (const s of SURFACES) {
    const r = await request(s.port(), 'POST', `${s.base()}/v1/chat/completions`, {
      headers: s.headers(),
      body: JSON.stringify(s.name === 'tunnel' ? { ...CHAT, model: p.platform.sims[0]!.model } : CHAT),
    });
    assert.equal(r.status, 200, `${s.name} follow-up: ${r.status} ${r.body}`);
  }
}

test('bodies relayed verbatim: the backend refuses bad ones with a 4xx, no surface answers 5xx', async () => {
  const f = new Failures();
  for (const s of SURFACES) {
    const good = s.name === 'tunnel' ? { ...CHAT, model: p.platform.sims[0]!.model } : CHAT;
    for (const [name, body] of BAD_BODIES) {
      const label = `${s.name} body ${name}`;
      await f.check(label, async () =>
        assertRefused(label, await request(s.port(), 'POST', `${s.base()}/v1/chat/completions`, { headers: s.headers(), body }), {
          status: [400],
          shapes: RELAYED,
        }),
      );
    }
    for (const field of ['model', 'messages', 'max_tokens', 'stream', 'tools']) {
      for (const [name, value] of BAD_VALUES) {
        const label = `${s.name} ${field}=${name}`;
        await f.check(label, async () =>
          assertRefused(
            label,
            await request(s.port(), 'POST', `${s.base()}/v1/chat/completions`, { headers: s.headers(), body: withField(good, field, value) }),
            { status: ANY_ANSWER, shapes: RELAYED },
          ),
        );
      }
    }
  }
  f.assertNone();
  await assertServing();
});

test('admission: credentials, other accounts, unknown instances and ports, /v1/messages', async () => {
  const f = new Failures();
  const other = await p.account('other@example.com', { verified: true, password: 'long enough pw' });
  const otherSession = await p.login('other@example.com', 'long enough pw');
  // A proxy cookie of another account's live session, made for this instance (the hand-over refuses to make one).
  const otherProxy = p.platform.proxy.proxy.cookies.value(instanceId, hashKey(otherSession.cookie.split('=')[1]!));
  const ded = dedicatedPath.replace(/\/v1$/, '');
  const body = JSON.stringify(CHAT);
  const cases: [string, number, string, Record<string, string>, number[]][] = [
    ['dedicated without key', p.gateway, `${ded}/v1/chat/completions`, json, [401]],
    ['dedicated Basic', p.gateway, `${ded}/v1/chat/completions`, { ...json, authorization: 'Basic eDp5' }, [401]],
    ['dedicated unknown key', p.gateway, `${ded}/v1/chat/completions`, { ...json, authorization: `Bearer rc-${'Z'.repeat(43)}` }, [401]],
    ['dedicated long key', p.gateway, `${ded}/v1/chat/completions`, { ...json, authorization: `Bearer ${'k'.repeat(3000)}` }, [401]],
    ['dedicated session cookie only', p.gateway, `${ded}/v1/chat/completions`, { ...json, cookie: owner.cookie }, [401]],
    ['dedicated another account', p.gateway, `${ded}/v1/chat/completions`, { ...json, authorization: `Bearer ${other.api_token}` }, [403]],
    ['dedicated x-api-key another account', p.gateway, `${ded}/v1/chat/completions`, { ...json, 'x-api-key': other.api_token! }, [403]],
    ['dedicated /v1/messages', p.gateway, `${ded}/v1/messages`, keyHeaders(), [404]],
    ['dedicated /api/v1/messages', p.gateway, `${ded}/api/v1/messages`, keyHeaders(), [404]],
    ['dedicated count_tokens', p.gateway, `${ded}/v1/messages/count_tokens`, keyHeaders(), [404]],
    ['proxy without session', p.proxy, '/v1/chat/completions', { ...json, host: proxyHost }, [401]],
    ['proxy with the key', p.proxy, '/v1/chat/completions', { ...keyHeaders(), host: proxyHost }, [403]],
    ['proxy with x-api-key', p.proxy, '/v1/chat/completions', { ...sessionHeaders(), 'x-api-key': ownerKey }, [403]],
    ['proxy another session', p.proxy, '/v1/chat/completions', { ...json, host: proxyHost, cookie: `rc_proxy=${otherProxy}` }, [403]],
    ['proxy console session only', p.proxy, '/v1/chat/completions', { ...json, host: proxyHost, cookie: owner.cookie }, [401]],
    ['proxy two proxy cookies', p.proxy, '/v1/chat/completions', { ...sessionHeaders(), cookie: `${ownerProxy}; ${ownerProxy}` }, [401]],
    ['proxy garbage session', p.proxy, '/v1/chat/completions', { ...json, host: proxyHost, cookie: 'rc_proxy=x'.repeat(200) }, [401]],
    ['proxy unknown instance', p.proxy, '/v1/chat/completions', { ...sessionHeaders(), host: `inst-nope.localhost:${p.proxy}` }, [401, 404]],
    ['proxy ticket forged', p.proxy, '/_rc/auth?ticket=forged', { ...json, host: proxyHost }, [401, 405]],
    ['tunnel unknown id', p.tunnels, '/t/tnope/v1/chat/completions', json, [404]],
  ];
  const paths: [string, number, string, Record<string, string>][] = [];
  for (const bad of [
    '',
    '/',
    '/x',
    '/x/',
    `/${instanceId}`,
    `/${instanceId}/`,
    `/${instanceId}/abc/v1`,
    `/${instanceId}/0/v1`,
    `/${instanceId}/99999/v1`,
    `/${instanceId}/8001/v1/models`,
    `/${instanceId}/08000/v1/models`,
    `/${instanceId}/8000/../../../api/me`,
    `/${instanceId}/8000/v1/models%00`,
    `/${instanceId}/8000/%ZZ`,
    `/%2e%2e/8000/v1/models`,
    `/${instanceId}%2F8000/v1/models`,
    `/${'i'.repeat(3000)}/8000/v1`,
    `/${instanceId}/8000/${'p/'.repeat(1500)}`,
  ]) {
    paths.push([`dedicated path ${bad.slice(0, 50)}`, p.gateway, `/dedicated${bad}`, keyHeaders()]);
  }
  for (const bad of [
    '',
    '/',
    `/${instanceId}`,
    `/${instanceId}/%ZZ`,
    `/${instanceId}/../../api/me`,
    `/${instanceId}/v1/models%00`,
    `/${'i'.repeat(3000)}/`,
    '/inst_nope',
  ]) {
    paths.push([`gateway alias path ${bad.slice(0, 50)}`, p.gateway, `/instances${bad}`, keyHeaders()]);
    paths.push([`gateway alias path without key ${bad.slice(0, 50)}`, p.gateway, `/instances${bad}`, json]);
    paths.push([`proxy old path form ${bad.slice(0, 50)}`, p.proxy, `/instances${bad}`, { ...json, cookie: owner.cookie }]);
    paths.push([`proxy path ${bad.slice(0, 50)}`, p.proxy, bad || '/', sessionHeaders()]);
  }
  for (const bad of [
    '',
    '/',
    `${tunnelPath.slice(2)}`,
    `${tunnelPath.slice(2)}/%ZZ`,
    `${tunnelPath.slice(2)}/../../v1/models`,
    `${tunnelPath.slice(2)}%2Fv1`,
    'x'.repeat(3000),
  ]) {
    paths.push([`tunnel path ${bad.slice(0, 50)}`, p.tunnels, `/t/${bad}`, json]);
  }
  for (const [label, port, path, headers, status] of cases) {
    await f.check(label, async () => assertRefused(label, await request(port, 'POST', path, { headers, body }), { status, shapes: ['detail'] }));
  }
  for (const [label, port, path, headers] of paths) {
    // `/dedicated` and `/instances` without a slash are no surface's: the gateway's 404 (chat shape).
    const shapes: Shape[] = port === p.gateway && (path === '/dedicated' || path === '/instances') ? ['chat'] : RELAYED;
    for (const m of ['GET', 'POST', 'DELETE', 'OPTIONS']) {
      await f.check(`${m} ${label}`, async () =>
        assertRefused(`${m} ${label}`, await request(port, m, path, { headers, body: m === 'POST' ? body : undefined }), {
          status: [200, 307, 308, 400, 401, 403, 404, 405],
          shapes,
        }),
      );
    }
  }
  f.assertNone();
  await assertServing();
});

test('body framing through every surface: oversized, lying Content-Length, chunked', async () => {
  const f = new Failures();
  for (const s of SURFACES) {
    const path = `${s.base()}/v1/chat/completions`;
    const good = JSON.stringify(s.name === 'tunnel' ? { ...CHAT, model: p.platform.sims[0]!.model } : CHAT);
    const limit = s.name === 'instance proxy' ? 32 * 1024 * 1024 : p.platform.config.gatewayMaxBodyBytes;
    const cases: [string, () => Promise<RawReply | undefined>, number[]][] = [
      ['declared oversized, nothing sent', () => exchange(s.port(), [requestBytes('POST', path, { headers: s.headers(), contentLength: limit + 1 })]), [413]],
      ['oversized chunked', () => request(s.port(), 'POST', path, { headers: s.headers(), body: Buffer.alloc(limit + 10, 0x20), chunked: true }), [413]],
      ['chunked good body', () => request(s.port(), 'POST', path, { headers: s.headers(), body: good, chunked: true }), [200]],
      ['length shorter than the body', () => exchange(s.port(), [requestBytes('POST', path, { headers: s.headers(), body: good, contentLength: 5 })]), [400]],
    ];
    for (const [name, send, status] of cases) {
      const label = `${s.name} ${name}`;
      await f.check(label, async () => assertRefused(label, await send(), { status, shapes: RELAYED }));
    }
    const label = `${s.name} length longer than the body`;
    await f.check(label, async () => {
      const r = await exchange(s.port(), [requestBytes('POST', path, { headers: s.headers(), body: good, contentLength: good.length + 40 })], {
        end: true,
        timeoutMs: 2000,
      });
      if (r) assertRefused(label, r, { status: [400], shapes: RELAYED });
    });
  }
  f.assertNone();
  await assertServing();
});

test('streams through every surface: a client that disconnects at every phase', async () => {
  for (const s of SURFACES) {
    const body = JSON.stringify({ ...(s.name === 'tunnel' ? { ...CHAT, model: p.platform.sims[0]!.model } : CHAT), stream: true, max_tokens: 50 });
    const head = requestBytes('POST', `${s.base()}/v1/chat/completions`, { headers: s.headers(), body });
    const headEnd = head.indexOf('\r\n\r\n') + 4;
    for (const part of [head.subarray(0, 15), head.subarray(0, headEnd), head.subarray(0, headEnd + 3)]) {
      assert.equal(await exchange(s.port(), [part], { timeoutMs: 200 }), undefined, s.name);
    }
    // Cut right after the response head, and after the first bytes of the stream.
    await exchange(s.port(), [head], { timeoutMs: 5000, onHead: (socket) => socket.destroy() });
    await exchange(s.port(), [head], { timeoutMs: 5000, onHead: (socket) => socket.once('data', () => socket.destroy()) });
    // The whole request sent, the client gone before any answer.
    const sock = await exchange(s.port(), [head], { timeoutMs: 1 });
    assert.ok(sock === undefined || sock.status === 200);
  }
  await waitFor(() => p.platform.gateway.context.admission.inflight === 0, 5000);
  await assertServing();
});

test('tunnel connect: bad tokens, ports and instances are refused before the upgrade', async () => {
  const f = new Failures();
  const connect = (query: string, headers: Record<string, string>) =>
    new Promise<{ status: number; body: string }>((resolve) => {
      const ws = new WebSocket(`ws://127.0.0.1:${p.gateway}/tunnel/connect${query}`, { headers });
      ws.on('unexpected-response', (_req, res) => {
        let b = '';
        res.on('data', (c: Buffer) => (b += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: b }));
      });
      ws.on('open', () => {
        ws.terminate();
        resolve({ status: 101, body: '' });
      });
      ws.on('error', () => resolve({ status: 0, body: '' }));
    });
  const token = issueTunnelToken(secret, instanceId);
  const cases: [string, string, Record<string, string>, number][] = [
    ['no token', '?port=80', {}, 401],
    ['Basic', '?port=80', { authorization: 'Basic eDp5' }, 401],
    ['bad token', '?port=80', { authorization: 'Bearer rct-nope.inst' }, 401],
    ['long token', '?port=80', { authorization: `Bearer ${'t'.repeat(3000)}` }, 401],
    ['API key as token', '?port=80', { authorization: `Bearer ${ownerKey}` }, 401],
    ['no port', '', { authorization: `Bearer ${token}` }, 400],
    ['port abc', '?port=abc', { authorization: `Bearer ${token}` }, 400],
    ['port 0', '?port=0', { authorization: `Bearer ${token}` }, 400],
    ['port 99999', '?port=99999', { authorization: `Bearer ${token}` }, 400],
    ['port -1', '?port=-1', { authorization: `Bearer ${token}` }, 400],
    ['port 1e3', '?port=1e3', { authorization: `Bearer ${token}` }, 400],
    ['port %00', '?port=%00', { authorization: `Bearer ${token}` }, 400],
    ['port twice', '?port=80&port=81', { authorization: `Bearer ${token}` }, 101],
    ['instance not running', '?port=80', { authorization: `Bearer ${issueTunnelToken(secret, 'inst_gone')}` }, 403],
  ];
  for (const [name, query, headers, status] of cases) {
    await f.check(name, async () => {
      const r = await connect(query, headers);
      assert.equal(r.status, status, `tunnel connect ${name}: ${r.status} ${r.body}`);
      if (status >= 400) assertRefused(`tunnel connect ${name}`, { status: r.status, headers: {}, body: r.body }, { status: [status], shapes: ['detail'] });
    });
  }
  // Not an upgrade at all.
  for (const m of ['GET', 'POST']) {
    await f.check(`${m} /tunnel/connect without upgrade`, async () => {
      const r = await exchange(
        p.gateway,
        [requestBytes(m, '/tunnel/connect?port=80', { headers: { authorization: `Bearer ${token}` }, body: m === 'POST' ? '{}' : undefined })],
        { timeoutMs: 2000 },
      );
      assert.ok(!r || (r.status >= 400 && r.status < 500), `${m} /tunnel/connect: ${r?.status} ${r?.body}`);
    });
  }
  f.assertNone();
  // The real client is still connected and serving.
  await assertServing();
});

test('instance proxy WebSocket upgrades with bad inputs', async () => {
  const f = new Failures();
  const attempt = (path: string, headers: Record<string, string>) =>
    new Promise<number>((resolve) => {
      const ws = new WebSocket(`ws://127.0.0.1:${p.proxy}${path}`, { headers: { host: proxyHost, ...headers } });
      ws.on('unexpected-response', (_req, res) => {
        res.resume();
        resolve(res.statusCode ?? 0);
      });
      ws.on('open', () => {
        ws.terminate();
        resolve(101);
      });
      ws.on('error', () => resolve(0));
    });
  const cases: [string, string, Record<string, string>, number[]][] = [
    ['no session', '/ws', {}, [401]],
    ['key', '/ws', { authorization: `Bearer ${ownerKey}` }, [403]],
    ['the console session only', '/ws', { cookie: owner.cookie }, [401]],
    ['unknown instance', '/ws', { host: `inst-nope.localhost:${p.proxy}`, cookie: ownerProxy }, [401, 404]],
    ['cross-site', '/ws', { cookie: ownerProxy, 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'websocket' }, [403]],
    ['the old path form', `/instances/${instanceId}/ws`, { host: `127.0.0.1:${p.proxy}`, cookie: ownerProxy }, [308]],
    ['a path the app does not serve as WebSocket', '/ws', { cookie: ownerProxy }, [404, 400]],
    ['malformed escape', '/%ZZ', { cookie: ownerProxy }, [404, 400]],
  ];
  for (const [name, path, headers, status] of cases) {
    await f.check(name, async () => {
      const s = await attempt(path, headers);
      assert.ok(status.includes(s), `proxy ws ${name}: ${s}`);
    });
  }
  f.assertNone();
  await assertServing();
});

test('a tunnel client that breaks the protocol: the public client gets a 502 {detail}, the gateway keeps serving', async () => {
  // A hand-written tunnel client for the running instance on another port (its own tunnel id).
  const ws = new WebSocket(`ws://127.0.0.1:${p.gateway}/tunnel/connect?port=9999`, {
    headers: { authorization: `Bearer ${issueTunnelToken(secret, instanceId)}` },
  });
  const hello = await new Promise<{ public_url: string }>((resolve, reject) => {
    ws.once('message', (m: Buffer, isBinary) => (isBinary ? reject(new Error('binary hello')) : resolve(JSON.parse(m.toString()) as { public_url: string })));
    ws.once('error', reject);
  });
  const host = new URL(hello.public_url).host;
  /** How the client answers the next public request (called with its stream id). */
  let answer: (stream: number) => void = () => {};
  ws.on('message', (m: Buffer, isBinary) => {
    if (!isBinary) return;
    const f = decodeFrame(m);
    if (f?.type === FrameType.RequestHead) answer(f.stream);
  });
  const send = (type: number, stream: number, payload?: string) => ws.send(encodeFrame(type as never, stream, payload));
  const head = (status: unknown, headers: unknown = []) => JSON.stringify({ status, headers });
  // 502 is this surface's documented answer to a broken upstream (the tunnel), in its {detail} shape.
  const cases: [string, (s: number) => void, number][] = [
    [
      'body before head',
      (s) => {
        send(FrameType.ResponseBody, s, 'x');
        send(FrameType.ResponseEnd, s);
      },
      502,
    ],
    ['end without head', (s) => send(FrameType.ResponseEnd, s), 502],
    ['head not JSON', (s) => send(FrameType.ResponseHead, s, '{'), 502],
    ['status 99', (s) => send(FrameType.ResponseHead, s, head(99)), 502],
    ['status as a string', (s) => send(FrameType.ResponseHead, s, head('200')), 502],
    ['headers not a list', (s) => send(FrameType.ResponseHead, s, head(200, { a: 'b' })), 502],
    ['odd header list', (s) => send(FrameType.ResponseHead, s, head(200, ['x-a'])), 502],
    ['reset', (s) => send(FrameType.Reset, s), 502],
    [
      'garbage, unknown types and streams, then a good answer',
      (s) => {
        ws.send(Buffer.from([1, 2]));
        ws.send('text frame');
        send(42, s);
        send(FrameType.ResponseBody, s + 1000, 'stray');
        send(FrameType.ResponseHead, s, head(200, ['content-type', 'text/plain']));
        send(FrameType.ResponseBody, s, 'ok');
        send(FrameType.ResponseEnd, s);
      },
      200,
    ],
  ];
  const f = new Failures();
  for (const [name, respond, status] of cases) {
    answer = respond;
    await f.check(name, async () => {
      const r = await request(p.tunnels, 'GET', '/x', { headers: { host } });
      assert.equal(r.status, status, `tunnel protocol ${name}: ${r.status} ${r.body.slice(0, 200)}`);
      if (status === 502) assert.equal(shapeProblem('detail', r.body), undefined, `tunnel protocol ${name}: ${r.body}`);
    });
  }
  // The client disconnects while a public request waits: 502.
  answer = () => ws.terminate();
  await f.check('tunnel gone mid-request', async () => {
    const r = await request(p.tunnels, 'GET', '/x', { headers: { host } });
    assert.equal(r.status, 502, r.body);
  });
  f.assertNone();
  await assertServing();
});
