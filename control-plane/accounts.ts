// Accounts, their API keys and their browser sessions.
import { createHmac, randomBytes } from 'node:crypto';
import type { Clock } from '../lib/clock.js';
import { generateKey, hashKey } from '../lib/keys.js';
import type { Db } from './db.js';
import { API_ERRORS } from './errors.js';
import { seal, unseal } from './secrets.js';

export interface Account {
  id: number;
  email: string;
  provider: string;
  verified: boolean;
  isEditor: boolean;
  sshPublicKey: string | null;
  launchVerification: boolean;
  createdAt: number;
}

interface AccountRow {
  id: number;
  email: string;
  provider: string;
  verified: number;
  is_editor: number;
  ssh_public_key: string | null;
  launch_verification: number;
  created_at: number;
}

const toAccount = (r: AccountRow): Account => ({
  id: r.id,
  email: r.email,
  provider: r.provider,
  verified: r.verified === 1,
  isEditor: r.is_editor === 1,
  sshPublicKey: r.ssh_public_key,
  launchVerification: r.launch_verification === 1,
  createdAt: r.created_at,
});

const ACCOUNT_COLUMNS = 'id, email, provider, verified, is_editor, ssh_public_key, launch_verification, created_at';

export interface NewAccount {
  email: string;
  provider?: string;
  passwordHash?: string | null;
  verified?: boolean;
  isEditor?: boolean;
}

export class Accounts {
  private readonly insert;
  private readonly byIdStmt;
  private readonly byEmailStmt;
  private readonly listStmt;
  private readonly passwordStmt;
  private readonly setVerifiedStmt;
  private readonly setEditorStmt;
  private readonly setSshStmt;
  private readonly setPasswordStmt;

  constructor(
    db: Db,
    private readonly clock: Clock,
  ) {
    this.insert = db.prepare<[string, string, string | null, number, number, number]>(
      'INSERT INTO accounts (email, provider, password_hash, verified, is_editor, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (email) DO NOTHING',
    );
    this.byIdStmt = db.prepare<[number], AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = ?`);
    this.byEmailStmt = db.prepare<[string], AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE email = ?`);
    this.listStmt = db.prepare<[], AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts ORDER BY id`);
    this.passwordStmt = db.prepare<[string], AccountRow & { password_hash: string | null }>(
      `SELECT ${ACCOUNT_COLUMNS}, password_hash FROM accounts WHERE email = ?`,
    );
    this.setVerifiedStmt = db.prepare<[number, number]>('UPDATE accounts SET verified = ? WHERE id = ?');
    this.setEditorStmt = db.prepare<[number, number]>('UPDATE accounts SET is_editor = ? WHERE id = ?');
    this.setSshStmt = db.prepare<[string | null, number]>('UPDATE accounts SET ssh_public_key = ? WHERE id = ?');
    this.setPasswordStmt = db.prepare<[string | null, number]>('UPDATE accounts SET password_hash = ? WHERE id = ?');
  }

  /** Creates an account; 409 when the e-mail is taken. */
  create(a: NewAccount): Account {
    const r = this.insert.run(
      a.email.toLowerCase(),
      a.provider ?? 'password',
      a.passwordHash ?? null,
      a.verified ? 1 : 0,
      a.isEditor ? 1 : 0,
      this.clock.now(),
    );
    if (r.changes === 0) throw API_ERRORS.emailTaken();
    return this.byId(Number(r.lastInsertRowid))!;
  }

  byId(id: number): Account | undefined {
    const r = this.byIdStmt.get(id);
    return r && toAccount(r);
  }

  byEmail(email: string): Account | undefined {
    const r = this.byEmailStmt.get(email);
    return r && toAccount(r);
  }

  /** The account and its password hash, for sign-in. */
  withPassword(email: string): { account: Account; passwordHash: string | null } | undefined {
    const r = this.passwordStmt.get(email);
    return r && { account: toAccount(r), passwordHash: r.password_hash };
  }

  list(): Account[] {
    return this.listStmt.all().map(toAccount);
  }

  setVerified(id: number, verified: boolean): void {
    this.setVerifiedStmt.run(verified ? 1 : 0, id);
  }
  setEditor(id: number, isEditor: boolean): void {
    this.setEditorStmt.run(isEditor ? 1 : 0, id);
  }
  setSshPublicKey(id: number, key: string | null): void {
    this.setSshStmt.run(key, id);
  }
  setPasswordHash(id: number, hash: string | null): void {
    this.setPasswordStmt.run(hash, id);
  }
}

export interface IssuedKey {
  key: string;
  keyHash: string;
  /** Hash of the key this one replaced, if any. */
  revokedHash: string | undefined;
}

/** API keys: at most one per account; stored as a SHA-256 hash (lookups) and sealed (GET /api/me). */
export class ApiKeys {
  private readonly insert;
  private readonly deleteStmt;
  private readonly hashOf;
  private readonly accountOf;
  private readonly sealedOf;
  private readonly allStmt;
  private readonly issueTx;

  constructor(
    private readonly db: Db,
    private readonly clock: Clock,
    private readonly sealKey: Buffer,
  ) {
    this.insert = db.prepare<[string, number, string, number]>('INSERT INTO api_keys (key_hash, account_id, key_sealed, created_at) VALUES (?, ?, ?, ?)');
    this.deleteStmt = db.prepare<[number]>('DELETE FROM api_keys WHERE account_id = ?');
    this.hashOf = db.prepare<[number], { key_hash: string }>('SELECT key_hash FROM api_keys WHERE account_id = ?');
    this.accountOf = db.prepare<[string], { account_id: number }>('SELECT account_id FROM api_keys WHERE key_hash = ?');
    this.sealedOf = db.prepare<[number], { key_sealed: string }>('SELECT key_sealed FROM api_keys WHERE account_id = ?');
    this.allStmt = db.prepare<[], { key_hash: string; account_id: number }>('SELECT key_hash, account_id FROM api_keys');
    this.issueTx = db.transaction((accountId: number, key: string, keyHash: string): string | undefined => {
      const old = this.hashOf.get(accountId)?.key_hash;
      this.deleteStmt.run(accountId);
      this.insert.run(keyHash, accountId, seal(this.sealKey, key), this.clock.now());
      return old;
    });
  }

  /** Issues a new key for the account, replacing (revoking) its current one in the same transaction. */
  issue(accountId: number): IssuedKey {
    const key = generateKey();
    const keyHash = hashKey(key);
    const revokedHash = this.issueTx.immediate(accountId, key, keyHash);
    return { key, keyHash, revokedHash };
  }

  /** Removes the account's key; returns its hash when there was one. */
  revoke(accountId: number): string | undefined {
    return this.db
      .transaction(() => {
        const old = this.hashOf.get(accountId)?.key_hash;
        this.deleteStmt.run(accountId);
        return old;
      })
      .immediate();
  }

  /** The account a key hash belongs to (primary-key lookup: a rotated key is refused at once). */
  accountIdFor(keyHash: string): number | undefined {
    return this.accountOf.get(keyHash)?.account_id;
  }

  /** The account's current key in clear, or null when it has none. */
  current(accountId: number): string | null {
    const row = this.sealedOf.get(accountId);
    return row ? (unseal(this.sealKey, row.key_sealed) ?? null) : null;
  }

  all(): { keyHash: string; accountId: number }[] {
    return this.allStmt.all().map((r) => ({ keyHash: r.key_hash, accountId: r.account_id }));
  }
}

export interface Session {
  accountId: number;
  /** SHA-256 hex of the session's CSRF token (the token itself is derived: csrfTokenFor). */
  csrfHash: string;
  expiresAt: number;
}

/**
 * The CSRF token of a session: derived from its cookie token (HMAC-SHA256), so the database holds
 * only hashes of both, and GET /api/auth/session can still hand the token to the session's pages.
 */
export function csrfTokenFor(sessionToken: string): string {
  return createHmac('sha256', sessionToken).update('rc-csrf').digest('base64url');
}

/** Browser sessions. The cookie carries a random token; the table holds only its hash. */
export class Sessions {
  private readonly insert;
  private readonly get;
  private readonly del;
  private readonly purge;
  private readonly all;

  constructor(
    db: Db,
    private readonly clock: Clock,
  ) {
    this.insert = db.prepare<[string, number, string, number, number]>(
      'INSERT INTO sessions (token_hash, account_id, csrf_hash, created_at, expires_at) VALUES (?, ?, ?, ?, ?)',
    );
    this.get = db.prepare<[string], { account_id: number; csrf_hash: string; expires_at: number }>(
      'SELECT account_id, csrf_hash, expires_at FROM sessions WHERE token_hash = ?',
    );
    this.del = db.prepare<[string]>('DELETE FROM sessions WHERE token_hash = ?');
    this.purge = db.prepare<[number]>('DELETE FROM sessions WHERE expires_at <= ?');
    this.all = db.prepare<[number], { token_hash: string; csrf_hash: string; account_id: number; expires_at: number }>(
      'SELECT token_hash, csrf_hash, account_id, expires_at FROM sessions WHERE expires_at > ?',
    );
  }

  create(accountId: number, ttlMs: number): Session & { token: string; csrfToken: string } {
    const token = randomBytes(32).toString('base64url');
    const csrfToken = csrfTokenFor(token);
    const csrfHash = hashKey(csrfToken);
    const now = this.clock.now();
    this.insert.run(hashKey(token), accountId, csrfHash, now, now + ttlMs);
    return { token, accountId, csrfToken, csrfHash, expiresAt: now + ttlMs };
  }

  /** The live session for a cookie token; expired sessions are deleted and give undefined. */
  lookup(token: string): Session | undefined {
    return this.lookupHash(hashKey(token));
  }

  /** The live session whose token hashes to `hash` (the instance proxy's cookie names its session by hash). */
  lookupHash(hash: string): Session | undefined {
    const r = this.get.get(hash);
    if (!r) return undefined;
    if (r.expires_at <= this.clock.now()) {
      this.del.run(hash);
      return undefined;
    }
    return { accountId: r.account_id, csrfHash: r.csrf_hash, expiresAt: r.expires_at };
  }

  delete(token: string): void {
    this.del.run(hashKey(token));
  }

  /** Every unexpired session, as hashes (for the gateway's in-memory session directory). */
  live(): { tokenHash: string; csrfHash: string; accountId: number; expiresAt: number }[] {
    return this.all.all(this.clock.now()).map((r) => ({ tokenHash: r.token_hash, csrfHash: r.csrf_hash, accountId: r.account_id, expiresAt: r.expires_at }));
  }

  purgeExpired(): number {
    return this.purge.run(this.clock.now()).changes;
  }
}
