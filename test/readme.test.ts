// The README stays true: its quick start is the two commands, and it names every setting.
// Paths are relative to the repository root, where npm test runs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { SETTINGS } from '../lib/config.js';

const readme = readFileSync('README.md', 'utf8');
const pkg = JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> };

test('the quick start shows exactly the two commands, and both scripts exist', () => {
  assert.match(readme, /^npm ci && npm start/m);
  assert.match(readme, /^npm test/m);
  assert.ok(pkg.scripts.start && pkg.scripts.test);
});

test('every setting is in the README with its environment variable', () => {
  const missing = Object.values(SETTINGS)
    .map((s) => s.env)
    .filter((env) => !readme.includes(`\`${env}\``));
  assert.deepEqual(missing, []);
});

test('.ci/run installs and starts what the suite needs, and runs npm test with all of it required', () => {
  const ci = readFileSync('.ci/run', 'utf8');
  assert.match(ci, /set -euo pipefail/);
  assert.match(ci, /npm ci/);
  assert.match(ci, /redis-server/);
  assert.match(ci, /apt-get install -y -qq chromium/);
  assert.match(ci, /dockerd --iptables=false/);
  const testLine = ci.split('\n').find((l) => /^[A-Z_=0-9 ]*npm test$/.test(l));
  assert.ok(testLine, '.ci/run has an `... npm test` line');
  for (const flag of ['RC_REQUIRE_REDIS=1', 'RC_REQUIRE_DOCKER=1', 'RC_REQUIRE_NETNS=1', 'RC_REQUIRE_BROWSER=1', 'RC_REQUIRE_VALGRIND=1']) {
    assert.ok(testLine.includes(flag), `npm test runs with ${flag}`);
  }
  assert.match(ci, /scripts\/build-images\.mjs/);
});
