// `rc gateway`: a standalone model gateway from the settings (lib/config.ts). Keys come from
// --keys-file (and bus events when REDIS_URL is set); the catalog from RC_CONFIG, reloaded on
// SIGHUP and when the file changes.
import { watch, type FSWatcher } from 'node:fs';
import { parse, numberOption, untilSignal, UsageError, type Command } from '../bin/cli.js';
import { RedisBus, type Bus } from '../lib/bus.js';
import { loadConfig, type Config } from '../lib/config.js';
import { createLogger, type LogLevel } from '../lib/log.js';
import { AccountLimits, createGate } from './gates/index.js';
import { memoryKeySource, readKeysFile } from './keys.js';
import { messagesRoutesFromConfig } from './messages/routes.js';
import { createGateway, type GatewayOptions } from './server.js';

const HELP = `Usage: rc gateway [options]

Runs the shared model gateway (/v1/models, /v1/chat/completions, ...).

Options:
  --port P          Port (default RC_GATEWAY_PORT, 8090; 0 picks a free one)
  --host H          Address to bind (default RC_HOST, 127.0.0.1)
  --keys-file F     JSON [{"keyHash": "<sha256 hex>", "accountId": N, "limits"?: {"rpm", "tpm",
                    "dailyTokens"}}]: the keys accepted at start and the accounts' gate overrides
  -h, --help        This help

The catalog is the "models" list of the RC_CONFIG file (the default sim catalog otherwise);
SIGHUP or a change of that file reloads it. With REDIS_URL set, key events arrive over Redis
and the gates are shared with every gateway on that Redis. Prints {"url","gateway","pid"} as
one JSON line on stdout when ready (url and gateway are the same address).
`;

export const gatewayCommand: Command = {
  summary: 'Run the shared model gateway on its own',
  async run(argv) {
    const { values } = parse(argv, {
      port: { type: 'string' },
      host: { type: 'string' },
      'keys-file': { type: 'string' },
    });
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    const config = loadConfig();
    const port = numberOption('port', values.port, { integer: true, min: 0 }) ?? config.gatewayPort;
    if (port > 65535) throw new UsageError(`--port must be at most 65535, got ${port}`);
    const host = values.host ?? config.host;
    const logger = createLogger(config.logLevel as LogLevel, { part: 'gateway' });
    const keysFile = values['keys-file'];

    const bus: Bus | undefined = config.redisUrl ? new RedisBus(config.redisUrl) : undefined;
    if (bus instanceof RedisBus) await bus.whenReady();
    // Keys, and the accounts' limit overrides, from the keys file; later changes arrive as events.
    const entries = keysFile ? await readKeysFile(keysFile) : [];
    const limits = new AccountLimits({ rpm: config.modelRpm, tpm: config.modelTpm, dailyTokens: config.modelDailyTokens });
    limits.load(entries.flatMap((e) => (e.limits ? [[e.accountId, e.limits] as const] : [])));
    const gate = createGate(config, { bus, logger, limits });
    const gateway = await createGateway({
      ...gatewayOptionsFromConfig(config),
      host,
      port,
      models: config.models,
      keySource: memoryKeySource(entries),
      bus,
      gate,
      logger,
    });
    for (const m of config.models) if (!m.upstreams.length) logger.warn('model has no upstreams: requests for it get 502', { model: m.name });
    if (!keysFile) logger.warn('no --keys-file: only keys issued over the bus are accepted');

    const reload = (why: string) => {
      try {
        const next = loadConfig();
        gateway.setModels(next.models);
        logger.info('catalog reloaded', { why, models: next.models.map((m) => m.name) });
      } catch (err) {
        logger.error('catalog reload failed; keeping the current catalog', { why, err });
      }
    };
    const onHup = () => reload('SIGHUP');
    process.on('SIGHUP', onHup);
    const watcher = config.configFile ? watchFile(config.configFile, () => reload('config file changed')) : undefined;

    process.stdout.write(JSON.stringify({ url: gateway.url, gateway: gateway.url, pid: process.pid }) + '\n');
    const signal = await untilSignal();
    logger.info('stopping', { signal });
    process.off('SIGHUP', onHup);
    watcher?.close();
    await gateway.close(10_000);
    await gate.close();
    await bus?.close();
    return 0;
  },
};

/** The createGateway options every gateway takes from the settings: address, limits, upstream timeouts, routes. */
export function gatewayOptionsFromConfig(config: Config): Pick<GatewayOptions, 'host' | 'port' | 'limits' | 'upstream' | 'routes'> {
  return {
    host: config.host,
    port: config.gatewayPort,
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
  return { close: () => { closed = true; clearTimeout(timer); w?.close(); } };
}
