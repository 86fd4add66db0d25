// `rc gateway`: a standalone model gateway from the settings (lib/config.ts). With a control
// plane (RC_CONTROL_PLANE_URL or --control-plane), keys, sessions, limits, the catalog and the
// instance routes come from it (gateway/sync/). Otherwise keys come from --keys-file (and bus
// events when REDIS_URL is set); the catalog from RC_CONFIG, reloaded on SIGHUP and when the
// file changes.
import { readFileSync } from 'node:fs';
import { closeOnSignal, parse, UsageError, type Command, portOption } from '../lib/cli.js';
import { loadConfig } from '../lib/config.js';
import { createLogger, type LogLevel } from '../lib/log.js';
import { StandaloneGateway } from './standalone.js';

export { gatewayOptionsFromConfig, limitsFrom, upstreamFrom } from './options-from-config.js';

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
    const gateway = await StandaloneGateway.start(config, logger, {
      host,
      port,
      portSetting: values.port === undefined ? 'RC_GATEWAY_PORT' : '--port',
      keysFile,
      controlPlane: controlPlaneUrl ? { url: controlPlaneUrl, token: readInternalToken(values['internal-token-file'], config.internalToken) } : undefined,
    });
    process.stdout.write(JSON.stringify(gateway.readyLine()) + '\n');
    return closeOnSignal(() => gateway.stop(), logger);
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
