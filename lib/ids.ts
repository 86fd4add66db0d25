// Identifiers: random, URL-safe, with a readable prefix.
import { randomBytes } from 'node:crypto';

/** A random id such as `msg_3k9f...` (`bytes` of entropy, base64url). */
export function randomId(prefix: string, bytes = 12): string {
  return `${prefix}${randomBytes(bytes).toString('base64url')}`;
}
