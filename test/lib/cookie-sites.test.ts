// Public origins and cookie sites (issue 44, item 8): a tenant family (apps, tunnels) shares a
// registrable domain with no other public origin unless its host is a public suffix; the platform's
// own origins may share one. Checked when the configuration loads.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../../lib/config.js';
import { assertCookieSitesApart, publicOriginsOf, registrableDomain } from '../../lib/cookie-sites.js';
import { ConfigError } from '../../lib/errors.js';

test('registrable domains by the Public Suffix List, private section included; none for addresses and suffixes', () => {
  assert.equal(registrableDomain('x.apps.example.net'), 'example.net');
  assert.equal(registrableDomain('inst-1.apps.example.co.uk'), 'example.co.uk');
  assert.equal(registrableDomain('a.b.github.io'), 'b.github.io');
  assert.equal(registrableDomain('X.Apps.Example.NET.'), 'example.net');
  assert.equal(registrableDomain('inst-1.localhost'), 'inst-1.localhost');
  assert.equal(registrableDomain('localhost'), undefined);
  assert.equal(registrableDomain('github.io'), undefined);
  assert.equal(registrableDomain('127.0.0.1'), undefined);
  assert.equal(registrableDomain('[::1]'), undefined);
});

/** loadConfig's ConfigError for `env`, or undefined when it loads. */
function refusal(env: NodeJS.ProcessEnv): string | undefined {
  try {
    loadConfig(env);
    return undefined;
  } catch (err) {
    assert.ok(err instanceof ConfigError, String(err));
    return err.message;
  }
}

test('the shape of the red team: console, apps and tunnels under one registrable domain are refused at start, naming both and the fix', () => {
  const shared = {
    RC_API_PUBLIC_URL: 'https://console.example.net',
    RC_PROXY_PUBLIC_URL: 'https://apps.example.net',
    RC_TUNNEL_PUBLIC_URL: 'https://tunnels.example.net',
  };
  const msg = refusal(shared);
  assert.match(
    msg ?? '',
    /RC_API_PUBLIC_URL \(https:\/\/console\.example\.net\) and RC_PROXY_PUBLIC_URL \(https:\/\/apps\.example\.net\) share the registrable domain example\.net/,
  );
  assert.match(msg ?? '', /Domain=example\.net/);
  assert.match(msg ?? '', /registrable domains of their own/);
  // Apps apart, tunnels still with the console.
  assert.match(
    refusal({ ...shared, RC_PROXY_PUBLIC_URL: 'https://apps.example-apps.net' }) ?? '',
    /RC_API_PUBLIC_URL .* and RC_TUNNEL_PUBLIC_URL .* example\.net/,
  );
  // Apps and tunnels together, apart from the console: tunnels could toss into apps.
  assert.match(
    refusal({
      RC_API_PUBLIC_URL: 'https://console.example.com',
      RC_PROXY_PUBLIC_URL: 'https://apps.example.net',
      RC_TUNNEL_PUBLIC_URL: 'https://tunnels.example.net',
    }) ?? '',
    /RC_PROXY_PUBLIC_URL .* and RC_TUNNEL_PUBLIC_URL .* share the registrable domain example\.net/,
  );
  // The gateway counts too (it reads the session cookie).
  assert.match(
    refusal({ RC_INSTANCE_PUBLIC_URL: 'https://models.example.net', RC_TUNNEL_PUBLIC_URL: 'https://tunnels.example.net' }) ?? '',
    /RC_INSTANCE_PUBLIC_URL .* and RC_TUNNEL_PUBLIC_URL .*example\.net/,
  );
  // A console at the bare domain, apps one level down; ports do not matter.
  assert.match(
    refusal({ RC_API_PUBLIC_URL: 'http://example.net:8080', RC_PROXY_PUBLIC_URL: 'http://example.net:8081' }) ?? '',
    /share the registrable domain example\.net/,
  );
  // Under a two-label suffix.
  assert.match(refusal({ RC_API_PUBLIC_URL: 'https://app.example.co.uk', RC_PROXY_PUBLIC_URL: 'https://apps.example.co.uk' }) ?? '', /example\.co\.uk/);
  // An unknown top-level domain reads by the list's default rule: rc.test is registrable.
  assert.match(refusal({ RC_API_PUBLIC_URL: 'http://console.rc.test', RC_TUNNEL_PUBLIC_URL: 'http://tunnels.rc.test' }) ?? '', /rc\.test/);
});

test('the documented deployment shapes load', () => {
  // Registrable domains apart (README "Configuration", cookie sites).
  assert.equal(
    refusal({
      RC_API_PUBLIC_URL: 'https://console.example.com',
      RC_INSTANCE_PUBLIC_URL: 'https://models.example.com',
      RC_PROXY_PUBLIC_URL: 'https://apps.example-apps.net',
      RC_TUNNEL_PUBLIC_URL: 'https://tunnels.example-tunnels.net',
    }),
    undefined,
  );
  // npm start's defaults: console and gateway on 127.0.0.1, apps and tunnels on *.localhost.
  assert.equal(refusal({}), undefined);
  // All on RC_HOST=0.0.0.0 with only the tenant families named.
  assert.equal(refusal({ RC_HOST: '0.0.0.0', RC_PROXY_PUBLIC_URL: 'https://apps.example-apps.net' }), undefined);
  // The console at localhost beside apps and tunnels on *.localhost: no page can set Domain=localhost.
  assert.equal(refusal({ RC_API_PUBLIC_URL: 'http://localhost:8080' }), undefined);
});

test('a tenant family on a public suffix is one site per tenant: allowed beside anything', () => {
  // github.io stands for a name the operator has listed in the PSL's private section.
  assertCookieSitesApart([
    { setting: 'RC_API_PUBLIC_URL', url: 'https://github.io', kind: 'platform' },
    { setting: 'RC_PROXY_PUBLIC_URL', url: 'https://github.io', kind: 'tenants' },
    { setting: 'RC_TUNNEL_PUBLIC_URL', url: 'https://github.io', kind: 'tenants' },
  ]);
  // A family one level under a listed suffix is not: `<id>.apps.github.io` share apps.github.io.
  assert.throws(
    () =>
      assertCookieSitesApart([
        { setting: 'RC_API_PUBLIC_URL', url: 'https://console.apps.github.io', kind: 'platform' },
        { setting: 'RC_PROXY_PUBLIC_URL', url: 'https://apps.github.io', kind: 'tenants' },
      ]),
    /share the registrable domain apps\.github\.io/,
  );
});

test('the platform origins may share a site: they serve no tenant page', () => {
  assertCookieSitesApart([
    { setting: 'RC_API_PUBLIC_URL', url: 'https://console.example.com', kind: 'platform' },
    { setting: 'RC_INSTANCE_PUBLIC_URL', url: 'https://models.example.com', kind: 'platform' },
  ]);
});

test('defaults are named as such in the error', () => {
  const origins = publicOriginsOf({
    host: '::1',
    apiPort: 8080,
    apiPublicUrl: '',
    gatewayPort: 8090,
    instancePublicUrl: '',
    proxyPort: 8081,
    proxyPublicUrl: 'http://apps.example.net',
    tunnelPort: 8082,
    tunnelPublicUrl: '',
  });
  assert.deepEqual(
    origins.map((o) => [o.setting, o.url, o.defaulted ?? false]),
    [
      ['RC_API_PUBLIC_URL', 'http://[::1]:8080', true],
      ['RC_INSTANCE_PUBLIC_URL', 'http://[::1]:8090', true],
      ['RC_PROXY_PUBLIC_URL', 'http://apps.example.net', false],
      ['RC_TUNNEL_PUBLIC_URL', 'http://localhost:8082', true],
    ],
  );
  assertCookieSitesApart(origins);
  assert.throws(
    () => assertCookieSitesApart([...origins, { setting: 'X', url: 'http://example.net', kind: 'platform', defaulted: true }]),
    /X \(empty: http:\/\/example\.net\)/,
  );
});
