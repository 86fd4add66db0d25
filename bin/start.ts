// `rc start` (npm start): the whole platform in the foreground on embedded defaults.
import { parse, untilSignal, type Command } from './cli.js';
import { loadConfig } from '../lib/config.js';
import { createLogger } from '../lib/log.js';
import { startPlatform } from './platform.js';

const HELP = `Usage: rc start

Runs the whole platform in the foreground: platform API, model gateway, one local agent and
simulated backends for the models that have no upstreams. Settings come from the environment
and RC_CONFIG (see the README). Ctrl-C stops every part.
`;

export const startCommand: Command = {
  summary: 'Run the whole platform on embedded defaults',
  async run(argv) {
    const { values } = parse(argv, {});
    if (values.help) {
      process.stdout.write(HELP);
      return 0;
    }
    const config = loadConfig();
    const logger = createLogger(config.logLevel, { part: 'platform' });
    const p = await startPlatform(config, logger);
    const out = process.stdout;
    out.write('\nrc platform is running\n');
    out.write(`  platform API   ${p.controlPlane.url}/api\n`);
    out.write(`  model gateway  ${p.gateway.url}/v1   (messages protocol: ${p.gateway.url}/api)\n`);
    out.write(`  instance proxy ${p.proxy.url}/instances/<id>/   (browser access, sign-in session)\n`);
    const runtime = p.agent.supervisor.host().runtime;
    out.write(`  host agent     ${p.agent.address} (gRPC, ${runtime} runtime${runtime === 'process' ? ': instances run as host processes, for one trusted user on this machine' : ': instances run as containers'})\n`);
    for (const s of p.sims) out.write(`  sim backend    ${s.url}/v1   model ${s.model}\n`);
    out.write(`  data           ${config.dataDir}\n`);
    out.write('\nGet an API key (in another terminal):\n');
    out.write('  npx rc account create --email you@example.com --verified --credits 10\n');
    out.write(`Then:\n  curl ${p.gateway.url}/v1/models -H "Authorization: Bearer <api_token>"\n\n`);
    const signal = await untilSignal();
    logger.info('stopping', { signal });
    await p.close();
    return 0;
  },
};
