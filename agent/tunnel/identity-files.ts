// Where rc-tunnel finds its identity (token), its broker and its state (status files, log).
import { chmodSync, existsSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { RcError } from '../../lib/errors.js';
import { BROKER_ENV, BROKER_FILE, IDENTITY_DIR_ENV, TOKEN_ENV, TOKEN_FILE, TUNNEL_IDENTITY_DIR, VIA_RELAY_ENV } from '../../lib/tunnel/identity.js';

export const STATE_DIR_ENV = 'RC_TUNNEL_STATE_DIR';

const RECREATE = 'This notebook was created before the tunnel feature was enabled: destroy this notebook and create a new one.';

/** The instance lacks the identity directory or the broker setting (SPEC: recreate the notebook). */
export class TunnelNotProvisionedError extends RcError {
  constructor(what: string) {
    super('RC_ERR_TUNNEL_NOT_PROVISIONED', `${what}. ${RECREATE}`, 400);
  }
}

export interface TunnelIdentity {
  /** Where the token came from: `$RC_TUNNEL_TOKEN`, the identity directory, or the agent's relay. */
  dir: string;
  /** Empty through the agent's relay (it presents the instance's token). */
  token: string;
  broker: string;
}

/** The identity directory: $RC_TUNNEL_IDENTITY_DIR, else $RC_INSTANCE_DIR/.rc-tunnel (undefined when neither is set). */
export function identityDir(env: NodeJS.ProcessEnv): string | undefined {
  if (env[IDENTITY_DIR_ENV]) return env[IDENTITY_DIR_ENV];
  if (env.RC_INSTANCE_DIR) return join(env.RC_INSTANCE_DIR, TUNNEL_IDENTITY_DIR);
  return undefined;
}

/** Reads a token file, first making it owner-only (0600) when it is not: it is a credential. */
function readTokenFile(file: string): string {
  try {
    if ((statSync(file).mode & 0o077) !== 0) chmodSync(file, 0o600);
  } catch {
    // missing, or not ours to change: reading says what is wrong
  }
  try {
    return readFileSync(file, 'utf8').trim();
  } catch {
    return '';
  }
}

/**
 * Reads the identity: none through the agent's relay ($RC_TUNNEL_VIA_RELAY=1 with
 * $RC_TUNNEL_BROKER, containers), else the token from $RC_TUNNEL_TOKEN (what the control plane provisions), else
 * from the identity directory's `token` file ($RC_TUNNEL_IDENTITY_DIR, or the legacy
 * $RC_INSTANCE_DIR/.rc-tunnel); throws TunnelNotProvisionedError naming what is missing.
 */
export function readIdentity(env: NodeJS.ProcessEnv = process.env): TunnelIdentity {
  // In a container: the broker setting is the agent's relay, which identifies this container by
  // its address and presents its token (the container never holds one).
  const relayBroker = env[VIA_RELAY_ENV] === '1' ? (env[BROKER_ENV]?.trim() ?? '') : '';
  // A token set anyway is sent: the relay drops it (kept so that this can be shown, tests do).
  if (relayBroker) return { dir: "the agent's tunnel relay", token: env[TOKEN_ENV]?.trim() ?? '', broker: relayBroker };
  const fromEnv = env[TOKEN_ENV]?.trim() ?? '';
  const dir = identityDir(env);
  let token = fromEnv;
  if (!token) {
    if (!dir || !existsSync(dir)) {
      throw new TunnelNotProvisionedError(
        `No tunnel identity directory (${dir ? `${dir} does not exist` : `${IDENTITY_DIR_ENV} is not set`}) and no ${TOKEN_ENV}`,
      );
    }
    token = readTokenFile(join(dir, TOKEN_FILE));
    if (!token) throw new TunnelNotProvisionedError(`The tunnel identity directory ${dir} holds no token`);
  }
  let broker = env[BROKER_ENV] ?? '';
  if (!broker && dir) {
    try {
      broker = readFileSync(join(dir, BROKER_FILE), 'utf8').trim();
    } catch {
      // no broker file either
    }
  }
  if (!broker) throw new TunnelNotProvisionedError(`No tunnel broker setting (${BROKER_ENV} is not set)`);
  return { dir: fromEnv ? `$${TOKEN_ENV}` : dir!, token, broker };
}

/** Where status files and the log live: $RC_TUNNEL_STATE_DIR, else $RC_INSTANCE_DIR/.rc-tunnel-state, else ~/.rc-tunnel-state. */
export function stateDir(env: NodeJS.ProcessEnv = process.env): string {
  if (env[STATE_DIR_ENV]) return env[STATE_DIR_ENV]!;
  return join(env.RC_INSTANCE_DIR || env.HOME || homedir(), '.rc-tunnel-state');
}
