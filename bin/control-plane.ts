// `rc control-plane`: the platform without the embedded gateway and agent, for a fleet. Gateways
// run apart (`rc gateway` with RC_CONTROL_PLANE_URL, RC_INTERNAL_TOKEN and REDIS_URL) and GPU
// hosts run `rc agent`, registered here with `rc host add`.
import { parse, untilSignal, type Command } from './cli.js';
import { loadConfig } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { startControlPlane } from './platform.js';

const HELP = `Usage: rc control-plane

Runs the control plane on its own: platform API (RC_API_PORT), scheduling across the registered
hosts, billing, the instance proxy (RC_PROXY_PORT) and simulated backends for the models that
have no upstreams. No gateway and no agent run in this process: start \`rc gateway\` replicas with
RC_CONTROL_PLANE_URL=<this API's URL>, RC_INTERNAL_TOKEN and REDIS_URL, and register each GPU
host's \`rc agent\` with \`rc host add\`. Set REDIS_URL here too: events reach the gateways over it.
Prints {"api","proxy","internal_token_file","pid"} as one JSON line on stdout when ready.
`;

export const controlPlaneCommand: Command = {
  summary: 'Run the control plane alone (gateways and agents run apart)',
  async run(argv) {
    const { values } = parse(argv, {});
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    const config = loadConfig();
    const logger = createLogger(config.logLevel, { part: 'platform' });
    if (!config.redisUrl) logger.warn('REDIS_URL is not set: gateways in other processes get no events (they resync every RC_GATEWAY_RESYNC_MS)');
    const p = await startControlPlane(config, logger);
    process.stdout.write(JSON.stringify({
      api: p.controlPlane.url, proxy: p.proxy.url, internal_token_file: config.internalToken ? null : `${config.dataDir}/internal.token`, pid: process.pid,
    }) + '\n');
    const signal = await untilSignal();
    logger.info('stopping', { signal });
    await p.close();
    return 0;
  },
};
