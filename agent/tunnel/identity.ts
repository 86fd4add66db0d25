// Where rc-tunnel finds its identity (token), its broker and its state (status files, log).
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { RcError } from '../../lib/errors.js';
import { BROKER_ENV, BROKER_FILE, IDENTITY_DIR_ENV, TOKEN_FILE, TUNNEL_IDENTITY_DIR } from '../../gateway/tunnel/identity.js';

export const STATE_DIR_ENV = 'RC_TUNNEL_STATE_DIR';

const RECREATE = 'This notebook was created before the tunnel feature was enabled: destroy this notebook and create a new one.';

/** The instance lacks the identity directory or the broker setting (SPEC: recreate the notebook). */
export class TunnelNotProvisionedError extends RcError {
  constructor(what: string) {
    super('RC_ERR_TUNNEL_NOT_PROVISIONED', `${what}. ${RECREATE}`, 400);
  }
}

export interface TunnelIdentity {
  dir: string;
  token: string;
  broker: string;
}

/** The identity directory: $RC_TUNNEL_IDENTITY_DIR, else $RC_INSTANCE_DIR/.rc-tunnel (undefined when neither is set). */
export function identityDir(env: NodeJS.ProcessEnv): string | undefined {
  if (env[IDENTITY_DIR_ENV]) return env[IDENTITY_DIR_ENV];
  if (env.RC_INSTANCE_DIR) return join(env.RC_INSTANCE_DIR, TUNNEL_IDENTITY_DIR);
  return undefined;
}

/** Reads the identity; throws TunnelNotProvisionedError naming what is missing. */
export function readIdentity(env: NodeJS.ProcessEnv = process.env): TunnelIdentity {
  const dir = identityDir(env);
  if (!dir || !existsSync(dir)) {
    throw new TunnelNotProvisionedError(`No tunnel identity directory (${dir ?? `${IDENTITY_DIR_ENV} is not set`}${dir ? ' does not exist' : ''})`);
  }
  let token: string;
  try {
    token = readFileSync(join(dir, TOKEN_FILE), 'utf8').trim();
  } catch {
    token = '';
  }
  if (!token) throw new TunnelNotProvisionedError(`The tunnel identity directory ${dir} holds no token`);
  let broker = env[BROKER_ENV] ?? '';
  if (!broker) {
    try {
      broker = readFileSync(join(dir, BROKER_FILE), 'utf8').trim();
    } catch {
      // no broker file either
    }
  }
  if (!broker) throw new TunnelNotProvisionedError(`No tunnel broker setting (${BROKER_ENV} is not set)`);
  return { dir, token, broker };
}

/** Where status files and the log live: $RC_TUNNEL_STATE_DIR, else $RC_INSTANCE_DIR/.rc-tunnel-state, else ~/.rc-tunnel-state. */
export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env[STATE_DIR_ENV]) return env[STATE_DIR_ENV]!;
  return join(env.RC_INSTANCE_DIR || env.HOME || homedir(), '.rc-tunnel-state');
}
