// `rc`: the platform's command line. Each subcommand lives in its part and is loaded on demand.
import { UsageError, type Command } from '../lib/cli.js';
import { RcError } from '../lib/errors.js';

type Loader = () => Promise<Command>;

/** Subcommands: name -> loader, and its line for `rc --help` (else the loaded command's own). Parts add their own line here. */
const COMMANDS: Record<string, { summary?: string; load: Loader }> = {
  start: { summary: 'Run the whole platform on embedded defaults', load: async () => (await import('./start.js')).startCommand },
  'control-plane': {
    summary: 'Run the control plane alone (gateways and agents run apart)',
    load: async () => (await import('./start.js')).controlPlaneCommand,
  },
  sim: { summary: 'Run the simulated OpenAI-compatible serving backend', load: async () => (await import('../sim/cli.js')).simCommand },
  agent: { summary: 'Run the host agent (gRPC) that starts and stops instances', load: async () => (await import('../agent/cli.js')).agentCommand },
  gateway: { summary: 'Run the shared model gateway on its own', load: async () => (await import('../gateway/cli.js')).gatewayCommand },
  // The operator groups' lines come from their own tables (control-plane/cli.ts), every subcommand named.
  account: { load: async () => (await import('../control-plane/cli.js')).accountCommand },
  coupon: { load: async () => (await import('../control-plane/cli.js')).couponCommand },
  image: { load: async () => (await import('../control-plane/cli.js')).imageCommand },
  model: { load: async () => (await import('../control-plane/cli.js')).modelCommand },
  host: { load: async () => (await import('../control-plane/cli.js')).hostCommand },
  migrate: {
    summary: 'Apply the database migrations (ahead of a rollout) and exit',
    load: async () => (await import('../control-plane/migrate-cli.js')).migrateCommand,
  },
  tunnel: {
    summary: 'Expose a local service of this instance on a public URL (rc-tunnel)',
    load: async () => (await import('../agent/tunnel/cli.js')).tunnelCommand,
  },
};

async function help(): Promise<string> {
  const rows = await Promise.all(Object.entries(COMMANDS).map(async ([name, c]) => `  ${name.padEnd(14)} ${c.summary ?? (await c.load()).summary}`));
  return `Usage: rc <command> [options]\n\nCommands:\n${rows.join('\n')}\n\nrc <command> --help shows a command's options.\n`;
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    process.stdout.write(await help());
    return name ? 0 : 2;
  }
  const entry = COMMANDS[name];
  if (!entry) {
    process.stderr.write(`rc: unknown command ${JSON.stringify(name)}\n\n${await help()}`);
    return 2;
  }
  const command = await entry.load();
  try {
    return await command.run(rest);
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(`rc ${name}: ${err.message}\nSee: rc ${name} --help\n`);
      return 2;
    }
    if (err instanceof RcError) {
      process.stderr.write(`rc ${name}: ${err.message} (${err.code})\n`);
      return 1;
    }
    throw err;
  }
}

process.exitCode = await main(process.argv.slice(2));
