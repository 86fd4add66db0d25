// Files in the data dir that hold secrets (mode 0600, created once, atomically): the admin token
// the rc CLI sends to a running platform, and the key that seals API keys at rest.
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export const ADMIN_TOKEN_FILE = 'admin.token';
export const SEAL_KEY_FILE = 'seal.key';
export const INTERNAL_TOKEN_FILE = 'internal.token';

/** Reads the file, or creates it with `make()` (mode 0600) when it does not exist yet. */
export function readOrCreateSecret(path: string, make: () => string): string {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  try {
    writeFileSync(path, make() + '\n', { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err; // another process won the race
  }
  return readFileSync(path, 'utf8').trim();
}

export function adminTokenPath(dataDir: string): string {
  return join(dataDir, ADMIN_TOKEN_FILE);
}

/** The admin token of a data dir (created on first use). */
export function adminToken(dataDir: string): string {
  mkdirSync(dataDir, { recursive: true });
  return readOrCreateSecret(adminTokenPath(dataDir), () => randomBytes(32).toString('base64url'));
}

/**
 * The token gateways present to the internal API (x-rc-internal-token): `configured`
 * (RC_INTERNAL_TOKEN) when set, else the data dir's internal.token, created on first use.
 */
export function internalToken(dataDir: string, configured = ''): string {
  if (configured) return configured;
  mkdirSync(dataDir, { recursive: true });
  return readOrCreateSecret(join(dataDir, INTERNAL_TOKEN_FILE), () => randomBytes(32).toString('base64url'));
}

/** The 32-byte sealing key of a data dir (created on first use). */
export function sealKey(dataDir: string): Buffer {
  mkdirSync(dataDir, { recursive: true });
  return Buffer.from(
    readOrCreateSecret(join(dataDir, SEAL_KEY_FILE), () => randomBytes(32).toString('hex')),
    'hex',
  );
}

/** AES-256-GCM: base64url(iv | tag | ciphertext). */
export function seal(key: Buffer, text: string): string {
  const iv = randomBytes(12);
  const c = createCipheriv('aes-256-gcm', key, iv);
  const ct = Buffer.concat([c.update(text, 'utf8'), c.final()]);
  return Buffer.concat([iv, c.getAuthTag(), ct]).toString('base64url');
}

/** Opens what seal() made; undefined when the key does not match (for example a lost seal.key). */
export function unseal(key: Buffer, sealed: string): string | undefined {
  try {
    const buf = Buffer.from(sealed, 'base64url');
    const d = createDecipheriv('aes-256-gcm', key, buf.subarray(0, 12));
    d.setAuthTag(buf.subarray(12, 28));
    return Buffer.concat([d.update(buf.subarray(28)), d.final()]).toString('utf8');
  } catch {
    return undefined;
  }
}
