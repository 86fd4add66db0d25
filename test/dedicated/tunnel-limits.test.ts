// Issue 44: one instance opening tunnels in a loop must not exhaust the broker. Each limit (live
// tunnels per instance and per account, connection attempts per instance) is driven past, the
// refusal is 429 with its reason and Retry-After, rc-tunnel shows that reason, another tenant
// still gets its tunnels, and everything a connection held is freed when it closes.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { connect, type Socket } from 'node:net';
import { test, type TestContext } from 'node:test';
import WebSocket from 'ws';
import { connectUrl, TunnelClient, type TunnelStatus } from '../../agent/tunnel/client.js';
import { issueTunnelToken } from '../../lib/tunnel/identity.js';
import { connectedTunnel, OTHER, OWNER, startGatewayFixture, type GatewayFixture } from './fixture.js';

interface Attempt {
  status: number;
  detail?: string;
  retryAfter?: string;
  ws?: WebSocket;
}

/** One raw connection attempt as rc-tunnel makes it: the open socket, or the refusal. */
function attempt(f: GatewayFixture, instanceId: string, port: number): Promise<Attempt> {
  return new Promise((resolve) => {
    const ws = new WebSocket(connectUrl(f.gateway.url, port), { headers: { authorization: `Bearer ${issueTunnelToken(f.tunnelSecret, instanceId)}` } });
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c));
      res.on('end', () => {
        resolve({ status: res.statusCode!, detail: JSON.parse(body).detail, retryAfter: res.headers['retry-after'] as string | undefined });
        ws.terminate();
      });
    });
    ws.on('open', () => resolve({ status: 101, ws }));
    ws.on('error', () => {});
  });
}

async function closeAll(list: Attempt[]): Promise<void> {
  await Promise.all(
    list
      .filter((a) => a.ws && a.ws.readyState !== WebSocket.CLOSED)
      .map(
        (a) =>
          new Promise<void>((r) => {
            a.ws!.once('close', () => r());
            if (a.ws!.readyState !== WebSocket.CLOSING) a.ws!.close();
          }),
      ),
  );
}

async function until(check: () => boolean, what: string): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  assert.ok(check(), what);
}

test('live tunnels are bounded per instance and per account; another tenant still connects', async (t) => {
  const f = await startGatewayFixture(t, { tunnelLimits: { perInstance: 3, perAccount: 5, connectsPerInstance: 1000 } });
  f.addRoute('i_loop', '127.0.0.1:1', { accountId: OWNER });
  f.addRoute('i_loop2', '127.0.0.1:1', { accountId: OWNER });
  f.addRoute('i_other', '127.0.0.1:1', { accountId: OTHER });

  // The loop: a new port each time, as the red team's start command did.
  const loop: Attempt[] = [];
  for (let port = 1000; port < 1010; port++) loop.push(await attempt(f, 'i_loop', port));
  t.after(() => closeAll(loop));
  assert.deepEqual(
    loop.map((a) => a.status),
    [101, 101, 101, 429, 429, 429, 429, 429, 429, 429],
  );
  const refused = loop[3]!;
  assert.match(refused.detail!, /Too many tunnels for this instance: 3 are connected \(RC_TUNNEL_MAX_PER_INSTANCE\)/);
  assert.ok(Number(refused.retryAfter) > 0, 'a 429 carries Retry-After');
  // A reconnect of a tunnel that is connected is not a new tunnel: it gets the takeover's 409.
  assert.equal((await attempt(f, 'i_loop', 1000)).status, 409);

  // The account's other instance: 2 more (5 per account), then refused naming the account's limit.
  const second = [await attempt(f, 'i_loop2', 2000), await attempt(f, 'i_loop2', 2001), await attempt(f, 'i_loop2', 2002)];
  t.after(() => closeAll(second));
  assert.deepEqual(
    second.map((a) => a.status),
    [101, 101, 429],
  );
  assert.match(second[2]!.detail!, /Too many tunnels for this account: 5 .*RC_TUNNEL_MAX_PER_ACCOUNT/);

  // Another tenant is untouched.
  const other = [await attempt(f, 'i_other', 1000), await attempt(f, 'i_other', 1001)];
  t.after(() => closeAll(other));
  assert.deepEqual(
    other.map((a) => a.status),
    [101, 101],
  );

  // The owner's rc-tunnel is told why, in its status (what `rc-tunnel status` prints) and log.
  const statuses: TunnelStatus[] = [];
  const logs: string[] = [];
  const client = new TunnelClient({
    broker: f.gateway.url,
    token: issueTunnelToken(f.tunnelSecret, 'i_loop'),
    port: 3000,
    log: (l) => logs.push(l),
    onStatus: (s) => statuses.push(s),
    maxBackoffMs: 200,
  });
  client.start();
  t.after(() => client.stop());
  await until(() => statuses.some((s) => s.state === 'disconnected'), 'rc-tunnel reports the refusal');
  const status = statuses.find((s) => s.state === 'disconnected')!;
  assert.match(status.error!, /Too many tunnels for this instance.*RC_TUNNEL_MAX_PER_INSTANCE/);
  // It waits the broker's Retry-After (30 s), not its own 200 ms backoff: no reconnect loop.
  assert.match(logs.join('\n'), /reconnecting in 30000 ms/);
  client.stop();

  // Closing a tunnel frees its place: the loop's next tunnel connects.
  await closeAll([loop[0]!]);
  await until(() => f.broker.tunnels().filter((x) => x.instanceId === 'i_loop').length === 2, 'the closed tunnel is gone');
  const again = await attempt(f, 'i_loop', 1005);
  t.after(() => closeAll([again]));
  assert.equal(again.status, 101);

  // Everything held is released once every connection is closed.
  await closeAll([...loop, ...second, ...other, again]);
  await until(() => f.broker.tunnels().length === 0, 'all tunnels closed');
  assert.deepEqual(f.broker.limits.held(), { addresses: 0, instances: 0, accounts: 0, tunnelIds: 0 });
});

test('connection attempts are bounded per instance; another instance still connects', async (t) => {
  const f = await startGatewayFixture(t, { tunnelLimits: { connectsPerInstance: 10 } });
  f.addRoute('i_hammer', '127.0.0.1:1', { accountId: OWNER });
  f.addRoute('i_calm', '127.0.0.1:1', { accountId: OTHER });
  const statuses: number[] = [];
  let last: Attempt | undefined;
  for (let i = 0; i < 14; i++) {
    const a = await attempt(f, 'i_hammer', 1000);
    statuses.push(a.status);
    await closeAll([a]);
    last = a;
  }
  // Connect and close in a loop: 10 per window, then 429 until the window ends.
  assert.deepEqual(statuses.slice(0, 10), Array(10).fill(101));
  assert.deepEqual(statuses.slice(10), Array(4).fill(429));
  assert.match(last!.detail!, /Too many tunnel connection attempts for this instance: at most 10 per minute \(RC_TUNNEL_CONNECTS_PER_MINUTE\)/);
  assert.ok(Number(last!.retryAfter) >= 1 && Number(last!.retryAfter) <= 60);
  const calm = await attempt(f, 'i_calm', 1000);
  t.after(() => closeAll([calm]));
  assert.equal(calm.status, 101);
});

test('connection attempts are bounded per client address, refused before the token is checked', async (t) => {
  const f = await startGatewayFixture(t, { tunnelLimits: { connectsPerAddress: 5, perAddress: 2 } });
  f.addRoute('i_a', '127.0.0.1:1', { accountId: OWNER });
  // Open connections per address: 2, then refused.
  const open = [await attempt(f, 'i_a', 1), await attempt(f, 'i_a', 2), await attempt(f, 'i_a', 3)];
  t.after(() => closeAll(open));
  assert.deepEqual(
    open.map((a) => a.status),
    [101, 101, 429],
  );
  assert.match(open[2]!.detail!, /Too many tunnel connections from this address: 2 are open \(RC_TUNNEL_MAX_PER_ADDRESS\)/);
  // Attempts per address (every attempt counts, refused ones and bad tokens too): 5, then refused.
  await closeAll(open);
  await until(() => f.broker.limits.held().addresses === 0, 'the closed connections are released');
  const bad = await attempt({ ...f, tunnelSecret: 'another-secret-0123456789abcdef' }, 'i_a', 4);
  assert.equal(bad.status, 401);
  const fifth = await attempt(f, 'i_a', 5);
  t.after(() => closeAll([fifth]));
  assert.equal(fifth.status, 101);
  const sixth = await attempt(f, 'i_a', 6);
  assert.equal(sixth.status, 429);
  assert.match(sixth.detail!, /Too many tunnel connection attempts from this address: at most 5 per minute/);
});

// The soak's 1 launch in ~3,700 whose tunnel URL never came: a destroyed instance's tunnel stayed
// connected until the broker's next check (30 s), counting against the account's live tunnels (in
// the process runtime rc-tunnel --detach outlives its instance), so a launch right after 32 others
// got 429 and rc-tunnel --detach gave up waiting. The broker ends them when the instance goes.
test("an instance's tunnels end as soon as it goes: its account's next instance connects at once, and rc-tunnel stops", async (t) => {
  const f = await startGatewayFixture(t, { tunnelLimits: { perAccount: 1, connectsPerInstance: 1000 }, pingIntervalMs: 600_000 });
  f.addRoute('i_gone', '127.0.0.1:1', { accountId: OWNER });
  f.addRoute('i_next', '127.0.0.1:1', { accountId: OWNER });
  const statuses: TunnelStatus[] = [];
  const client = new TunnelClient({
    broker: f.gateway.url,
    token: issueTunnelToken(f.tunnelSecret, 'i_gone'),
    port: 3000,
    log: () => {},
    onStatus: (s) => statuses.push(s),
    maxBackoffMs: 200,
  });
  client.start();
  t.after(() => client.stop());
  await until(() => statuses.some((s) => s.state === 'connected'), 'connected');
  const busy = await attempt(f, 'i_next', 3000);
  assert.equal(busy.status, 429, 'the account holds its one tunnel');
  f.routes.delete('i_gone');
  await until(() => statuses.at(-1)?.state === 'failed', 'rc-tunnel is told the instance is gone, and stops');
  assert.match(statuses.at(-1)!.error!, /The instance is no longer running/);
  const next = await attempt(f, 'i_next', 3000);
  t.after(() => closeAll([next]));
  assert.equal(next.status, 101, "the gone instance's tunnel no longer counts");
  assert.deepEqual(f.broker.limits.held(), { instances: 1, accounts: 1, addresses: 1, tunnelIds: 1 });
});

/** A local service that answers every request with the size of its body, once whole. */
async function sizeService(t: TestContext): Promise<number> {
  const server = createServer((req, res) => {
    let size = 0;
    req.on('data', (c: Buffer) => (size += c.length));
    req.on('end', () => {
      const json = JSON.stringify({ size });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': String(json.length) }).end(json);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as { port: number }).port;
}

interface PublicUpload {
  socket: Socket;
  reply: string;
  closed: boolean;
  rest: Buffer;
}

/** POSTs `size` bytes to a tunnel's public URL, all but the last `withhold`. */
function publicUpload(f: GatewayFixture, url: URL, size: number, withhold: number): PublicUpload {
  const body = Buffer.alloc(size, 'x');
  const socket = connect({ host: '127.0.0.1', port: f.tunnels.port });
  const u: PublicUpload = { socket, reply: '', closed: false, rest: body.subarray(size - withhold) };
  socket.on('connect', () => {
    socket.write(`POST /upload HTTP/1.1\r\nHost: ${url.host}\r\nContent-Length: ${size}\r\n\r\n`);
    socket.write(body.subarray(0, size - withhold));
  });
  socket.on('data', (d: Buffer) => (u.reply += d.toString('latin1')));
  socket.on('close', () => (u.closed = true));
  socket.on('error', () => {});
  return u;
}

const answered = (u: PublicUpload) => /\r\n\r\n\{.*\}$/s.test(u.reply);

test("tunnels' public request bodies count in the gateway's uploads: past the instance's bound 429 and closed; the other account's tunnel takes uploads; all freed", async (t) => {
  const f = await startGatewayFixture(t, { uploads: { uploadsPerInstance: 2 } });
  const uploads = f.gateway.context.uploads;
  f.addRoute('i_app', '127.0.0.1:1', { accountId: OWNER });
  f.addRoute('i_else', '127.0.0.1:1', { accountId: OTHER });
  const service = await sizeService(t);
  const mine = new URL(await connectedTunnel(t, f, 'i_app', service));
  const theirs = new URL(await connectedTunnel(t, f, 'i_else', service));
  const slow = Array.from({ length: 4 }, () => publicUpload(f, mine, 256 * 1024, 1));
  t.after(() => {
    for (const u of slow) u.socket.destroy();
  });
  await until(() => slow.filter(answered).length >= 2, 'two refused');
  const refused = slow.filter(answered);
  assert.equal(refused.length, 2);
  for (const u of refused) {
    assert.match(u.reply, /^HTTP\/1\.1 429 /);
    assert.match(u.reply, /\r\nretry-after: 5\r\n/i);
    assert.ok(u.reply.endsWith('{"detail":"Too many uploads in flight for this instance: at most 2 (RC_DEDICATED_UPLOADS_PER_INSTANCE)"}'), u.reply);
  }
  await until(() => refused.every((u) => u.closed), 'refused connections closed, their bodies unread');
  assert.deepEqual(uploads.held(), { addresses: 1, accounts: 1, instances: 1, uploads: 2, bytes: 2 * (256 * 1024 - 1) });
  // The other account's tunnel takes an upload meanwhile, and it completes.
  const other = publicUpload(f, theirs, 256 * 1024, 1);
  t.after(() => other.socket.destroy());
  await until(() => uploads.held().instances === 2, "the other tenant's upload counts against its own instance");
  other.socket.write(other.rest);
  await until(() => answered(other), 'answered');
  assert.match(other.reply, /^HTTP\/1\.1 200 [\s\S]*\{"size":262144\}$/);
  // The held ones complete when their last byte comes; then nothing is held.
  const held = slow.filter((u) => !answered(u));
  for (const u of held) u.socket.write(u.rest);
  await until(() => held.every(answered), 'held ones answered');
  for (const u of held) assert.match(u.reply, /^HTTP\/1\.1 200 [\s\S]*\{"size":262144\}$/);
  assert.deepEqual(uploads.held(), { addresses: 0, accounts: 0, instances: 0, uploads: 0, bytes: 0 });
});
