// `rc start` (npm start): the whole platform in the foreground on embedded defaults.
// `rc control-plane`: the same without the embedded gateway and agent, for a fleet. Gateways run
// apart (`rc gateway` with RC_CONTROL_PLANE_URL, RC_INTERNAL_TOKEN and REDIS_URL) and GPU hosts
// run `rc agent`, registered with `rc host add`.
import { resolve } from 'node:path';
import { instanceOrigin, proxyBaseUrl } from '../lib/instance-origin.js';
import { LOCAL_TUNNELS_HOST, TunnelOrigins } from '../gateway/tunnel/origins.js';
import { closeOnSignal, parse, type Command } from '../lib/cli.js';
import { loadConfig, type Config } from '../lib/config.js';
import { createLogger, type Logger } from '../lib/log.js';
import { startControlPlane, startPlatform, type ControlPlaneParts } from './platform.js';

const HELP = `Usage: rc start

Runs the whole platform in the foreground: platform API, model gateway, one local agent and
simulated backends for the models that have no upstreams. Settings come from the environment
and RC_CONFIG (see the README). Ctrl-C stops every part.
`;

const CONTROL_PLANE_HELP = `Usage: rc control-plane

Runs the control plane on its own: platform API (RC_API_PORT), scheduling across the registered
hosts, billing, the instance proxy (RC_PROXY_PORT), the GPU gauges for Prometheus
(RC_METRICS_HOST:RC_CONTROL_METRICS_PORT) and simulated backends for the models that have no
upstreams. No gateway and no agent run in this process: start \`rc gateway\` replicas with
RC_CONTROL_PLANE_URL=<this API's URL>, RC_INTERNAL_TOKEN and REDIS_URL, and register each GPU
host's \`rc agent\` with \`rc host add\`. Set REDIS_URL here too: events reach the gateways over it.
Prints {"api","proxy","metrics","internal_token_file","pid"} as one JSON line on stdout when ready.
`;

/** A command that starts parts, announces them, and runs until SIGINT or SIGTERM. */
function serve<P extends ControlPlaneParts>(
  help: string,
  start: (config: Config, logger: Logger) => Promise<P>,
  announce: (p: P, config: Config, logger: Logger) => void,
): Command['run'] {
  return async (argv) => {
    const { values } = parse(argv, {});
    if (values.help) {
      process.stdout.write(help);
      return 0;
    }
    const config = loadConfig();
    const logger = createLogger(config.logLevel, { part: 'platform' });
    const p = await start(config, logger);
    announce(p, config, logger);
    return closeOnSignal(() => p.close(), logger);
  };
}

export const startCommand: Command = {
  summary: 'Run the whole platform on embedded defaults',
  run: serve(HELP, startPlatform, (p, config) => {
    const out = process.stdout;
    out.write('\nrc platform is running\n');
    out.write(`  web console    ${p.controlPlane.url}/\n`);
    out.write(`  platform API   ${p.controlPlane.url}/api   (OpenAPI: ${p.controlPlane.url}/api/openapi.json)\n`);
    out.write(`  model gateway  ${p.gateway.url}/v1   (messages protocol: ${p.gateway.url}/api)\n`);
    out.write(`  metrics        ${p.gateway.metricsUrl}/metrics   (Prometheus; not on the gateway's public port)\n`);
    out.write(`  GPU metrics    ${p.controlMetrics.url}/metrics   (Prometheus: the control plane's GPU gauges)\n`);
    out.write(`  instance proxy ${instanceOrigin(proxyBaseUrl(config.proxyPublicUrl, p.proxy.port), '<id>')}/   (browser access: open it from the console)\n`);
    const tunnels = new TunnelOrigins(config.tunnelPublicUrl.replace(/\/+$/, '') || `http://${LOCAL_TUNNELS_HOST}:${p.tunnels.port}`);
    out.write(`  tunnels        ${tunnels.url('<tunnel id>')}   (rc-tunnel public URLs, an origin per tunnel)\n`);
    const runtime = p.agent.supervisor.host().runtime;
    out.write(
      `  host agent     ${p.agent.address} (gRPC, ${runtime} runtime${runtime === 'process' ? ': instances run as host processes, for one trusted user on this machine' : ': instances run as containers'})\n`,
    );
    for (const s of p.sims) out.write(`  sim backend    ${s.url}/v1   model ${s.model}\n`);
    out.write(`  data           ${config.dataDir}\n`);
    out.write('\nGet an API key (in another terminal):\n');
    // The CLI finds the platform through its data dir: a dir set here must be set there too.
    const dataDirEnv = process.env.RC_DATA_DIR ? `RC_DATA_DIR=${resolve(config.dataDir)} ` : '';
    out.write(`  ${dataDirEnv}npx rc account create --email you@example.com --password 'choose-a-password' --verified --credits 10\n`);
    out.write("  (the password signs in to the console at the platform API's URL)\n");
    out.write(`Then:\n  curl ${p.gateway.url}/v1/models -H "Authorization: Bearer <api_token>"\n\n`);
  }),
};

export const controlPlaneCommand: Command = {
  summary: 'Run the control plane alone (gateways and agents run apart)',
  run: serve(CONTROL_PLANE_HELP, startControlPlane, (p, config, logger) => {
    if (!config.redisUrl) logger.warn('REDIS_URL is not set: gateways in other processes get no events (they resync every RC_GATEWAY_RESYNC_MS)');
    process.stdout.write(
      JSON.stringify({
        api: p.controlPlane.url,
        proxy: p.proxy.url,
        metrics: `${p.controlMetrics.url}/metrics`,
        internal_token_file: config.internalToken ? null : `${config.dataDir}/internal.token`,
        pid: process.pid,
      }) + '\n',
    );
  }),
};
