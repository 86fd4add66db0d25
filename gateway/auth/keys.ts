// API keys on the gateway: resolved in memory, never through SQLite or the control plane per
// request. A KeyDirectory is loaded once from a KeySource (a snapshot) and kept current by bus
// events: `key.issued` adds a hash, `key.revoked` removes it.
import type { ErrorCode } from '../errors.js';
import * as crypto from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { z } from 'zod';
import type { Bus, BusEvent } from '../../lib/bus.js';
import { RcError } from '../../lib/errors.js';
import { isWellFormedKey, KEY_PREFIX } from '../../lib/keys.js';
import { limitOverridesSchema } from '../gates/limits.js';
import type { KeyRecord, SessionRecord } from '../../lib/gateway-snapshot.js';

/** One live key: its SHA-256 hex hash and the account it belongs to. */
export type { KeyRecord };
/**
 * Where the directory's snapshot comes from (control-plane/ implements it over SQLite), read once
 * at start; `loadSessions` also gives the live browser sessions (gateway/auth/sessions.ts).
 */
export interface KeySource {
  load(): Promise<Iterable<KeyRecord>>;
  loadSessions?(): Promise<Iterable<SessionRecord>>;
}

/** Why a request carries no usable key. Constant objects: returning one allocates nothing. */
export interface AuthFailure {
  readonly reason: 'missing' | 'invalid' | 'session' | 'unverified';
}
export const AUTH_MISSING: AuthFailure = Object.freeze({ reason: 'missing' });
export const AUTH_INVALID: AuthFailure = Object.freeze({ reason: 'invalid' });

const BEARER = /^Bearer[ \t]+/i;
const BEARER_PREFIX = 'Bearer ';

/**
 * The SHA-256 of a clear key as a 32-character latin1 string, a character per byte ('binary' is
 * Node's other name for latin1): the directory's form of a hash. crypto.hash (Node >= 20.12) does
 * it in one native call, about three times faster than createHash().update().digest(); latin1
 * rather than hex (lib/keys.ts hashKey, the form keys are stored and sent in) because Node's hex
 * encoding costs some 2k instructions more a call under callgrind, and the compare below reads
 * half the characters.
 */
const sha256Digest: (key: string) => string =
  typeof crypto.hash === 'function' ? (key) => crypto.hash('sha256', key, 'binary') : (key) => crypto.createHash('sha256').update(key).digest('binary');

const HEX_HASH = /^[0-9a-f]{64}$/;

/** A stored hex hash (any case) in the directory's form (sha256Digest), or undefined when it is not a hex SHA-256. */
function digestOfHex(keyHash: string): string | undefined {
  const hex = keyHash.toLowerCase();
  return HEX_HASH.test(hex) ? Buffer.from(hex, 'hex').toString('latin1') : undefined;
}

/**
 * Constant-time equality of two digests of the same length: every character is compared,
 * whatever differs (the same guarantee as hashesEqual, without decoding both to Buffers).
 */
function sameHash(a: string, b: string): boolean {
  const n = a.length;
  if (n !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < n; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** A visible ASCII character: nothing String#trim would remove. */
function isVisible(c: number): boolean {
  return c > 0x20 && c < 0x7f;
}

/**
 * The map's index: the digest's first 4 bytes as a number (a number key costs the Map no string
 * hash; a slice of the hash string did, some 1.2k instructions a request). The full digest is then
 * compared in constant time.
 */
function prefixOf(digest: string): number {
  return (digest.charCodeAt(0) << 24) | (digest.charCodeAt(1) << 16) | (digest.charCodeAt(2) << 8) | digest.charCodeAt(3);
}

/** The length of a well-formed key (lib/keys.ts: `rc-` and 43 base64url characters). */
const KEY_LENGTH = 46;

/** A live key as the directory holds it. */
interface HeldKey {
  /** The key's SHA-256 (sha256Digest's form). */
  digest: string;
  accountId: number;
  /**
   * A key that hashed to this digest had the shape of our keys (isWellFormedKey): any key with the same
   * SHA-256 is that key, so its shape is not checked again (a RegExp test, about 1.5k instructions
   * a request). What is cached is the hash's verdict, never the clear key.
   */
  wellFormed: boolean;
}

/** The hash -> account map the request path reads. */
export class KeyDirectory {
  /** Hash prefix (prefixOf) -> records (almost always one). */
  private readonly byPrefix = new Map<number, HeldKey[]>();
  private count = 0;
  /** Events that arrived while the snapshot loaded; replayed after it so a revoke is never undone. */
  private pending: BusEvent[] | undefined;
  private unsubscribe: (() => void) | undefined;

  get size(): number {
    return this.count;
  }

  /** Lists a key by its hex SHA-256 (any case); a hash that is not one is ignored (no key could match it). */
  add(keyHash: string, accountId: number): void {
    const digest = digestOfHex(keyHash);
    if (digest === undefined) return;
    const prefix = prefixOf(digest);
    const list = this.byPrefix.get(prefix);
    if (!list) {
      this.byPrefix.set(prefix, [{ digest, accountId, wellFormed: false }]);
      this.count++;
      return;
    }
    const existing = list.find((r) => r.digest === digest);
    if (existing) existing.accountId = accountId;
    else {
      list.push({ digest, accountId, wellFormed: false });
      this.count++;
    }
  }

  remove(keyHash: string): void {
    const digest = digestOfHex(keyHash);
    if (digest === undefined) return;
    const prefix = prefixOf(digest);
    const list = this.byPrefix.get(prefix);
    if (!list) return;
    const i = list.findIndex((r) => r.digest === digest);
    if (i < 0) return;
    list.splice(i, 1);
    this.count--;
    if (!list.length) this.byPrefix.delete(prefix);
  }

  /** Subscribes to `bus` (when given), then loads the snapshot from `source`. */
  async start(source: KeySource, bus?: Bus): Promise<void> {
    if (bus) {
      this.pending = [];
      this.unsubscribe = bus.subscribe((ev) => {
        if (this.pending) this.pending.push(ev);
        else this.apply(ev);
      });
    }
    try {
      for (const r of await source.load()) this.add(r.keyHash, r.accountId);
    } finally {
      const queued = this.pending ?? [];
      this.pending = undefined;
      for (const ev of queued) this.apply(ev);
    }
  }

  /**
   * Replaces every key with a fresh snapshot (a standalone gateway's resync, gateway/sync/), then
   * applies `since`: the events that arrived while the snapshot was fetched, so a key revoked
   * meanwhile stays revoked.
   */
  replaceAll(records: Iterable<KeyRecord>, since: readonly BusEvent[] = []): void {
    this.byPrefix.clear();
    this.count = 0;
    for (const r of records) this.add(r.keyHash, r.accountId);
    for (const ev of since) this.apply(ev);
  }

  stop(): void {
    this.unsubscribe?.();
    this.unsubscribe = undefined;
  }

  private apply(ev: BusEvent): void {
    if (ev.type === 'key.issued') this.add(ev.keyHash, ev.accountId);
    else if (ev.type === 'key.revoked') this.remove(ev.keyHash);
  }

  /**
   * The account of a clear key, or undefined. The clear key is hashed and never kept. Only a key of
   * our shape (isWellFormedKey) is accepted; the shape is checked once per listed hash (HeldKey).
   */
  lookup(key: string): number | undefined {
    if (key.length !== KEY_LENGTH || !key.startsWith(KEY_PREFIX)) return undefined;
    const digest = sha256Digest(key);
    // The map narrows by a hash prefix; the full digest is compared in constant time.
    const list = this.byPrefix.get(prefixOf(digest));
    if (list === undefined) return undefined;
    for (let i = 0; i < list.length; i++) {
      const r = list[i]!;
      if (!sameHash(r.digest, digest)) continue;
      if (!r.wellFormed) {
        if (!isWellFormedKey(key)) return undefined;
        r.wellFormed = true;
      }
      return r.accountId;
    }
    return undefined;
  }

  /**
   * Resolves the key of a request: `Authorization: Bearer <key>` or `x-api-key: <key>` (either
   * header; Bearer wins when both are present). Returns the account id, or AUTH_MISSING /
   * AUTH_INVALID. Pass the raw header values ('' when absent, as uWS gives them).
   */
  authenticate(authorization: string, xApiKey: string): number | AuthFailure {
    let key: string;
    const n = authorization.length;
    if (
      n > BEARER_PREFIX.length &&
      authorization.startsWith(BEARER_PREFIX) &&
      isVisible(authorization.charCodeAt(BEARER_PREFIX.length)) &&
      isVisible(authorization.charCodeAt(n - 1))
    ) {
      // The usual form, `Bearer <key>`: no regex, no trim.
      key = authorization.slice(BEARER_PREFIX.length);
    } else if (authorization !== '') {
      const m = BEARER.exec(authorization);
      if (!m) return authorization.trim().toLowerCase() === 'bearer' ? AUTH_MISSING : AUTH_INVALID;
      key = authorization.slice(m[0].length).trim();
      if (key === '') return AUTH_MISSING;
    } else if (xApiKey !== '') {
      key = xApiKey.trim();
    } else {
      return AUTH_MISSING;
    }
    return this.lookup(key) ?? AUTH_INVALID;
  }
}

/** A KeySource over records held in memory (tests, embedded use). */
export function memoryKeySource(records: Iterable<KeyRecord>): KeySource {
  return { load: async () => records };
}

const keysFileSchema = z.array(
  z.strictObject({
    keyHash: z.string().regex(/^[0-9a-fA-F]{64}$/, 'must be a 64-character hex SHA-256'),
    accountId: z.number().int().nonnegative(),
    /** The account's gate overrides (`rc account set-limits`), so a standalone gateway starts with them. */
    limits: limitOverridesSchema.optional(),
  }),
);

/** One entry of a keys file. */
export type KeysFileEntry = z.output<typeof keysFileSchema>[number];

/** The keys file of a standalone gateway is missing or malformed. */
export class KeysFileError extends RcError {
  constructor(message: string) {
    super('RC_ERR_KEYS_FILE' satisfies ErrorCode, message, 500);
  }
}

/** Reads and validates a keys file `[{keyHash, accountId, limits?}]` (`rc gateway --keys-file`). */
export async function readKeysFile(path: string): Promise<KeysFileEntry[]> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, 'utf8'));
  } catch (err) {
    throw new KeysFileError(`keys file ${path}: ${(err as Error).message}`);
  }
  const parsed = keysFileSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new KeysFileError(`keys file ${path}: ${issue.path.join('.') || '(root)'}: ${issue.message}`);
  }
  return parsed.data;
}

/** A KeySource reading a keys file. */
export function fileKeySource(path: string): KeySource {
  return { load: () => readKeysFile(path) };
}
