// Issue 14, "credentials crossing to instances", with the attacks as the tests: a victim's
// platform credentials (session cookie, CSRF token, API key) sent to an attacker's tunnel,
// dedicated endpoint or proxied app never arrive, and no instance response sets or clears a
// platform cookie in the victim's browser.
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { test, type TestContext } from 'node:test';
import { TunnelClient, type TunnelStatus } from '../../agent/tunnel/client.js';
import { issueTunnelToken } from '../../lib/tunnel/identity.js';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { ProxyTickets } from '../../control-plane/proxy/handover.js';
import { hashKey } from '../../lib/keys.js';
import { fetchLoopback } from './origins.js';
import { startInstanceProxyServer } from '../../control-plane/proxy/proxy.js';
import { forwardableRequestHeader, isPlatformSetCookie, withoutPlatformCookies } from '../../lib/instance-credentials.js';
import { createLogger } from '../../lib/log.js';
import { startPlatform } from '../control-plane/platform.js';
import { waitFor, listenLocal } from '../helpers.js';
import { startGatewayFixture, tunnelFetch } from './fixture.js';

/** What an attacker's service sets: a platform session of its choosing (fixation), a cleared one, and its own cookie. */
const PLANTED = [
  'rc_session=attacker-session; Path=/; HttpOnly',
  '__Host-rc_session=x; Path=/; Secure',
  'RC_Session=y; Domain=example.test',
  'rc_session',
  'app=1; Path=/',
];

/** The attacker's service: records every request's headers and answers with PLANTED. */
async function startAttackerApp(t: TestContext): Promise<{ port: number; seen: IncomingHttpHeaders[] }> {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on('end', () => {
      // Service-Worker-Allowed: / would let its worker take every path of the origin.
      res.writeHead(200, { 'content-type': 'text/plain', 'set-cookie': PLANTED, 'service-worker-allowed': '/' });
      res.end('ok');
    });
  });
  return { port: await listenLocal(t, server), seen };
}

/** Everything a victim's browser or client may attach. */
const victimKey = 'rc-' + 'V'.repeat(43);
const VICTIM_HEADERS = {
  cookie: 'rc_session=victim-session-token; theme=dark; __Host-rc_other=1',
  'x-csrf-token': 'victim-csrf-token',
  'x-api-key': victimKey,
};

function assertNoPlatformCredential(h: IncomingHttpHeaders): void {
  const all = JSON.stringify(h);
  assert.ok(!all.includes('victim-session-token'), `session cookie leaked: ${all}`);
  assert.ok(!all.includes('victim-csrf-token'), `CSRF token leaked: ${all}`);
  assert.ok(!all.includes(victimKey), `API key leaked: ${all}`);
  assert.equal(h['x-csrf-token'], undefined);
}

/** The response carries the app's own cookie only, and no Service-Worker-Allowed. */
function assertNoPlatformCookieSet(r: { headers: { getSetCookie(): string[]; get(name: string): string | null } }): void {
  assert.deepEqual(r.headers.getSetCookie(), ['app=1; Path=/']);
  assert.equal(r.headers.get('service-worker-allowed'), null, 'Service-Worker-Allowed passed through');
}

test('the shared filter: platform cookies, CSRF header and keys are removed, the rest kept', () => {
  assert.equal(withoutPlatformCookies('a=1; rc_session=abc; b=2'), 'a=1; b=2');
  assert.equal(withoutPlatformCookies('rc_session=abc'), '');
  assert.equal(withoutPlatformCookies('RC_SESSION=abc;__Secure-rc_x=1; c=3'), 'c=3');
  assert.equal(withoutPlatformCookies('src_id=1; arc_=2'), 'src_id=1; arc_=2');
  assert.equal(forwardableRequestHeader('authorization', `Bearer ${victimKey}`), undefined);
  assert.equal(forwardableRequestHeader('authorization', `bearer   ${victimKey}`), undefined);
  assert.equal(forwardableRequestHeader('x-api-key', victimKey), undefined);
  assert.equal(forwardableRequestHeader('authorization', 'token jupyter-own'), 'token jupyter-own');
  assert.equal(forwardableRequestHeader('authorization', 'Basic dXNlcjpwdw=='), 'Basic dXNlcjpwdw==');
  assert.equal(forwardableRequestHeader('x-csrf-token', 'anything'), undefined);
  assert.equal(forwardableRequestHeader('x-rc-admin-token', 'anything'), undefined);
  assert.equal(forwardableRequestHeader('cookie', 'rc_session=a'), undefined);
  assert.ok(PLANTED.slice(0, 4).every(isPlatformSetCookie));
  assert.ok(!isPlatformSetCookie('app=1; Path=/'));
  assert.ok(!isPlatformSetCookie('app=rc_session'));
});

test("attack: a victim opens an attacker's tunnel URL with the platform session, CSRF token and key", async (t) => {
  const f = await startGatewayFixture(t);
  const app = await startAttackerApp(t);
  f.addRoute('i_attacker', '127.0.0.1:1', { instanceType: 'gradio' });
  const statuses: TunnelStatus[] = [];
  const client = new TunnelClient({
    broker: f.gateway.url,
    token: issueTunnelToken(f.tunnelSecret, 'i_attacker'),
    port: app.port,
    log: () => {},
    onStatus: (s) => statuses.push(s),
    maxBackoffMs: 200,
  });
  client.start();
  t.after(() => client.stop());
  const { publicUrl } = (await waitFor(() => statuses.find((s) => s.state === 'connected')))!;

  const r = await tunnelFetch(`${publicUrl}steal`, { headers: { ...VICTIM_HEADERS, authorization: `Bearer ${victimKey}` } });
  assert.equal(r.status, 200);
  assertNoPlatformCookieSet(r);
  const seen = app.seen.at(-1)!;
  assertNoPlatformCredential(seen);
  assert.equal(seen.cookie, 'theme=dark', "the app's own cookies still pass");
  assert.equal(seen.authorization, undefined);
  // The customer's own authentication in front of the service passes through.
  await tunnelFetch(`${publicUrl}own`, { headers: { authorization: 'Basic dXNlcjpwdw==' } });
  assert.equal(app.seen.at(-1)!.authorization, 'Basic dXNlcjpwdw==');
});

test("attack: the platform session and CSRF token sent to an attacker's dedicated endpoint never arrive", async (t) => {
  const f = await startGatewayFixture(t);
  const app = await startAttackerApp(t);
  f.addRoute('i_dedicated', `127.0.0.1:${app.port}`);
  // The endpoint authenticates with the account's own key, and does not forward it either.
  const r = await fetch(`${f.gateway.url}/dedicated/i_dedicated/8000/v1/models`, { headers: { ...VICTIM_HEADERS, 'x-api-key': f.ownerKey } });
  assert.equal(r.status, 200);
  assertNoPlatformCookieSet(r);
  const seen = app.seen.at(-1)!;
  assertNoPlatformCredential(seen);
  assert.ok(!JSON.stringify(seen).includes(f.ownerKey), 'the account key is not forwarded');
  assert.equal(seen.cookie, 'theme=dark');
  // A second platform key in the other header (a victim's) is not forwarded either.
  await fetch(`${f.gateway.url}/dedicated/i_dedicated/8000/x`, { headers: { authorization: `Bearer ${f.ownerKey}`, 'x-api-key': victimKey } });
  assertNoPlatformCredential(app.seen.at(-1)!);
});

test('attack: an app behind the instance proxy plants or clears the platform session', async (t) => {
  const platform = await startPlatform();
  t.after(() => platform.close());
  const app = await startAttackerApp(t);
  const signup = await platform.call('POST', '/api/auth/signup', { body: { email: 'owner@example.com', password: 'correct horse battery' } });
  const cookie = ([] as string[]).concat(signup.headers['set-cookie'] as string)[0]!.split(';')[0]!;
  const routes = new InstanceRouteTable(() => {}, 0);
  routes.set({
    instanceId: 'inst-app',
    accountId: signup.body.account.id as number,
    status: 'ready',
    instanceType: 'gradio',
    ports: new Map([[7860, `127.0.0.1:${app.port}`]]),
  });
  const proxy = await startInstanceProxyServer({
    store: platform.cp.store,
    routes,
    tickets: new ProxyTickets(platform.cp.store),
    logger: createLogger('silent'),
  });
  t.after(() => proxy.close());
  // The proxy's own cookie (what the hand-over sets on the instance's origin), and the console's beside it.
  const proxyCookie = `rc_proxy=${proxy.proxy.cookies.value('inst-app', hashKey(cookie.split('=')[1]!))}`;

  const r = await fetchLoopback(`http://inst-app.localhost:${proxy.port}/`, {
    headers: { cookie: `${cookie}; ${proxyCookie}; __Host-theme=dark`, 'x-csrf-token': 'victim-csrf-token' },
  });
  assert.equal(r.status, 200);
  // The app's own cookie passes, with the proxy's seal for it (control-plane/proxy/app-cookies.ts).
  const [own, seal, ...rest] = r.headers.getSetCookie();
  assert.equal(own, 'app=1; Path=/');
  assert.match(seal ?? '', /^rcseal\.app=[\w-]{22}; Path=\/; HttpOnly; SameSite=Lax$/);
  assert.deepEqual(rest, []);
  assert.equal(r.headers.get('service-worker-allowed'), null, 'Service-Worker-Allowed passed through');
  const seen = app.seen.at(-1)!;
  assert.equal(seen.cookie, '__Host-theme=dark');
  assert.ok(!JSON.stringify(seen).includes(cookie.split('=')[1]!));
  assert.ok(!JSON.stringify(seen).includes(proxyCookie.split('=')[1]!));
  assert.equal(seen['x-csrf-token'], undefined);
});
