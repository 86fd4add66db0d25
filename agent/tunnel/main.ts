// The `rc-tunnel` executable (bin/rc-tunnel.js loads this): the same commands as `rc tunnel`.
import { UsageError } from '../../lib/cli.js';
import { RcError } from '../../lib/errors.js';
import { runTunnel } from './cli.js';

async function main(argv: string[]): Promise<number> {
  try {
    return await runTunnel(argv, argv);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`rc-tunnel: ${err.message}\nSee: rc-tunnel --help\n`);
      return 2;
    }
    if (err instanceof RcError) {
      process.stderr.write(`rc-tunnel: ${err.message} (${err.code})\n`);
      return 1;
    }
    throw err;
  }
}

process.exitCode = await main(process.argv.slice(2));
