// Instance origins on the proxy (issue 27): the id is the first label of the host name.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { instanceIdOfHost, instanceOrigin, isInstanceLabel, proxyBaseUrl } from '../../lib/instance-origin.js';

test('instance ids as DNS labels, origins and the id named by a Host header', () => {
  assert.ok(isInstanceLabel('inst-0123456789abcdef01234567'));
  for (const bad of ['inst_AbC', 'Inst-1', '-a', 'a-', '', 'a.b', 'x'.repeat(64)]) assert.ok(!isInstanceLabel(bad), bad);
  assert.equal(proxyBaseUrl('', 8081), 'http://localhost:8081');
  assert.equal(proxyBaseUrl('https://apps.example.net/', 8081), 'https://apps.example.net');
  assert.equal(instanceOrigin('http://localhost:8081', 'inst-1'), 'http://inst-1.localhost:8081');
  assert.equal(instanceOrigin('https://apps.example.net', 'inst-1'), 'https://inst-1.apps.example.net');
  assert.equal(instanceIdOfHost('inst-1.localhost:8081', 'localhost'), 'inst-1');
  assert.equal(instanceIdOfHost('INST-1.LOCALHOST:8081', 'localhost'), 'inst-1', 'host names are case-insensitive');
  assert.equal(instanceIdOfHost('inst-1.apps.example.net.', 'apps.example.net'), 'inst-1', 'a trailing dot');
  for (const [host, base] of [
    ['localhost:8081', 'localhost'],
    ['127.0.0.1:8081', 'localhost'],
    ['inst-1.evil.net', 'apps.example.net'],
    ['a.inst-1.apps.example.net', 'apps.example.net'],
    ['inst_1.localhost', 'localhost'],
    ['[::1]:8081', 'localhost'],
    ['', 'localhost'],
    ['.localhost', 'localhost'],
  ]) {
    assert.equal(instanceIdOfHost(host!, base!), undefined, host);
  }
});
