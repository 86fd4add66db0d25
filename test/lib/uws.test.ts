import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { isNative, loadNativeUws, uws } from '../../lib/uws.js';
import { UwsNativeUnavailableError } from '../../lib/errors.js';

test('the native uWebSockets.js server is the one in use', () => {
  const mod = uws();
  assert.equal(isNative(mod), true);
  assert.match(Function.prototype.toString.call(mod.App), /\[native code\]/);
});

test('a missing native binary is refused, not replaced by the JS fallback', () => {
  assert.throws(
    () => loadNativeUws('/nonexistent/uws_linux_x64_0.node'),
    (err: unknown) => {
      assert.ok(err instanceof UwsNativeUnavailableError);
      assert.equal(err.code, 'RC_ERR_UWS_NATIVE_UNAVAILABLE');
      assert.match(err.message, /Refusing the slow pure-JS fallback/);
      return true;
    },
  );
});

test('the JS fallback module is recognised as not native', async () => {
  const { createRequire } = await import('node:module');
  const require = createRequire(import.meta.url);
  const fallback = require('uWebSockets.js/dist/index');
  assert.equal(isNative(fallback), false);
});

test('a process asked to use the fallback refuses to start with a clear error', () => {
  const r = spawnSync(process.execPath, ['bin/rc.js', 'sim', '--port', '0', '--model', 'm'], {
    env: { ...process.env, UWS_USE_FALLBACK: '1' },
    encoding: 'utf8',
    timeout: 20_000,
  });
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /refusing the slow pure-JS uWebSockets\.js fallback/i);
});
