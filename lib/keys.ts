// API keys: generation, hashing, constant-time comparison. Keys are stored and held only as
// SHA-256 hashes; the clear key exists only in the response that issues it.
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';

export const KEY_PREFIX = 'rc-';
/** A key is `rc-` then 43 base64url characters (32 random bytes). */
const KEY_SHAPE = /^rc-[A-Za-z0-9_-]{43}$/;

export function generateKey(): string {
  return KEY_PREFIX + randomBytes(32).toString('base64url');
}

/** True when `key` has the shape of one of our keys (cheap pre-check before hashing). */
export function isWellFormedKey(key: string): boolean {
  return KEY_SHAPE.test(key);
}

/** Hex SHA-256 of the key: what we store and index by. */
export function hashKey(key: string): string {
  return createHash('sha256').update(key).digest('hex');
}

/** Constant-time equality of two hex hashes. */
export function hashesEqual(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  return timingSafeEqual(Buffer.from(a, 'hex'), Buffer.from(b, 'hex'));
}

/** A presented secret (token, CSRF token) against its stored hash, in constant time; '' never matches. */
export function matchesHash(given: string, hash: string): boolean {
  return given !== '' && hashesEqual(hashKey(given), hash);
}
