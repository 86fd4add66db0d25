// Loads the native uWebSockets.js binary, and nothing else.
//
// The package we use (an npm alias of @trufflesuite/uws-js-unofficial) silently falls back to a
// slow pure-JS server when its binary does not load. A gateway on the fallback would look
// healthy and be many times slower, so we load the binary ourselves and refuse to start if it
// is missing or incompatible.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as Uws from 'uWebSockets.js';
import { UwsNativeUnavailableError } from './errors.js';

const require = createRequire(import.meta.url);

export type { HttpRequest, HttpResponse, TemplatedApp, us_listen_socket, WebSocket } from 'uWebSockets.js';
export type UwsModule = typeof Uws;

/** Path of the native binary this platform, architecture and Node ABI need. */
export function nativeBinaryPath(): string {
  const pkgDir = dirname(require.resolve('uWebSockets.js/package.json'));
  return join(pkgDir, 'binaries', `uws_${process.platform}_${process.arch}_${process.versions.modules}.node`);
}

/** Loads the native module from `binaryPath`; throws UwsNativeUnavailableError instead of falling back. */
export function loadNativeUws(binaryPath = nativeBinaryPath()): UwsModule {
  const flag = process.env.UWS_USE_FALLBACK;
  if (flag && /^(1|true)$/i.test(flag)) {
    throw new UwsNativeUnavailableError('UWS_USE_FALLBACK is set: refusing the slow pure-JS uWebSockets.js fallback. Unset it to use the native server.');
  }
  let mod: UwsModule;
  try {
    mod = require(binaryPath) as UwsModule;
  } catch (err) {
    throw new UwsNativeUnavailableError(
      `The native uWebSockets.js binary did not load (${binaryPath}): ${(err as Error).message}. ` +
        'Refusing the slow pure-JS fallback. Use Node 20 on linux-x64 with glibc >= 2.31, or rebuild the binary.',
      err,
    );
  }
  if (!isNative(mod)) throw new UwsNativeUnavailableError(`${binaryPath} is not a native uWebSockets.js module`);
  return mod;
}

/** True when `mod.App` is implemented in native code, not the JS fallback. */
export function isNative(mod: Pick<UwsModule, 'App'>): boolean {
  return typeof mod.App === 'function' && /\[native code\]/.test(Function.prototype.toString.call(mod.App));
}

let cached: UwsModule | undefined;
/** The process-wide native uWS module (loaded on first use). */
export function uws(): UwsModule {
  return (cached ??= loadNativeUws());
}
