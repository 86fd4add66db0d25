// The agent's tunnel relay in process (the docker-backed tests are test/dedicated/tunnel-relay.test.ts):
// what the broker receives (the identified instance's token, never the caller's Authorization,
// Host or x-rc-* headers), what is refused (an address that is no container, an instance without
// a token, any request but the tunnel's upgrade), TLS to an https broker, several brokers.
import assert from 'node:assert/strict';
import { createServer as createTlsServer, Server as TlsServer } from 'node:tls';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import { TunnelRelay } from '../../agent/broker-relay.js';
import { readIdentity } from '../../agent/tunnel/identity-files.js';
import { createLogger } from '../../lib/log.js';
import { localhostCertificate, waitFor } from '../helpers.js';

/** A stand-in broker: records each request head it gets and answers 101 then echoes. */
async function fakeBroker(t: TestContext, server: Server = createServer()): Promise<{ port: number; heads: string[] }> {
  const heads: string[] = [];
  server.on(server instanceof TlsServer ? 'secureConnection' : 'connection', (s: Socket) => {
    let buf = '';
    let upgraded = false;
    s.on('data', (d: Buffer) => {
      if (upgraded) {
        s.write(d); // echo: bytes relay both ways after the head
        return;
      }
      buf += d.toString('latin1');
      const end = buf.indexOf('\r\n\r\n');
      if (end < 0) return;
      heads.push(buf.slice(0, end));
      upgraded = true;
      s.write('HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n');
      if (buf.length > end + 4) s.write(buf.slice(end + 4));
    });
    s.on('error', () => {});
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  return { port: (server.address() as { port: number }).port, heads };
}

/** Sends `head` (+ `after`) to the relay; resolves with everything received until `until` matches or the socket closes. */
function exchange(port: number, head: string, after = '', until?: RegExp): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    let got = '';
    s.on('connect', () => s.write(head + after));
    s.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      if (until?.test(got)) {
        s.destroy();
        resolve(got);
      }
    });
    s.on('close', () => resolve(got));
    s.on('error', reject);
  });
}

function headers(head: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const line of head.split('\r\n').slice(1)) {
    const i = line.indexOf(':');
    const name = line.slice(0, i).toLowerCase();
    out.set(name, [...(out.get(name) ?? []), line.slice(i + 1).trim()]);
  }
  return out;
}

const UPGRADE = (path: string, extra: string[] = []) =>
  [
    `GET ${path} HTTP/1.1`,
    'Host: host.docker.internal:1',
    'Connection: Upgrade',
    'Upgrade: websocket',
    'Sec-WebSocket-Version: 13',
    'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==',
    ...extra,
  ].join('\r\n') + '\r\n\r\n';

async function relay(
  t: TestContext,
  identify: (address: string) => Promise<string | undefined>,
  tls?: { ca: Buffer },
  perInstance?: number,
): Promise<{ relay: TunnelRelay; port: number }> {
  const r = new TunnelRelay({ listenIp: '127.0.0.1', identify, logger: createLogger('silent'), tls, perInstance });
  t.after(() => r.close());
  return { relay: r, port: await r.ensure([]) };
}

test('the relay presents the identified instance token: the caller Authorization, Host and x-rc-* headers never reach the broker', async (t) => {
  const broker = await fakeBroker(t);
  const seen: string[] = [];
  const { relay: r, port } = await relay(t, async (address) => {
    seen.push(address);
    return address === '127.0.0.1' ? 'i_a' : undefined;
  });
  r.register('i_a', 'rct-token-of-a.i_a', `http://127.0.0.1:${broker.port}/base/`);
  r.register('i_b', 'rct-token-of-b.i_b', `http://127.0.0.1:${broker.port}`);
  const out = await exchange(
    port,
    UPGRADE('/tunnel/connect?port=7860', [
      'Authorization: Bearer rct-token-of-b.i_b',
      'authorization: Bearer second',
      'Proxy-Authorization: Basic eA==',
      'X-RC-Account-Id: 8',
      'x-forwarded-for: 10.0.0.9',
      'X-Forwarded-Proto: https',
      'Forwarded: for=1.2.3.4',
    ]),
    'after-head-bytes',
    /after-head-bytes/,
  );
  assert.match(out, /^HTTP\/1\.1 101 /);
  assert.match(out, /after-head-bytes$/, 'bytes after the head reach the broker and come back');
  assert.deepEqual(seen, ['127.0.0.1'], 'identified by the connection source address');
  const [head] = broker.heads;
  assert.equal(head!.split('\r\n')[0], 'GET /base/tunnel/connect?port=7860 HTTP/1.1');
  const h = headers(head!);
  assert.deepEqual(h.get('authorization'), ['Bearer rct-token-of-a.i_a'], "only the identified instance's token");
  assert.deepEqual(h.get('host'), [`127.0.0.1:${broker.port}`]);
  for (const name of ['proxy-authorization', 'x-rc-account-id', 'x-forwarded-for', 'x-forwarded-proto', 'forwarded'])
    assert.equal(h.get(name), undefined, name);
  assert.deepEqual(h.get('upgrade'), ['websocket'], 'the WebSocket handshake headers pass');
  assert.deepEqual(h.get('sec-websocket-key'), ['dGhlIHNhbXBsZSBub25jZQ==']);
});

test('the relay refuses what is not a running instance with a token, and everything but the upgrade', async (t) => {
  const broker = await fakeBroker(t);
  let who: string | undefined;
  const { relay: r, port } = await relay(t, async () => who);
  r.register('i_a', 'rct-a.i_a', `http://127.0.0.1:${broker.port}`);
  const status = (s: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(s)?.[1]);

  // No container has the caller's address (the host, another agent's container, a stopped one).
  const stranger = await exchange(port, UPGRADE('/tunnel/connect?port=1', ['Authorization: Bearer rct-a.i_a']));
  assert.equal(status(stranger), 403);
  assert.match(JSON.parse(stranger.slice(stranger.indexOf('\r\n\r\n') + 4)).detail, /running instances only; 127\.0\.0\.1 is none/);
  // A container whose instance has no token: the notebook predates the tunnel feature.
  who = 'i_old';
  const old = await exchange(port, UPGRADE('/tunnel/connect?port=1'));
  assert.equal(status(old), 403);
  assert.match(old, /created before the tunnel feature was enabled/);

  who = 'i_a';
  for (const [what, head] of [
    ['another path', UPGRADE('/t/tsomething/')],
    ['a path below the connect path', UPGRADE('/tunnel/connect/x')],
    ['a broker number the instance lacks', UPGRADE('/b3/tunnel/connect?port=1')],
    ['a POST upgrade', UPGRADE('/tunnel/connect').replace(/^GET/, 'POST')],
    ['a plain GET', 'GET /tunnel/connect?port=1 HTTP/1.1\r\nHost: x\r\n\r\n'],
    ['a plain GET elsewhere', 'GET /api/instances HTTP/1.1\r\nHost: x\r\n\r\n'],
  ] as const) {
    const out = await exchange(port, head);
    assert.equal(status(out), 404, what);
    assert.match(out, /"detail"/, what);
  }
  assert.equal(status(await exchange(port, 'NOT HTTP\r\n\r\n')), 400);
  assert.equal(broker.heads.length, 0, 'nothing reached the broker');
  // An unreachable broker: 502, not a hang or a crash.
  r.register('i_a', 'rct-a.i_a', 'http://127.0.0.1:1');
  assert.equal(status(await exchange(port, UPGRADE('/tunnel/connect?port=1'))), 502);
});

test('several brokers: /b<i> selects the i-th; an https broker is reached over TLS', async (t) => {
  const tls = localhostCertificate(t);
  if (!tls) return;
  const { cert, key } = tls;
  const plain = await fakeBroker(t);
  const secure = await fakeBroker(t, createTlsServer({ key, cert }));
  const { relay: r, port } = await relay(t, async () => 'i_a', { ca: cert });
  r.register('i_a', 'rct-a.i_a', `http://127.0.0.1:${plain.port}, https://localhost:${secure.port}/gw`);
  assert.equal(r.containerBrokers('host.docker.internal', port, 2), `http://host.docker.internal:${port},http://host.docker.internal:${port}/b1`);
  assert.match(await exchange(port, UPGRADE('/b1/tunnel/connect?port=2'), 'x', /x$/), /^HTTP\/1\.1 101 /);
  assert.equal(secure.heads.length, 1);
  assert.equal(secure.heads[0]!.split('\r\n')[0], 'GET /gw/tunnel/connect?port=2 HTTP/1.1');
  assert.deepEqual(headers(secure.heads[0]!).get('host'), [`localhost:${secure.port}`]);
  assert.deepEqual(headers(secure.heads[0]!).get('authorization'), ['Bearer rct-a.i_a']);
  assert.match(await exchange(port, UPGRADE('/tunnel/connect?port=3'), 'y', /y$/), /^HTTP\/1\.1 101 /);
  assert.equal(plain.heads.length, 1);
});

test('rc-tunnel through the relay needs no token; without broker or relay setting it says to recreate the notebook', () => {
  const viaRelay = readIdentity({ RC_TUNNEL_VIA_RELAY: '1', RC_TUNNEL_BROKER: 'http://host.docker.internal:9' });
  assert.equal(viaRelay.token, '');
  assert.equal(viaRelay.broker, 'http://host.docker.internal:9');
  assert.throws(() => readIdentity({ RC_TUNNEL_VIA_RELAY: '1' }), /created before the tunnel feature was enabled/);
  assert.throws(() => readIdentity({}), /created before the tunnel feature was enabled/);
});

test('identifying is bounded: an engine that fails or hangs gives 503, never a queue without end', async (t) => {
  const pending: (() => void)[] = [];
  let mode: 'fail' | 'hang' = 'fail';
  const { port } = await relay(t, () => {
    if (mode === 'fail') return Promise.reject(new Error('engine down'));
    return new Promise<undefined>((resolve) => pending.push(() => resolve(undefined)));
  });
  const status = (s: string) => Number(/^HTTP\/1\.1 (\d{3})/.exec(s)?.[1]);
  assert.equal(status(await exchange(port, UPGRADE('/tunnel/connect?port=1'))), 503);
  mode = 'hang';
  const hanging = Array.from({ length: 16 }, () => exchange(port, UPGRADE('/tunnel/connect?port=1')));
  await waitFor(() => pending.length === 16);
  const busy = await exchange(port, UPGRADE('/tunnel/connect?port=1'));
  assert.equal(status(busy), 503);
  assert.match(busy, /busy/);
  for (const p of pending) p();
  for (const r of await Promise.all(hanging)) assert.equal(status(r), 403);
});

/** An upgrade through the relay held open: the socket once the 101 arrived, or the refusal's text. */
function hold(t: TestContext, port: number): Promise<{ socket?: Socket; refusal?: string }> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port });
    t.after(() => s.destroy());
    let got = '';
    s.on('connect', () => s.write(UPGRADE('/tunnel/connect?port=1')));
    s.on('data', (d: Buffer) => {
      got += d.toString('latin1');
      if (/^HTTP\/1\.1 101 /.test(got)) resolve({ socket: s });
    });
    s.on('close', () => resolve({ refusal: got }));
    s.on('error', reject);
  });
}

test('connections through the relay are bounded per instance (issue 44): 429 with the reason, freed on close', async (t) => {
  const broker = await fakeBroker(t);
  const { relay: r, port } = await relay(t, async () => 'i_a', undefined, 2);
  r.register('i_a', 'rct-a.i_a', `http://127.0.0.1:${broker.port}`);
  const first = await hold(t, port);
  const second = await hold(t, port);
  assert.ok(first.socket && second.socket);
  const third = await hold(t, port);
  assert.match(third.refusal!, /^HTTP\/1\.1 429 /);
  assert.match(third.refusal!, /retry-after: 30/);
  assert.match(third.refusal!, /Too many tunnel connections from this instance: 2 are open through the relay \(RC_TUNNEL_RELAY_PER_INSTANCE\)/);
  first.socket!.destroy();
  let fourth: { socket?: Socket; refusal?: string } = {};
  await waitFor(async () => {
    fourth = await hold(t, port);
    return fourth.socket !== undefined;
  });
  assert.ok(fourth.socket);
});

test('sockets per source address are bounded before any head is read (issue 44)', async (t) => {
  const { port } = await relay(t, async () => 'i_a', undefined, 2);
  // 4 (twice the per-instance limit) sockets that send nothing stay open; the 5th is closed at once.
  const silent: Socket[] = [];
  t.after(() => {
    for (const s of silent) s.destroy();
  });
  for (let i = 0; i < 4; i++) {
    const s = connect({ host: '127.0.0.1', port });
    s.on('error', () => {});
    await new Promise((r) => s.once('connect', r));
    silent.push(s);
  }
  const fifth = connect({ host: '127.0.0.1', port });
  fifth.on('error', () => {});
  await new Promise((r) => fifth.once('close', r));
  assert.equal(silent.filter((s) => !s.destroyed).length, 4);
  // One goes: a new socket is accepted again (and answered: 404 for a plain request).
  silent.shift()!.destroy();
  await waitFor(async () => /^HTTP\/1\.1 404 /.test(await exchange(port, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')));
});
