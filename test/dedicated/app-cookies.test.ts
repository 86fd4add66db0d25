// An instance's app gets only its own cookies through the proxy (issue 44, item 8): cookies its
// server set through the proxy for it, with the value it set (sealed), and `__Host-` ones; a
// cookie a sibling's page tossed with `Domain=` never reaches it. The browser's side of the attack
// is test/console/cookie-sites.test.ts.
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { test } from 'node:test';
import { AppCookieSeals, SEAL_PREFIX, SECURE_SEAL_PREFIX } from '../../control-plane/proxy/app-cookies.js';
import { ProxyTickets } from '../../control-plane/proxy/handover.js';
import { startInstanceProxyServer } from '../../control-plane/proxy/proxy.js';
import { InstanceRouteTable } from '../../lib/instance-routes.js';
import { hashKey } from '../../lib/keys.js';
import { createLogger } from '../../lib/log.js';
import { startPlatform } from '../control-plane/platform.js';
import { listenLocal } from '../helpers.js';
import { fetchLoopback } from './origins.js';

/** The `name=value` of a Set-Cookie value. */
const pairOf = (setCookie: string) => setCookie.split(';')[0]!.trim();

test('seals: the app gets the cookies its server set, with their values, and __Host- ones; nothing another page could have set', () => {
  const seals = new AppCookieSeals();
  const seal = pairOf(seals.sealFor('inst-a', 'sid=own; Path=/lab; HttpOnly', false)!);
  assert.match(seal, /^rcseal\.sid=[\w-]{22}$/);
  const forward = (header: string, id = 'inst-a') => seals.forwardable(id, header, false);

  assert.equal(forward(`sid=own; ${seal}`), 'sid=own');
  assert.equal(forward('sid=evil'), '', 'tossed, no seal');
  assert.equal(forward(`sid=evil; ${seal}`), '', 'tossed under the name of a sealed cookie');
  assert.equal(forward(`sid=evil; sid=own; ${seal}`), 'sid=own', 'the app and a sibling both hold sid: only the own one');
  assert.equal(forward(`sid=own; ${seal}`, 'inst-b'), '', "a seal made for another instance's app");
  assert.equal(forward(`sid=own; ${seal.replace('rcseal.', '__Host-rcseal.')}`), '', 'a seal of the https scheme on plain http');
  assert.equal(forward(`sid=own; rcseal.sid=${'A'.repeat(22)}`), '', 'a forged seal');
  assert.equal(forward(`__Host-pref=1; theme=dark; ${seal}`), '__Host-pref=1', '__Host- names pass (host-only by the browser); a script-set one does not');
  assert.equal(forward(`nameless; =x; ${seal}`), '');
  assert.equal(forward(`rc_session=s; rc_proxy=p; __Host-rc_proxy=p; sid=own; ${seal}`), 'sid=own', 'platform cookies never');
  assert.equal(forward(''), '');

  // Lifetimes follow the app's cookie, so a deletion deletes the seal too; https seals are __Host- and Secure.
  assert.equal(
    seals.sealFor('inst-a', 'sid=; Path=/; Max-Age=0; expires=Thu, 01 Jan 1970 00:00:00 GMT', false)!.replace(/=[\w-]{22};/, '=S;'),
    'rcseal.sid=S; Path=/; HttpOnly; SameSite=Lax; Max-Age=0; expires=Thu, 01 Jan 1970 00:00:00 GMT',
  );
  const secure = seals.sealFor('inst-a', 'sid=own; Domain=apps.example.net', true)!;
  assert.match(secure, /^__Host-rcseal\.sid=[\w-]{22}; Path=\/; HttpOnly; SameSite=Lax; Secure$/);
  assert.equal(seals.forwardable('inst-a', `sid=own; ${pairOf(secure)}`, true), 'sid=own');
  assert.equal(seals.forwardable('inst-a', `sid=own; ${seal}`, true), '', 'behind TLS only a __Host- seal counts');
  assert.ok(SECURE_SEAL_PREFIX.startsWith('__Host-') && SEAL_PREFIX === 'rcseal.');
  // Nothing to seal: __Host- names, platform names (dropped anyway), nameless cookies.
  assert.equal(seals.sealFor('inst-a', '__Host-x=1; Path=/; Secure', true), undefined);
  assert.equal(seals.sealFor('inst-a', 'rc_session=x', false), undefined);
  assert.equal(seals.sealFor('inst-a', 'justtext', false), undefined);
  // A new key (a restart): the old seals count for nothing.
  assert.equal(new AppCookieSeals().forwardable('inst-a', `sid=own; ${seal}`, false), '');
});

test('through the proxy: the app sets a cookie and gets it back; a tossed one of the same name never arrives', async (t) => {
  const platform = await startPlatform();
  t.after(() => platform.close());
  const seen: (string | undefined)[] = [];
  const app = createServer((req, res) => {
    seen.push(req.headers.cookie);
    res.writeHead(200, { 'content-type': 'text/plain', 'set-cookie': req.url === '/login' ? ['sid=own; Path=/; HttpOnly', '__Host-x=1; Path=/; Secure'] : [] });
    res.end('ok');
  });
  const appPort = await listenLocal(t, app);
  const signup = await platform.call('POST', '/api/auth/signup', { body: { email: 'owner@example.com', password: 'correct horse battery' } });
  const session = ([] as string[])
    .concat(signup.headers['set-cookie'] as string)[0]!
    .split(';')[0]!
    .split('=')[1]!;
  const routes = new InstanceRouteTable(() => {}, 0);
  for (const id of ['inst-a', 'inst-b'])
    routes.set({
      instanceId: id,
      accountId: signup.body.account.id as number,
      status: 'ready',
      instanceType: 'gradio',
      ports: new Map([[7860, `127.0.0.1:${appPort}`]]),
    });
  const proxy = await startInstanceProxyServer({
    store: platform.cp.store,
    routes,
    tickets: new ProxyTickets(platform.cp.store),
    logger: createLogger('silent'),
  });
  t.after(() => proxy.close());
  const proxyCookie = (id: string) => `rc_proxy=${proxy.proxy.cookies.value(id, hashKey(session))}`;
  const get = async (id: string, path: string, cookie: string) => {
    const r = await fetchLoopback(`http://${id}.localhost:${proxy.port}${path}`, { headers: { cookie: `${proxyCookie(id)}; ${cookie}` } });
    assert.equal(r.status, 200);
    await r.text();
    return { setCookies: r.headers.getSetCookie(), cookie: seen.at(-1) };
  };

  const login = await get('inst-a', '/login', '');
  assert.deepEqual(login.setCookies.map(pairOf).slice(0, 2), ['sid=own', '__Host-x=1']);
  const seal = pairOf(login.setCookies.find((c) => c.startsWith('rcseal.sid='))!);
  assert.equal(login.setCookies.length, 3, 'one seal, for sid only');

  assert.equal((await get('inst-a', '/', `sid=own; ${seal}`)).cookie, 'sid=own');
  // A sibling's page ran `document.cookie = "sid=evil; domain=localhost"`: the browser sends both.
  assert.equal((await get('inst-a', '/', `sid=evil; sid=own; ${seal}`)).cookie, 'sid=own');
  assert.equal((await get('inst-a', '/', `sid=evil`)).cookie, undefined);
  // inst-a's cookie and seal sent to inst-b (as a Domain= cookie would be) open nothing there.
  assert.equal((await get('inst-b', '/', `sid=own; ${seal}`)).cookie, undefined);
});
