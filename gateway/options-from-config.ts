// The createGateway options every gateway takes from the settings (lib/config.ts): `rc gateway`
// (standalone.ts) and the embedded gateway of `npm start` (bin/platform.ts).
import type { Config } from '../lib/config.js';
import { messagesRoutesFromConfig } from './messages/routes.js';
import type { GatewayOptions } from './server.js';

/** The createGateway options every gateway takes from the settings: address, limits, upstream timeouts, routes. */
export function gatewayOptionsFromConfig(
  config: Config,
): Pick<GatewayOptions, 'host' | 'port' | 'limits' | 'upstream' | 'routes' | 'metrics' | 'cookieSecure' | 'trustProxy'> {
  return {
    host: config.host,
    cookieSecure: config.cookieSecure,
    trustProxy: config.trustProxy,
    port: config.gatewayPort,
    metrics: { host: config.metricsHost, port: config.metricsPort },
    limits: limitsFrom(config),
    upstream: upstreamFrom(config),
    routes: [messagesRoutesFromConfig(config)],
  };
}

export function limitsFrom(config: Config) {
  return {
    maxBodyBytes: config.gatewayMaxBodyBytes,
    maxInflight: config.gatewayMaxInflight,
    defaultMaxTokens: config.gatewayDefaultMaxTokens,
    parseBudget: { maxTools: config.gatewayMaxTools, maxMessages: config.gatewayMaxMessages, maxBlocks: config.gatewayMaxBlocks },
    uploads: {
      uploadsPerAddress: config.gatewayUploadsPerAddress,
      uploadsPerAccount: config.gatewayUploadsPerAccount,
      bytesPerAddress: config.gatewayUploadBytesPerAddress,
      bytesPerAccount: config.gatewayUploadBytesPerAccount,
      uploadsPerInstance: config.dedicatedUploadsPerInstance,
      bytesPerInstance: config.dedicatedUploadBytesPerInstance,
    },
    streams: { perAccount: config.gatewayStreamsPerAccount, perAddress: config.gatewayStreamsPerAddress },
  };
}

export function upstreamFrom(config: Config) {
  return {
    connections: config.upstreamConnections,
    headersTimeoutMs: config.upstreamHeadersTimeoutMs,
    idleTimeoutMs: config.upstreamIdleTimeoutMs,
    requestTimeoutMs: config.upstreamRequestTimeoutMs,
    connectTimeoutMs: config.upstreamConnectTimeoutMs,
    ejectMs: config.upstreamEjectMs,
    metricsIntervalMs: config.upstreamMetricsIntervalMs,
    routeEntries: config.routeEntries,
    routeEpsilon: config.routeEpsilon,
    routeKeepEpsilon: config.routeKeepEpsilon,
    routeMinCeiling: config.routeMinCeiling,
    routeMaxWaiting: config.routeMaxWaiting,
  };
}
