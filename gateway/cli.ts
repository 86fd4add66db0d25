// `rc gateway`: a standalone model gateway from the settings (lib/config.ts). With a control
// plane (RC_CONTROL_PLANE_URL or --control-plane), keys, sessions, limits, the catalog and the
// instance routes come from it (gateway/sync/). Otherwise keys come from --keys-file (and bus
// events when REDIS_URL is set); the catalog from RC_CONFIG, reloaded on SIGHUP and when the
// file changes.
import { readFileSync, watch, type FSWatcher } from 'node:fs';
import { parse, untilSignal, UsageError, type Command, portOption } from '../lib/cli.js';
import { RedisBus, type Bus } from '../lib/bus.js';
import { loadConfig, type Config } from '../lib/config.js';
import { namingSetting } from '../lib/errors.js';
import { createLogger, type LogLevel } from '../lib/log.js';
import { AccountLimits, createGate } from './gates/index.js';
import { memoryKeySource, readKeysFile } from './auth/keys.js';
import { messagesRoutesFromConfig } from './messages/routes.js';
import { createGateway, type GatewayOptions } from './server.js';
import { PlatformFeed } from './sync/platform-feed.js';
import { platformGatewayParts, type PlatformGatewayParts } from './sync/platform-gateway.js';

const HELP = `Usage: rc gateway [options]

Runs the shared model gateway (/v1/models, /v1/chat/completions, ...).

Options:
  --port P          Port (default RC_GATEWAY_PORT, 8090; 0 picks a free one)
  --host H          Address to bind (default RC_HOST, 127.0.0.1)
  --control-plane URL
                    Learn keys, sessions, limits, the catalog and instance routes from this
                    control plane's platform API (RC_CONTROL_PLANE_URL); needs its internal token
  --internal-token-file F
                    Read that token from F (default RC_INTERNAL_TOKEN)
  --keys-file F     Without a control plane: JSON [{"keyHash": "<sha256 hex>", "accountId": N,
                    "limits"?: {"rpm", "tpm", "dailyTokens"}}]: the keys accepted at start and the
                    accounts' gate overrides
  -h, --help        This help

With a control plane the gateway also serves dedicated endpoints and tunnels of every instance,
follows changes over REDIS_URL's events (a revoked key is refused at once) and fetches the
whole snapshot again every RC_GATEWAY_RESYNC_MS; while the control plane is down it keeps
serving with what it holds.

Without a control plane, the catalog is the "models" list of the RC_CONFIG file (the default sim catalog otherwise);
SIGHUP or a change of that file reloads it. With REDIS_URL set, key events arrive over Redis
and the gates are shared with every gateway on that Redis. Prints {"url","gateway","tunnels","metrics","pid"} as
one JSON line on stdout when ready (url and gateway are the same address).
`;

export const gatewayCommand: Command = {
  summary: 'Run the shared model gateway on its own',
  async run(argv) {
    const { values } = parse(argv, {
      port: { type: 'string' },
      host: { type: 'string' },
      'keys-file': { type: 'string' },
      'control-plane': { type: 'string' },
      'internal-token-file': { type: 'string' },
    });
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    const config = loadConfig();
    const port = portOption(values.port) ?? config.gatewayPort;
    const host = values.host ?? config.host;
    const logger = createLogger(config.logLevel as LogLevel, { part: 'gateway' });
    const keysFile = values['keys-file'];
    const controlPlaneUrl = values['control-plane'] ?? config.controlPlaneUrl;
    if (controlPlaneUrl && keysFile) throw new UsageError('give either a control plane or --keys-file, not both');
    if (controlPlaneUrl && !URL.canParse(controlPlaneUrl)) throw new UsageError(`--control-plane must be a URL, got ${JSON.stringify(controlPlaneUrl)}`);
    const internalToken = controlPlaneUrl ? readInternalToken(values['internal-token-file'], config.internalToken) : '';

    const bus: Bus | undefined = config.redisUrl ? new RedisBus(config.redisUrl) : undefined;
    if (bus instanceof RedisBus) await bus.whenReady();
    // From the control plane (snapshot, then events), or: keys and the accounts' limit overrides
    // from the keys file, later changes as events.
    let platform: PlatformGatewayParts | undefined;
    if (controlPlaneUrl) {
      if (!bus) logger.warn('REDIS_URL is not set: changes reach this gateway only at each resync (RC_GATEWAY_RESYNC_MS)');
      // A bad internal token ends the command; the bus must not keep the process alive then.
      platform = await platformGatewayParts(config, { url: controlPlaneUrl, token: internalToken, bus, logger }).catch(async (err: unknown) => {
        await bus?.close();
        throw err;
      });
    }
    const entries = keysFile ? await readKeysFile(keysFile) : [];
    const limits = new AccountLimits({ rpm: config.modelRpm, tpm: config.modelTpm, dailyTokens: config.modelDailyTokens });
    limits.load(platform ? PlatformFeed.limitEntries(platform.snapshot) : entries.flatMap((e) => (e.limits ? [[e.accountId, e.limits] as const] : [])));
    const gate = createGate(config, { bus, logger, limits });
    const options = gatewayOptionsFromConfig(config);
    const models = platform?.snapshot.models ?? config.models;
    const gateway = await createGateway({
      ...options,
      host,
      port,
      reusePort: config.gatewayReusePort,
      models,
      keySource: platform?.keySource ?? memoryKeySource(entries),
      routes: [...(options.routes ?? []), ...(platform?.plugins ?? [])],
      bus,
      gate,
      logger,
    }).catch(namingSetting(values.port === undefined ? 'RC_GATEWAY_PORT' : '--port'));
    platform?.follow(gateway, limits);
    const tunnels = await platform?.listenTunnels(host);
    for (const m of models) if (!m.upstreams.length) logger.warn('model has no upstreams: requests for it get 502', { model: m.name });
    if (!keysFile && !platform) logger.warn('no --keys-file: only keys issued over the bus are accepted');

    const reload = (why: string) => {
      try {
        const next = loadConfig();
        gateway.setModels(next.models);
        logger.info('catalog reloaded', { why, models: next.models.map((m) => m.name) });
      } catch (err) {
        logger.error('catalog reload failed; keeping the current catalog', { why, err });
      }
    };
    // With a control plane the catalog is the control plane's: SIGHUP and the file do not apply.
    const onHup = () => (platform ? undefined : reload('SIGHUP'));
    process.on('SIGHUP', onHup);
    const watcher = config.configFile && !platform ? watchFile(config.configFile, () => reload('config file changed')) : undefined;

    process.stdout.write(
      JSON.stringify({ url: gateway.url, gateway: gateway.url, tunnels: tunnels?.url, metrics: `${gateway.metricsUrl}/metrics`, pid: process.pid }) + '\n',
    );
    const signal = await untilSignal();
    logger.info('stopping', { signal });
    process.off('SIGHUP', onHup);
    watcher?.close();
    await gateway.close(10_000);
    await platform?.close();
    await gate.close();
    await bus?.close();
    return 0;
  },
};

/** The internal token a gateway presents to the control plane: --internal-token-file, else RC_INTERNAL_TOKEN. */
function readInternalToken(file: string | undefined, configured: string): string {
  let token = configured;
  if (file !== undefined) {
    try {
      token = readFileSync(file, 'utf8').trim();
    } catch (err) {
      throw new UsageError(`--internal-token-file: cannot read ${file}: ${(err as Error).message}`);
    }
  }
  if (token.length < 16)
    throw new UsageError('a control plane needs its internal token: --internal-token-file F or RC_INTERNAL_TOKEN (at least 16 characters)');
  return token;
}

/** The createGateway options every gateway takes from the settings: address, limits, upstream timeouts, routes. */
export function gatewayOptionsFromConfig(
  config: Config,
): Pick<GatewayOptions, 'host' | 'port' | 'limits' | 'upstream' | 'routes' | 'metrics' | 'cookieSecure'> {
  return {
    host: config.host,
    cookieSecure: config.cookieSecure,
    port: config.gatewayPort,
    metrics: { host: config.metricsHost, port: config.metricsPort },
    limits: limitsFrom(config),
    upstream: upstreamFrom(config),
    routes: [messagesRoutesFromConfig(config)],
  };
}

export function limitsFrom(config: Config) {
  return { maxBodyBytes: config.gatewayMaxBodyBytes, maxInflight: config.gatewayMaxInflight, defaultMaxTokens: config.gatewayDefaultMaxTokens };
}

export function upstreamFrom(config: Config) {
  return {
    connections: config.upstreamConnections,
    headersTimeoutMs: config.upstreamHeadersTimeoutMs,
    idleTimeoutMs: config.upstreamIdleTimeoutMs,
    connectTimeoutMs: config.upstreamConnectTimeoutMs,
    ejectMs: config.upstreamEjectMs,
  };
}

/** Calls `onChange` (debounced) when the file changes, including when an editor replaces it. */
function watchFile(path: string, onChange: () => void): { close(): void } {
  let timer: NodeJS.Timeout | undefined;
  let w: FSWatcher | undefined;
  let closed = false;
  const fire = () => {
    clearTimeout(timer);
    timer = setTimeout(onChange, 100);
  };
  const open = () => {
    if (closed) return;
    try {
      w = watch(path, { persistent: false }, (event) => {
        fire();
        // An atomic replace (rename over the file) ends this watch: start a new one.
        if (event === 'rename') {
          w?.close();
          setTimeout(open, 50);
        }
      });
      w.on('error', () => {});
    } catch {
      setTimeout(open, 500);
    }
  };
  open();
  return {
    close: () => {
      closed = true;
      clearTimeout(timer);
      w?.close();
    },
  };
}
