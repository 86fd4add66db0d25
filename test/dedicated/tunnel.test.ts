// The tunnel broker and the rc-tunnel client, in process: identity checks at connect, public
// requests relayed both ways (bodies, streams, errors), disconnects, and the CLI's errors.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, statSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { test, type TestContext } from 'node:test';
import WebSocket from 'ws';
import { TunnelClient, connectUrl, type TunnelStatus } from '../../agent/tunnel/client.js';
import { issueTunnelToken, tunnelId, verifyTunnelToken } from '../../lib/tunnel/identity.js';
import { decodeFrame, encodeFrame, FrameType, type Hello } from '../../lib/tunnel/protocol.js';
import { assertTunnelsApart, TunnelOrigins } from '../../gateway/tunnel/origins.js';
import { waitFor, listenLocal } from '../helpers.js';
import { RC_JS, startGatewayFixture, tempDir, TUNNEL_JS, tunnelFetch, type GatewayFixture } from './fixture.js';

/** A local service: echoes method, url and body; /stream sends 200 chunks; /slow never answers. */
async function startLocal(t: TestContext): Promise<number> {
  const server = createServer((req, res) => {
    if (req.url === '/stream') {
      res.writeHead(200, { 'content-type': 'text/plain' });
      for (let i = 0; i < 200; i++) res.write(`line ${i}\n`);
      res.end();
      return;
    }
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      res.writeHead(201, { 'content-type': 'application/json', 'x-local': 'yes' });
      res.end(JSON.stringify({ method: req.method, url: req.url, body: Buffer.concat(parts).toString(), prefix: req.headers['x-forwarded-prefix'] ?? null }));
    });
  });
  return listenLocal(t, server);
}

function startClient(t: TestContext, f: GatewayFixture, instanceId: string, port: number): { client: TunnelClient; statuses: TunnelStatus[]; logs: string[] } {
  const statuses: TunnelStatus[] = [];
  const logs: string[] = [];
  const client = new TunnelClient({
    broker: f.gateway.url,
    token: issueTunnelToken(f.tunnelSecret, instanceId),
    port,
    log: (l) => logs.push(l),
    onStatus: (s) => statuses.push(s),
    maxBackoffMs: 200,
  });
  client.start();
  t.after(() => client.stop());
  return { client, statuses, logs };
}

test('tokens and tunnel ids', () => {
  const token = issueTunnelToken('s'.repeat(16), 'i_abc.1');
  assert.equal(verifyTunnelToken('s'.repeat(16), token), 'i_abc.1');
  assert.equal(verifyTunnelToken('t'.repeat(16), token), undefined);
  assert.equal(verifyTunnelToken('s'.repeat(16), token.replace('i_abc.1', 'i_abc.2')), undefined);
  assert.equal(verifyTunnelToken('s'.repeat(16), 'rct-short'), undefined);
  assert.throws(() => issueTunnelToken('short', 'i_1'), /at least 16/);
  assert.equal(tunnelId('s'.repeat(16), 'i_1', 80), tunnelId('s'.repeat(16), 'i_1', 80));
  assert.notEqual(tunnelId('s'.repeat(16), 'i_1', 80), tunnelId('s'.repeat(16), 'i_1', 81));
  assert.equal(connectUrl('https://gw.example/base/', 7860), 'wss://gw.example/base/tunnel/connect?port=7860');
  assert.throws(() => connectUrl('ftp://x', 1), /http\(s\) or ws\(s\)/);
});

test('the broker refuses bad identities at connect', async (t) => {
  const f = await startGatewayFixture(t);
  f.addRoute('i_stopped', '127.0.0.1:1', { status: 'stopped' });
  const url = (port: string) => connectUrl(f.gateway.url, 1).replace('port=1', `port=${port}`);
  const attempt = (port: string, token: string | undefined) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const ws = new WebSocket(url(port), { headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
      ws.on('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c));
        res.on('end', () => {
          resolve({ status: res.statusCode!, body });
          ws.terminate();
        });
      });
      ws.on('open', () => {
        ws.close();
        reject(new Error('connected'));
      });
      ws.on('error', () => {});
    });
  assert.equal((await attempt('80', undefined)).status, 401);
  assert.equal((await attempt('80', 'rct-forged')).status, 401);
  assert.equal((await attempt('80', issueTunnelToken('another-secret-0123456789', 'i_x'))).status, 401);
  assert.equal((await attempt('0', issueTunnelToken(f.tunnelSecret, 'i_x'))).status, 400);
  assert.equal((await attempt('x', issueTunnelToken(f.tunnelSecret, 'i_x'))).status, 400);
  const unknown = await attempt('80', issueTunnelToken(f.tunnelSecret, 'i_unknown'));
  assert.equal(unknown.status, 403);
  assert.match(JSON.parse(unknown.body).detail, /create a new one/);
  assert.equal((await attempt('80', issueTunnelToken(f.tunnelSecret, 'i_stopped'))).status, 403);

  const none = await fetch(`${f.gateway.url}/t/tnothing/`);
  assert.equal(none.status, 404);
  assert.deepEqual(await none.json(), { detail: 'No tunnel is connected at this address' });
});

test('public requests reach the local service through the tunnel', async (t) => {
  const f = await startGatewayFixture(t, { maxBodyBytes: 64 * 1024 });
  const localPort = await startLocal(t);
  f.addRoute('i_tun', '127.0.0.1:1', { instanceType: 'jupyter' });
  const { statuses, logs } = startClient(t, f, 'i_tun', localPort);
  const connected = (await waitFor(() => statuses.find((s) => s.state === 'connected')))!;
  const expectedId = tunnelId(f.tunnelSecret, 'i_tun', localPort);
  assert.equal(connected.tunnelId, expectedId);
  // Its own origin: a host name per tunnel on the tunnels' listener.
  assert.equal(connected.publicUrl, `http://${expectedId}.localhost:${f.tunnels.port}/`);
  assert.ok(f.activity.includes('i_tun'), 'the connection counts as activity');

  // The service sees its paths at `/`, and no prefix (a client's own X-Forwarded-Prefix is dropped).
  const r = await tunnelFetch(`${connected.publicUrl}api/echo?q=1`, { method: 'POST', body: 'hello body', headers: { 'x-forwarded-prefix': '/evil' } });
  assert.equal(r.status, 201);
  assert.equal(r.headers.get('x-local'), 'yes');
  assert.deepEqual(await r.json(), { method: 'POST', url: '/api/echo?q=1', body: 'hello body', prefix: null });

  // A bigger body in several frames, and a streamed response.
  const big = 'b'.repeat(40_000);
  const rb = await tunnelFetch(`${connected.publicUrl}upload`, { method: 'PUT', body: big });
  assert.equal(((await rb.json()) as { body: string }).body, big);
  const rs = await tunnelFetch(`${connected.publicUrl}stream`);
  const text = await rs.text();
  assert.equal(text.split('\n').filter(Boolean).length, 200);

  // Limits.
  const tooBig = await tunnelFetch(`${connected.publicUrl}upload`, { method: 'PUT', body: 'x'.repeat(70_000) });
  assert.equal(tooBig.status, 413);

  // Concurrent requests are multiplexed.
  const many = await Promise.all(
    Array.from({ length: 20 }, (_, i) => tunnelFetch(`${connected.publicUrl}n/${i}`).then((x) => x.json() as Promise<{ url: string }>)),
  );
  assert.deepEqual(
    many.map((m) => m.url),
    Array.from({ length: 20 }, (_, i) => `/n/${i}`),
  );
  assert.ok(logs.some((l) => l.startsWith('POST /api/echo?q=1 201')));
});

test('a dead local service gives 502; losing the instance closes the tunnel for good', async (t) => {
  const f = await startGatewayFixture(t);
  f.addRoute('i_dead', '127.0.0.1:1', { instanceType: 'jupyter' });
  const deadPort = await new Promise<number>((resolve) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const p = (s.address() as { port: number }).port;
      s.close(() => resolve(p));
    });
  });
  const { client, statuses } = startClient(t, f, 'i_dead', deadPort);
  const connected = (await waitFor(() => statuses.find((s) => s.state === 'connected')))!;
  const r = await tunnelFetch(`${connected.publicUrl}x`);
  assert.equal(r.status, 502);
  assert.match(((await r.json()) as { detail: string }).detail, /rc-tunnel: nothing answers on http:\/\/127\.0\.0\.1:\d+ \(ECONNREFUSED\)/);

  f.routes.delete('i_dead');
  await client.finished;
  const last = statuses.at(-1)!;
  assert.equal(last.state, 'failed');
  assert.match(last.error!, /no longer running/);
  assert.equal(f.broker.tunnels().length, 0);
});

test('rc-tunnel without identity or broker says to recreate the notebook', async (t) => {
  const dir = tempDir(t);
  const run = (args: string[], env: Record<string, string>) => {
    const base: Record<string, string> = { PATH: process.env.PATH ?? '', HOME: dir, RC_LOG_LEVEL: 'silent' };
    return spawnSync(process.execPath, args, { env: { ...base, ...env }, encoding: 'utf8', timeout: 20_000 });
  };
  for (const args of [
    [RC_JS, 'tunnel', 'status'],
    [TUNNEL_JS, 'status'],
    [TUNNEL_JS, 'expose', '--port', '8080'],
  ]) {
    const r = run(args, {});
    assert.equal(r.status, 1, r.stderr);
    assert.match(r.stderr, /No tunnel identity directory/);
    assert.match(r.stderr, /destroy this notebook and create a new one/);
  }
  // An instance directory without the identity files.
  const noIdentity = run([TUNNEL_JS, 'status'], { RC_INSTANCE_DIR: dir });
  assert.equal(noIdentity.status, 1);
  assert.match(noIdentity.stderr, /destroy this notebook and create a new one/);

  const idDir = join(dir, 'id');
  mkdirSync(idDir);
  const emptyDir = run([TUNNEL_JS, 'status'], { RC_TUNNEL_IDENTITY_DIR: idDir });
  assert.equal(emptyDir.status, 1);
  assert.match(emptyDir.stderr, /holds no token/);
  writeFileSync(join(idDir, 'token'), 'rct-x\n', { mode: 0o644 });
  const noBroker = run([TUNNEL_JS, 'status'], { RC_TUNNEL_IDENTITY_DIR: idDir });
  assert.equal(noBroker.status, 1);
  assert.match(noBroker.stderr, /No tunnel broker setting \(RC_TUNNEL_BROKER is not set\)\. .*destroy this notebook and create a new one/);

  const ok = run([TUNNEL_JS, 'status'], { RC_TUNNEL_IDENTITY_DIR: idDir, RC_TUNNEL_BROKER: 'http://127.0.0.1:1', RC_TUNNEL_STATE_DIR: join(dir, 'state') });
  assert.equal(ok.status, 0, ok.stderr);
  assert.match(ok.stdout, /No tunnel is running/);
  assert.equal(statSync(join(idDir, 'token')).mode & 0o777, 0o600, 'a legacy token file is made owner-only');
  // The provisioned form: the token in the environment, no directory at all.
  const fromEnv = run([TUNNEL_JS, 'status', '--json'], {
    RC_TUNNEL_TOKEN: 'rct-x',
    RC_TUNNEL_BROKER: 'http://127.0.0.1:1',
    RC_TUNNEL_STATE_DIR: join(dir, 'state'),
  });
  assert.equal(fromEnv.status, 0, fromEnv.stderr);
  assert.equal(JSON.parse(fromEnv.stdout).identity_dir, '$RC_TUNNEL_TOKEN');

  const usage = run([TUNNEL_JS, 'expose'], { RC_TUNNEL_IDENTITY_DIR: idDir, RC_TUNNEL_BROKER: 'http://127.0.0.1:1' });
  assert.equal(usage.status, 2);
  assert.match(usage.stderr, /--port is required/);
  const badLines = run([TUNNEL_JS, 'logs', '--lines', 'zero'], {});
  assert.equal(badLines.status, 2);
  const unknown = run([TUNNEL_JS, 'bogus'], {});
  assert.equal(unknown.status, 2);
  const noLogs = run([TUNNEL_JS, 'logs', '--lines', '3'], { RC_TUNNEL_STATE_DIR: join(dir, 'state') });
  assert.equal(noLogs.status, 0);
  assert.equal(noLogs.stdout, '(no tunnel logs yet)\n');
});

/** One request to the tunnels' listener with a Host header of our choosing. */
function requestWithHost(url: string, host: string): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers: { host } }, (res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

test('host routing: each tunnel its own origin; unknown hosts 404; the old path form redirects there', async (t) => {
  const f = await startGatewayFixture(t);
  const localPort = await startLocal(t);
  f.addRoute('i_own', '127.0.0.1:1', { instanceType: 'gradio' });
  const { statuses } = startClient(t, f, 'i_own', localPort);
  const connected = (await waitFor(() => statuses.find((s) => s.state === 'connected')))!;
  const id = connected.tunnelId!;
  const origin = `http://${id}.localhost:${f.tunnels.port}`;
  assert.equal(connected.publicUrl, `${origin}/`);
  const ok = await tunnelFetch(`${origin}/x?y=1`);
  assert.equal(ok.status, 201);
  assert.equal(((await ok.json()) as { url: string }).url, '/x?y=1');
  // A path that looks like the old form belongs to the app on the tunnel's own host.
  assert.equal(((await (await tunnelFetch(`${origin}/t/${id}/z`)).json()) as { url: string }).url, `/t/${id}/z`);

  const noTunnel = { detail: 'No tunnel is connected at this address' };
  // A well-formed tunnel host with nothing connected.
  const unknown = await tunnelFetch(`http://t${'0'.repeat(24)}.localhost:${f.tunnels.port}/`);
  assert.equal(unknown.status, 404);
  assert.deepEqual(await unknown.json(), noTunnel);
  // The tunnel's id under another name, the listener's bare host, an address: no tenant content.
  for (const host of [`${id}.example.com`, `${id}.localhost.example.com`, `x.${id}.localhost`, 'localhost', `127.0.0.1:${f.tunnels.port}`, '']) {
    const r = await requestWithHost(`${f.tunnels.url}/x`, host);
    assert.equal(r.status, 404, host);
    assert.deepEqual(JSON.parse(r.body), noTunnel, host);
  }
  // Host names are case-insensitive, a trailing dot is the same name.
  assert.equal((await requestWithHost(`${f.tunnels.url}/x`, `${id.toUpperCase()}.LOCALHOST.:${f.tunnels.port}`)).status, 201);

  // The old path form, on the tunnels' bare host and on the gateway: 308 to the tunnel's own origin.
  for (const base of [f.tunnels.url, f.gateway.url]) {
    const r = await fetch(`${base}/t/${id}/x?y=1`, { redirect: 'manual' });
    assert.equal(r.status, 308, base);
    assert.equal(r.headers.get('location'), `${origin}/x?y=1`);
    const bare = await fetch(`${base}/t/${id}`, { redirect: 'manual' });
    assert.equal(bare.headers.get('location'), `${origin}/`);
    const bad = await fetch(`${base}/t/not-a-tunnel/x`, { redirect: 'manual' });
    assert.equal(bad.status, 404);
    assert.deepEqual(await bad.json(), noTunnel);
  }
  assert.equal((await fetch(`${f.tunnels.url}/v1/models`)).status, 404, 'the tunnels listener serves tunnels only');
});

test('tunnel origins from RC_TUNNEL_PUBLIC_URL: <id>.<host>, hosts only', () => {
  const o = new TunnelOrigins('https://Tunnels.Example.net');
  assert.equal(o.url('t0123456789abcdef01234567'), 'https://t0123456789abcdef01234567.tunnels.example.net/');
  assert.equal(o.idOf('t0123456789abcdef01234567.tunnels.example.net'), 't0123456789abcdef01234567');
  assert.equal(o.idOf('t0123456789abcdef01234567.tunnels.example.net:443'), 't0123456789abcdef01234567');
  assert.equal(o.idOf('tunnels.example.net'), undefined);
  assert.equal(o.idOf('t0123456789abcdef01234567.example.net'), undefined);
  assert.equal(
    new TunnelOrigins('http://tunnels.example.net:8443/').origin('t0123456789abcdef01234567'),
    'http://t0123456789abcdef01234567.tunnels.example.net:8443',
  );
  assert.throws(() => new TunnelOrigins('http://10.0.0.5:8082'), /not an IP address/);
  assert.throws(() => new TunnelOrigins('http://[::1]:8082'), /not an IP address/);
  assert.throws(() => new TunnelOrigins('https://example.net/tunnels'), /without a path/);
  // Never the console's host, nor under or above it (Domain= cookies would cross).
  assert.throws(() => assertTunnelsApart('https://app.example.com', { RC_API_PUBLIC_URL: 'https://app.example.com' }), /apart from RC_API_PUBLIC_URL/);
  assert.throws(() => assertTunnelsApart('https://t.app.example.com', { RC_API_PUBLIC_URL: 'https://app.example.com' }), /apart/);
  assert.throws(() => assertTunnelsApart('https://example.com', { RC_PROXY_PUBLIC_URL: 'https://app.example.com:8443' }), /apart/);
  assertTunnelsApart('https://tunnels.example-user.net', { RC_API_PUBLIC_URL: 'https://app.example.com', RC_PROXY_PUBLIC_URL: '' });
});

/** Opens a tunnel connection by hand: its refusal (status and body), or the open socket. */
function connectRaw(f: GatewayFixture, instanceId: string, port: number): Promise<{ status: number; body: string } | WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(connectUrl(f.gateway.url, port), { headers: { authorization: `Bearer ${issueTunnelToken(f.tunnelSecret, instanceId)}` } });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => {
        resolve({ status: res.statusCode!, body });
        ws.terminate();
      });
    });
    ws.on('message', (data, isBinary) => {
      if (!isBinary && JSON.parse(data.toString()).type === 'hello') resolve(ws);
    });
    ws.on('error', reject);
  });
}

test('a live tunnel is never displaced: a second connection is refused while it answers; a silent one is replaced', async (t) => {
  const f = await startGatewayFixture(t, { probeTimeoutMs: 1_000 });
  const localPort = await startLocal(t);
  f.addRoute('i_owner', '127.0.0.1:1', { instanceType: 'gradio' });
  const owner = startClient(t, f, 'i_owner', localPort);
  const { publicUrl } = (await waitFor(() => owner.statuses.find((s) => s.state === 'connected')))!;

  // Whoever else holds the token connects for the same instance and port: refused, the owner stays.
  const intruder = await connectRaw(f, 'i_owner', localPort);
  assert.ok(!(intruder instanceof WebSocket), 'the second connection was accepted');
  assert.equal(intruder.status, 409);
  assert.match(JSON.parse(intruder.body).detail, /already connected/);
  const still = await tunnelFetch(`${publicUrl}still`);
  assert.equal(still.status, 201);
  assert.equal(((await still.json()) as { url: string }).url, '/still');
  assert.ok(!owner.statuses.some((s) => s.state === 'disconnected'), 'the owner was never disconnected');
  // A second rc-tunnel prints why and backs off (it keeps retrying: the owner may go away).
  const second = startClient(t, f, 'i_owner', localPort);
  await waitFor(() => second.logs.find((l) => /already connected.*reconnecting in \d+ ms/.test(l)));
  second.client.stop();
  assert.equal(f.broker.tunnels().length, 1);
  assert.equal((await tunnelFetch(`${publicUrl}again`)).status, 201);

  // A connection that went silent (its socket no longer read: no close, no pong) is replaced by a reconnect.
  f.addRoute('i_cut', '127.0.0.1:1', { instanceType: 'gradio' });
  const silent = await connectRaw(f, 'i_cut', localPort);
  assert.ok(silent instanceof WebSocket);
  t.after(() => silent.terminate());
  (silent as unknown as { _socket: { pause(): void } })._socket.pause();
  const reconnect = startClient(t, f, 'i_cut', localPort);
  const back = (await waitFor(() => reconnect.statuses.find((s) => s.state === 'connected')))!;
  const r = await tunnelFetch(`${back.publicUrl}after`);
  assert.equal(r.status, 201);
  assert.equal(((await r.json()) as { url: string }).url, '/after');
});

test('RESET once: to the tunnel client when the public client goes away; never back for a stream the tunnel reset', async (t) => {
  const f = await startGatewayFixture(t);
  f.addRoute('i_raw', '127.0.0.1:1', { instanceType: 'gradio' });
  const ws = new WebSocket(connectUrl(f.gateway.url, 8000), { headers: { authorization: `Bearer ${issueTunnelToken(f.tunnelSecret, 'i_raw')}` } });
  t.after(() => ws.terminate());
  let hello: Hello | undefined;
  const requests: number[] = [];
  const resets: number[] = [];
  ws.on('message', (data: Buffer, isBinary) => {
    if (!isBinary) {
      hello = JSON.parse(data.toString()) as Hello;
      return;
    }
    const frame = decodeFrame(data)!;
    if (frame.type === FrameType.RequestHead) {
      ws.send(encodeFrame(FrameType.ResponseHead, frame.stream, JSON.stringify({ status: 200, headers: ['content-type', 'text/plain'] })));
      ws.send(encodeFrame(FrameType.ResponseBody, frame.stream, Buffer.from('started\n')));
      requests.push(frame.stream);
    } else if (frame.type === FrameType.Reset) resets.push(frame.stream);
  });
  await waitFor(() => hello);
  /** A public GET whose response has begun: the socket, its stream, and whether the broker closed it. */
  const begun = async (): Promise<{ socket: Socket; stream: number; closed: Promise<void> }> => {
    const u = new URL(hello!.public_url);
    const socket = connect({ host: '127.0.0.1', port: Number(u.port) });
    t.after(() => socket.destroy());
    socket.on('error', () => {});
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    let text = '';
    socket.on('data', (c: Buffer) => (text += c));
    socket.write(`GET /x HTTP/1.1\r\nHost: ${u.host}\r\n\r\n`);
    const n = requests.length;
    const stream = await waitFor(() => requests[n]);
    await waitFor(() => text.includes('started'));
    return { socket, stream, closed };
  };
  // A ping answered: the broker has read all frames before it and sent all it had to.
  const settled = () =>
    new Promise<void>((resolve) => {
      ws.once('pong', () => resolve());
      ws.ping();
    });

  const gone = await begun();
  gone.socket.destroy();
  await waitFor(() => resets.includes(gone.stream));
  await settled();
  assert.deepEqual(resets, [gone.stream], 'the public client went away: one RESET');

  const failed = await begun();
  ws.send(encodeFrame(FrameType.Reset, failed.stream));
  await failed.closed; // the broker cut the public connection: the body was not whole
  await settled();
  assert.deepEqual(resets, [gone.stream], 'no RESET back for the stream the tunnel reset');
  assert.equal(f.broker.tunnels()[0]!.streams, 0);
});
