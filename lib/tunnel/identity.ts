// Tunnel identities: the token provisioned into an instance at launch, verified by the broker
// without any lookup (an HMAC of the instance id under a secret shared by the control plane and
// the gateways), and the stable public tunnel id of an (instance, port).
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { LibError } from '../errors.js';

/**
 * Legacy identity directory (relative to the instance directory, RC_INSTANCE_DIR), provisioned
 * before issue 14; rc-tunnel still reads it for instances launched then. New instances get the
 * token in RC_TUNNEL_TOKEN instead: a file in the home directory was served by any app serving
 * that directory (the seeded gradio demo did).
 */
export const TUNNEL_IDENTITY_DIR = '.rc-tunnel';
/** Identity files inside it. */
export const TOKEN_FILE = 'token';
export const BROKER_FILE = 'broker';
/** Environment variables rc-tunnel reads. */
export const IDENTITY_DIR_ENV = 'RC_TUNNEL_IDENTITY_DIR';
export const BROKER_ENV = 'RC_TUNNEL_BROKER';
/** The instance's tunnel token (what the control plane provisions; containers never get it). */
export const TOKEN_ENV = 'RC_TUNNEL_TOKEN';
/**
 * Set to 1 in containers: RC_TUNNEL_BROKER is the agent's tunnel relay, which presents the
 * instance's token itself (agent/broker-relay.ts), so rc-tunnel connects without one.
 */
export const VIA_RELAY_ENV = 'RC_TUNNEL_VIA_RELAY';

const TOKEN_PREFIX = 'rct-';
/** base64url of an HMAC-SHA256. */
const MAC_LENGTH = 43;
const INSTANCE_ID = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

export class TunnelSecretError extends LibError {
  constructor(message: string) {
    super('RC_ERR_TUNNEL_SECRET', message);
  }
}

function mac(secret: string, purpose: string, value: string): Buffer {
  return createHmac('sha256', secret).update(`${purpose}\0${value}`).digest();
}

function checkSecret(secret: string): void {
  if (secret.length < 16) throw new TunnelSecretError('The tunnel secret must be at least 16 characters');
}

/** The token of an instance: `rct-<mac>.<instance id>`. */
export function issueTunnelToken(secret: string, instanceId: string): string {
  checkSecret(secret);
  if (!INSTANCE_ID.test(instanceId)) throw new TunnelSecretError(`Not an instance id: ${JSON.stringify(instanceId)}`);
  return `${TOKEN_PREFIX}${mac(secret, 'token', instanceId).toString('base64url')}.${instanceId}`;
}

/** The instance id a token was issued for, or undefined when it is not a valid token. */
export function verifyTunnelToken(secret: string, token: string): string | undefined {
  if (token.length > 200 || !token.startsWith(TOKEN_PREFIX) || token[TOKEN_PREFIX.length + MAC_LENGTH] !== '.') return undefined;
  const instanceId = token.slice(TOKEN_PREFIX.length + MAC_LENGTH + 1);
  if (!INSTANCE_ID.test(instanceId)) return undefined;
  const given = Buffer.from(token.slice(TOKEN_PREFIX.length, TOKEN_PREFIX.length + MAC_LENGTH), 'base64url');
  const expected = mac(secret, 'token', instanceId);
  return given.length === expected.length && timingSafeEqual(given, expected) ? instanceId : undefined;
}

/** The public tunnel id of an instance's port: stable across reconnects, not guessable from the instance id. */
export function tunnelId(secret: string, instanceId: string, port: number): string {
  return 't' + mac(secret, 'tunnel', `${instanceId}:${port}`).toString('hex').slice(0, 24);
}

/**
 * What the control plane provisions into an instance at launch: the token and the broker
 * setting, both in the environment (LaunchSpec `env`), and no file: nothing in the instance's
 * home or working directory, which apps serve (a static server, a notebook's file browser).
 * `brokerUrl` is the gateway's public URL (http(s)://host:port).
 */
export function tunnelProvisioning(secret: string, instanceId: string, brokerUrl: string): { files: Record<string, string>; env: Record<string, string> } {
  return {
    files: {},
    env: { [BROKER_ENV]: brokerUrl, [TOKEN_ENV]: issueTunnelToken(secret, instanceId) },
  };
}

/**
 * The tunnel secret: `configured` when set (RC_TUNNEL_SECRET; needed when gateways run on other
 * machines), else `<dataDir>/tunnel/secret`, created on first use, so tokens survive restarts.
 */
export function tunnelSecret(configured: string, dataDir: string): string {
  if (configured) {
    checkSecret(configured);
    return configured;
  }
  const dir = join(dataDir, 'tunnel');
  const file = join(dir, 'secret');
  try {
    const s = readFileSync(file, 'utf8').trim();
    if (s.length >= 16) return s;
  } catch {
    // not created yet
  }
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const s = randomBytes(32).toString('base64url');
  writeFileSync(file, s + '\n', { mode: 0o600 });
  return s;
}
