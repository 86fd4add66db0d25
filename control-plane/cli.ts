// The operator commands of `rc`: account, coupon, image, model, host. Each subcommand maps its flags
// to one admin operation (admin.ts) and prints the result as JSON.
import { readFileSync } from 'node:fs';
import type { ParseArgsConfig } from 'node:util';
import { numberOption, parse, printJson, UsageError, type Command } from '../lib/cli.js';
import { loadConfig } from '../lib/config.js';
import { RcError } from '../lib/errors.js';
import type { AdminOpName } from './admin.js';
import { callAdmin } from './admin-client.js';

type Options = NonNullable<ParseArgsConfig['options']>;
type Values = Record<string, string | boolean | string[] | undefined>;

interface Sub {
  summary: string;
  usage: string;
  options: Options;
  op: AdminOpName;
  /** Takes one positional argument (the host name of `rc host drain N`), passed to `input`. */
  positional?: boolean;
  input(v: Values, positional?: string): Record<string, unknown>;
  /** A result that reports a failure (still printed as JSON): its sentence for stderr, and the command exits 1. */
  failure?(result: unknown): string | undefined;
}

const COMMON: Options = { 'data-dir': { type: 'string' }, init: { type: 'boolean' } };
const COMMON_HELP = [
  '  --data-dir DIR   data dir of the platform (default: RC_DATA_DIR or ./data)',
  '  --init           create a new platform database there when it has none (else: refused, exit 1)',
  '  -h, --help       this help',
].join('\n');

const str = (v: Values, name: string): string | undefined => v[name] as string | undefined;
function required(v: Values, name: string): string {
  const s = str(v, name);
  if (s === undefined || s.trim() === '') throw new UsageError(`--${name} is required`);
  return s;
}
/** A `rc host <sub> N` subcommand whose only input is the host name. */
const byName = (summary: string, op: AdminOpName): Sub => ({
  summary,
  usage: 'N',
  options: { name: { type: 'string' } },
  op,
  positional: true,
  input: (v, p) => ({ name: hostName(v, p) }),
});
/** The host name of `rc host <sub> N` (or --name N). */
function hostName(v: Values, positional: string | undefined): string {
  if (positional !== undefined && str(v, 'name') !== undefined) throw new UsageError('give the host name once (N or --name N)');
  const name = positional ?? str(v, 'name');
  if (name === undefined || name.trim() === '') throw new UsageError('the host name is required');
  return name;
}
/** The agent token of `rc host add`: --token-file F (the agent's token file) or --token T. */
function agentToken(v: Values): string {
  const file = str(v, 'token-file');
  const token = str(v, 'token');
  if ((file === undefined) === (token === undefined)) throw new UsageError('give exactly one of --token-file F and --token T');
  if (token !== undefined) return token.trim();
  try {
    return readFileSync(file!, 'utf8').trim();
  } catch (err) {
    throw new UsageError(`--token-file: cannot read ${file}: ${(err as Error).message}`);
  }
}
const num = (v: Values, name: string, opts?: { integer?: boolean; min?: number }) => numberOption(name, str(v, name), opts);
/** Drops undefined fields, so the operation applies its defaults. */
const defined = (o: Record<string, unknown>) => Object.fromEntries(Object.entries(o).filter(([, x]) => x !== undefined));

const GROUPS: Record<string, { summary: string; subs: Record<string, Sub> }> = {
  account: {
    summary: 'Manage accounts',
    subs: {
      create: {
        summary: 'Create an account; prints it with api_token (null when unverified)',
        usage: '--email E [--credits N] [--verified] [--editor] [--operator] [--password P]',
        options: {
          email: { type: 'string' },
          credits: { type: 'string' },
          verified: { type: 'boolean' },
          editor: { type: 'boolean' },
          operator: { type: 'boolean' },
          password: { type: 'string' },
        },
        op: 'account.create',
        input: (v) =>
          defined({
            email: required(v, 'email'),
            credits: num(v, 'credits', { min: 0 }),
            verified: v.verified,
            editor: v.editor,
            operator: v.operator,
            password: str(v, 'password'),
          }),
      },
      verify: {
        summary: 'Mark an account verified (clears review) and issue its API key',
        usage: '--email E',
        options: { email: { type: 'string' } },
        op: 'account.verify',
        input: (v) => ({ email: required(v, 'email') }),
      },
      list: { summary: 'List accounts', usage: '', options: {}, op: 'account.list', input: () => ({}) },
      'set-operator': {
        summary: 'Give an account the operator pages and API (--off takes them away); it signs in with its password',
        usage: '--email E [--off]',
        options: { email: { type: 'string' }, off: { type: 'boolean' } },
        op: 'account.set-operator',
        input: (v) => ({ email: required(v, 'email'), operator: v.off !== true }),
      },
      reject: {
        summary: 'Reject an account under review: disabled, its sessions end',
        usage: '--email E',
        options: { email: { type: 'string' } },
        op: 'account.reject',
        input: (v) => ({ email: required(v, 'email') }),
      },
      disable: {
        summary: 'Disable an account (sessions end, key revoked); --enable lets it sign in again',
        usage: '--email E [--enable]',
        options: { email: { type: 'string' }, enable: { type: 'boolean' } },
        op: 'account.disable',
        input: (v) => ({ email: required(v, 'email'), disabled: v.enable !== true }),
      },
      'grant-credits': {
        summary: 'Add credits (a ledger grant; negative corrects); an idempotency key makes a retry harmless',
        usage: '--email E --credits N [--reason TEXT] [--idempotency-key K]',
        options: { email: { type: 'string' }, credits: { type: 'string' }, reason: { type: 'string' }, 'idempotency-key': { type: 'string' } },
        op: 'account.grant-credits',
        input: (v) => {
          const credits = num(v, 'credits');
          if (credits === undefined) throw new UsageError('--credits is required');
          return defined({ email: required(v, 'email'), credits, reason: str(v, 'reason'), idempotency_key: str(v, 'idempotency-key') });
        },
      },
      'set-limits': {
        summary: 'Override the model API gates of an account (omitted: unchanged; --clear: back to defaults first)',
        usage: '--email E [--rpm N] [--tpm N] [--daily-tokens N] [--clear]',
        options: {
          email: { type: 'string' },
          rpm: { type: 'string' },
          tpm: { type: 'string' },
          'daily-tokens': { type: 'string' },
          clear: { type: 'boolean' },
        },
        op: 'account.set-limits',
        input: (v) => {
          const o = defined({
            email: required(v, 'email'),
            rpm: num(v, 'rpm', { integer: true, min: 1 }),
            tpm: num(v, 'tpm', { integer: true, min: 1 }),
            daily_tokens: num(v, 'daily-tokens', { integer: true, min: 1 }),
            clear: v.clear,
          });
          if (Object.keys(o).length === 1) throw new UsageError('give at least one of --rpm, --tpm, --daily-tokens, --clear');
          return o;
        },
      },
    },
  },
  coupon: {
    summary: 'Manage coupons',
    subs: {
      create: {
        summary: 'Create a coupon; prints {code, credits} (a custom --code needs 64 bits: 16+ random letters and digits)',
        usage: '--credits N [--email E] [--code CODE]',
        options: { credits: { type: 'string' }, email: { type: 'string' }, code: { type: 'string' } },
        op: 'coupon.create',
        input: (v) => {
          const credits = num(v, 'credits');
          if (credits === undefined) throw new UsageError('--credits is required');
          if (credits <= 0) throw new UsageError('--credits must be positive');
          return defined({ credits, email: str(v, 'email'), code: str(v, 'code') });
        },
      },
      list: { summary: 'List coupons', usage: '', options: {}, op: 'coupon.list', input: () => ({}) },
    },
  },
  image: {
    summary: 'Manage the image catalog',
    subs: {
      add: {
        summary: "Add an image (or rename and re-enable it); --ssh: it serves SSH (an SSH server on port 22 taking root's authorized_keys)",
        usage: '--name NAME --image IMAGE [--ssh]',
        options: { name: { type: 'string' }, image: { type: 'string' }, ssh: { type: 'boolean' } },
        op: 'image.add',
        input: (v) => defined({ name: required(v, 'name'), image: required(v, 'image'), ssh: v.ssh }),
      },
      ssh: {
        summary: 'Say that an image serves SSH (or, with --off, that it does not): SSH is offered on instances of such images only',
        usage: '--image IMAGE [--off]',
        options: { image: { type: 'string' }, off: { type: 'boolean' } },
        op: 'image.set-ssh',
        input: (v) => ({ image: required(v, 'image'), ssh: !v.off }),
      },
      disable: {
        summary: 'Disable an image (templates using it can no longer launch)',
        usage: '--image IMAGE',
        options: { image: { type: 'string' } },
        op: 'image.disable',
        input: (v) => ({ image: required(v, 'image') }),
      },
      list: { summary: 'List the image catalog', usage: '', options: {}, op: 'image.list', input: () => ({}) },
    },
  },
  host: {
    summary: 'Manage the GPU hosts and their agents',
    subs: {
      add: {
        summary: 'Register a host agent (or change its address and token); the running control plane dials it at once',
        usage: '--name N --address HOST:PORT (--token-file F | --token T)',
        options: { name: { type: 'string' }, address: { type: 'string' }, 'token-file': { type: 'string' }, token: { type: 'string' } },
        op: 'host.add',
        input: (v) => ({ name: required(v, 'name'), address: required(v, 'address'), token: agentToken(v) }),
      },
      list: { summary: 'List the hosts: name, address, state, GPUs total and free, instances', usage: '', options: {}, op: 'host.list', input: () => ({}) },
      drain: byName('Stop new placements on a host (its running instances stay)', 'host.drain'),
      resume: byName('Place instances on a drained host again', 'host.resume'),
      remove: {
        summary: 'Forget a host; refused while instances run there unless --force (which ends them, billed up to now)',
        usage: 'N [--force]',
        options: { name: { type: 'string' }, force: { type: 'boolean' } },
        op: 'host.remove',
        positional: true,
        input: (v, p) => defined({ name: hostName(v, p), force: v.force }),
      },
    },
  },
  model: {
    summary: 'Manage the shared model catalog',
    subs: {
      add: {
        summary:
          'Add or replace a model served by OpenAI-compatible upstreams; each upstream is checked first (it lists the served name and answers a one-token completion) and a failure is not saved unless --unchecked',
        usage:
          '--name N --upstream URL [--upstream URL...] [--served-name S] [--reasoning] [--no-tools] [--effort TIER...] [--max-context N] [--owned-by O] [--unchecked]',
        options: {
          unchecked: { type: 'boolean' },
          name: { type: 'string' },
          upstream: { type: 'string', multiple: true },
          'served-name': { type: 'string' },
          reasoning: { type: 'boolean' },
          'no-tools': { type: 'boolean' },
          effort: { type: 'string', multiple: true },
          'max-context': { type: 'string' },
          'owned-by': { type: 'string' },
        },
        op: 'model.add',
        input: (v) => {
          const upstreams = (v.upstream as string[] | undefined) ?? [];
          if (!upstreams.length) throw new UsageError('--upstream is required (repeat it for several backends)');
          return defined({
            name: required(v, 'name'),
            upstreams,
            servedName: str(v, 'served-name'),
            reasoning: v.reasoning,
            tools: v['no-tools'] ? false : undefined,
            efforts: v.effort,
            maxContext: num(v, 'max-context', { integer: true, min: 1 }),
            ownedBy: str(v, 'owned-by'),
            unchecked: v.unchecked,
          });
        },
      },
      check: {
        summary: 'Check upstreams for a model without saving anything: each must list the served name and answer a one-token completion',
        usage: '--name N --upstream URL [--upstream URL...] [--served-name S]',
        options: { name: { type: 'string' }, upstream: { type: 'string', multiple: true }, 'served-name': { type: 'string' } },
        op: 'model.check',
        input: (v) => {
          const upstreams = (v.upstream as string[] | undefined) ?? [];
          if (!upstreams.length) throw new UsageError('--upstream is required (repeat it for several backends)');
          return defined({ name: required(v, 'name'), upstreams, servedName: str(v, 'served-name') });
        },
        // A failed check is the command's answer (printed whole), and a script must see it: exit 1.
        failure: (r) => {
          const check = r as { ok?: boolean; summary?: string };
          return check.ok === false ? (check.summary ?? 'the check failed') : undefined;
        },
      },
      remove: {
        summary: 'Remove a model added with rc model add',
        usage: '--name N',
        options: { name: { type: 'string' } },
        op: 'model.remove',
        input: (v) => ({ name: required(v, 'name') }),
      },
      list: { summary: 'List the effective shared catalog (source: config or database)', usage: '', options: {}, op: 'model.list', input: () => ({}) },
    },
  },
};

function groupHelp(name: string): string {
  const g = GROUPS[name]!;
  const rows = Object.entries(g.subs).map(([s, sub]) => `  ${s.padEnd(14)} ${sub.summary}`);
  return `Usage: rc ${name} <subcommand> [options]\n\n${g.summary}.\n\nSubcommands:\n${rows.join('\n')}\n\nrc ${name} <subcommand> --help shows its options. Output is JSON.\n`;
}

function subHelp(group: string, name: string, sub: Sub): string {
  return `Usage: rc ${group} ${name} ${sub.usage}\n\n${sub.summary}.\n\nCommon options:\n${COMMON_HELP}\n`;
}

/** A group's one line for `rc --help`: what it manages and every subcommand, from the table. */
function groupSummary(group: string): string {
  const g = GROUPS[group]!;
  return `${g.summary} (${Object.keys(g.subs).join(', ')})`;
}

function groupCommand(group: string): Command {
  const g = GROUPS[group]!;
  return {
    summary: groupSummary(group),
    async run(argv) {
      const [name, ...rest] = argv;
      if (!name || name === '--help' || name === '-h' || name === 'help') {
        process.stdout.write(groupHelp(group));
        return name ? 0 : 2;
      }
      const sub = g.subs[name];
      if (!sub) throw new UsageError(`unknown subcommand ${JSON.stringify(name)} (one of: ${Object.keys(g.subs).join(', ')})`);
      const { values, positionals } = parse(rest, { ...COMMON, ...sub.options }, sub.positional);
      if (positionals.length > 1) throw new UsageError(`unexpected arguments: ${positionals.slice(1).join(' ')}`);
      if (values.help) {
        process.stdout.write(subHelp(group, name, sub));
        return 0;
      }
      const input = sub.input(values as Values, positionals[0]);
      const config = loadConfig();
      const dataDir = (values['data-dir'] as string | undefined) ?? config.dataDir;
      const options = {
        dataDir,
        databaseUrl: config.databaseUrl || undefined,
        namedStatements: config.databaseNamedStatements,
        init: values.init === true,
        redisUrl: config.redisUrl || undefined,
        redisPrefix: config.gateKeyPrefix,
        configuredModels: config.models,
      };
      let result: unknown;
      try {
        result = await callAdmin(options, sub.op, input);
      } catch (err) {
        // The operation refused its input (a field's value, not the platform's state): a usage error, exit 2.
        if (err instanceof RcError && err.status === 400) throw new UsageError(err.message);
        throw err;
      }
      printJson(result);
      const failure = sub.failure?.(result);
      if (failure === undefined) return 0;
      process.stderr.write(`rc ${group} ${name}: ${failure}\n`);
      return 1;
    },
  };
}

export const accountCommand = groupCommand('account');
export const couponCommand = groupCommand('coupon');
export const imageCommand = groupCommand('image');
export const modelCommand = groupCommand('model');
export const hostCommand = groupCommand('host');
