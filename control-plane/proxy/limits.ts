// The instance proxy's per-tenant bounds (issue 44): what one instance, one account or one client
// address may hold of the proxy's process.
//
// - Requests in flight, WebSockets open included, from admission until the response ends or the
//   socket closes (lib/held-limits.ts; RC_PROXY_INFLIGHT_*): each holds the browser's socket and
//   one to the app, so thousands of them starved everyone of descriptors.
// - Bytes of request bodies still arriving (lib/upload-limits.ts; RC_PROXY_UPLOAD_BYTES_*). A body
//   is read while the session is looked up (uWS gives it to a handler attached at once or never),
//   so it counts per address from its first byte and is charged to its account and instance once
//   admission names them: an unauthenticated client cannot fill another tenant's counts.
//
// Past a bound: 429 `{detail}` with Retry-After naming the bound and its setting
// (API_ERRORS.proxyLimit), or, for a WebSocket, the upgrade completes and the socket is closed at
// once with 1013 (try again later) and that reason, which a page's script can read.
import type { Config } from '../../lib/config.js';
import { HeldLimits, type HeldLimitSettings } from '../../lib/held-limits.js';
import { UploadLimits, type UploadSettingNames } from '../../lib/upload-limits.js';

export interface ProxyLimitSettings {
  /** Requests in flight and WebSockets open per instance (RC_PROXY_INFLIGHT_PER_INSTANCE). */
  inflightPerInstance: number;
  /** ... per account (RC_PROXY_INFLIGHT_PER_ACCOUNT). */
  inflightPerAccount: number;
  /** ... per client address (RC_PROXY_INFLIGHT_PER_ADDRESS). */
  inflightPerAddress: number;
  /** Bytes of request bodies still arriving per instance (RC_PROXY_UPLOAD_BYTES_PER_INSTANCE). */
  uploadBytesPerInstance: number;
  /** ... per account (RC_PROXY_UPLOAD_BYTES_PER_ACCOUNT). */
  uploadBytesPerAccount: number;
  /** ... per client address (RC_PROXY_UPLOAD_BYTES_PER_ADDRESS). */
  uploadBytesPerAddress: number;
}

export const DEFAULT_PROXY_LIMITS: ProxyLimitSettings = {
  inflightPerInstance: 256,
  inflightPerAccount: 512,
  inflightPerAddress: 512,
  uploadBytesPerInstance: 64 * 1024 * 1024,
  uploadBytesPerAccount: 128 * 1024 * 1024,
  uploadBytesPerAddress: 256 * 1024 * 1024,
};

/** Seconds a refused client is told to wait: proxied requests end within seconds, uploads too. */
export const PROXY_RETRY_AFTER_SEC = 5;

const UPLOAD_NAMES: UploadSettingNames = {
  // Every upload is a request in flight, so its count never passes the in-flight bound first.
  uploadsPerAddress: 'RC_PROXY_INFLIGHT_PER_ADDRESS',
  uploadsPerAccount: 'RC_PROXY_INFLIGHT_PER_ACCOUNT',
  uploadsPerInstance: 'RC_PROXY_INFLIGHT_PER_INSTANCE',
  bytesPerAddress: 'RC_PROXY_UPLOAD_BYTES_PER_ADDRESS',
  bytesPerAccount: 'RC_PROXY_UPLOAD_BYTES_PER_ACCOUNT',
  bytesPerInstance: 'RC_PROXY_UPLOAD_BYTES_PER_INSTANCE',
};

/** The settings from the platform's configuration. */
export function proxyLimitsFromConfig(config: Config): ProxyLimitSettings {
  return {
    inflightPerInstance: config.proxyInflightPerInstance,
    inflightPerAccount: config.proxyInflightPerAccount,
    inflightPerAddress: config.proxyInflightPerAddress,
    uploadBytesPerInstance: config.proxyUploadBytesPerInstance,
    uploadBytesPerAccount: config.proxyUploadBytesPerAccount,
    uploadBytesPerAddress: config.proxyUploadBytesPerAddress,
  };
}

/** What the proxy counts: requests in flight (and WebSockets) and upload bytes. */
export interface ProxyLimits {
  inflight: HeldLimits;
  uploads: UploadLimits;
}

export function createProxyLimits(given: Partial<ProxyLimitSettings> = {}): ProxyLimits {
  const s = { ...DEFAULT_PROXY_LIMITS, ...given };
  const held: HeldLimitSettings = { perInstance: s.inflightPerInstance, perAccount: s.inflightPerAccount, perAddress: s.inflightPerAddress };
  return {
    inflight: new HeldLimits(
      'requests in flight',
      held,
      { perInstance: 'RC_PROXY_INFLIGHT_PER_INSTANCE', perAccount: 'RC_PROXY_INFLIGHT_PER_ACCOUNT', perAddress: 'RC_PROXY_INFLIGHT_PER_ADDRESS' },
      PROXY_RETRY_AFTER_SEC,
    ),
    uploads: new UploadLimits(
      {
        uploadsPerInstance: s.inflightPerInstance,
        uploadsPerAccount: s.inflightPerAccount,
        uploadsPerAddress: s.inflightPerAddress,
        bytesPerInstance: s.uploadBytesPerInstance,
        bytesPerAccount: s.uploadBytesPerAccount,
        bytesPerAddress: s.uploadBytesPerAddress,
      },
      UPLOAD_NAMES,
    ),
  };
}
