// Accounts, their API keys and their browser sessions.
import { createHmac, randomBytes } from 'node:crypto';
import type { Clock } from '../lib/clock.js';
import { generateKey, hashKey } from '../lib/keys.js';
import type { Sql } from './sql.js';
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
  /** Operator accounts get the operator API and pages (migration 7). */
  isOperator: boolean;
  /** A disabled account (a rejected sign-up) can neither sign in nor use a key. */
  disabled: boolean;
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
  is_operator: number;
  disabled: number;
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
  isOperator: r.is_operator === 1,
  disabled: r.disabled === 1,
  createdAt: r.created_at,
});

const ACCOUNT_COLUMNS = 'id, email, provider, verified, is_editor, ssh_public_key, launch_verification, is_operator, disabled, created_at';

export interface NewAccount {
  email: string;
  provider?: string;
  passwordHash?: string | null;
  verified?: boolean;
  isEditor?: boolean;
  isOperator?: boolean;
}

export class Accounts {
  private readonly insert;
  private readonly byIdStmt;
  private readonly byEmailStmt;
  private readonly listStmt;
  private readonly passwordStmt;
  private readonly setVerifiedStmt;
  private readonly setEditorStmt;
  private readonly setOperatorStmt;
  private readonly setDisabledStmt;
  private readonly setSshStmt;
  private readonly setPasswordStmt;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    this.insert = db.prepare<[string, string, string | null, number, number, number, number], { id: number }>(
      'INSERT INTO accounts (email, provider, password_hash, verified, is_editor, is_operator, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (email) DO NOTHING RETURNING id',
    );
    this.byIdStmt = db.prepare<[number], AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE id = ?`);
    this.byEmailStmt = db.prepare<[string], AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts WHERE email = ?`);
    this.listStmt = db.prepare<[], AccountRow>(`SELECT ${ACCOUNT_COLUMNS} FROM accounts ORDER BY id`);
    this.passwordStmt = db.prepare<[string], AccountRow & { password_hash: string | null }>(
      `SELECT ${ACCOUNT_COLUMNS}, password_hash FROM accounts WHERE email = ?`,
    );
    this.setVerifiedStmt = db.prepare<[number, number]>('UPDATE accounts SET verified = ? WHERE id = ?');
    this.setEditorStmt = db.prepare<[number, number]>('UPDATE accounts SET is_editor = ? WHERE id = ?');
    this.setOperatorStmt = db.prepare<[number, number]>('UPDATE accounts SET is_operator = ? WHERE id = ?');
    this.setDisabledStmt = db.prepare<[number, number]>('UPDATE accounts SET disabled = ? WHERE id = ?');
    this.setSshStmt = db.prepare<[string | null, number]>('UPDATE accounts SET ssh_public_key = ? WHERE id = ?');
    this.setPasswordStmt = db.prepare<[string | null, number]>('UPDATE accounts SET password_hash = ? WHERE id = ?');
  }

  /** Creates an account; 409 when the e-mail is taken. */
  async create(a: NewAccount): Promise<Account> {
    const r = await this.insert.get(
      a.email.toLowerCase(),
      a.provider ?? 'password',
      a.passwordHash ?? null,
      a.verified ? 1 : 0,
      a.isEditor ? 1 : 0,
      a.isOperator ? 1 : 0,
      this.clock.now(),
    );
    if (!r) throw API_ERRORS.emailTaken();
    return (await this.byId(r.id))!;
  }

  async byId(id: number): Promise<Account | undefined> {
    const r = await this.byIdStmt.get(id);
    return r && toAccount(r);
  }

  async byEmail(email: string): Promise<Account | undefined> {
    const r = await this.byEmailStmt.get(email.toLowerCase()); // stored lower case (create)
    return r && toAccount(r);
  }

  /** The account and its password hash, for sign-in. */
  async withPassword(email: string): Promise<{ account: Account; passwordHash: string | null } | undefined> {
    const r = await this.passwordStmt.get(email.toLowerCase());
    return r && { account: toAccount(r), passwordHash: r.password_hash };
  }

  async list(): Promise<Account[]> {
    return (await this.listStmt.all()).map(toAccount);
  }

  async setVerified(id: number, verified: boolean): Promise<void> {
    await this.setVerifiedStmt.run(verified ? 1 : 0, id);
  }
  async setEditor(id: number, isEditor: boolean): Promise<void> {
    await this.setEditorStmt.run(isEditor ? 1 : 0, id);
  }
  async setOperator(id: number, isOperator: boolean): Promise<void> {
    await this.setOperatorStmt.run(isOperator ? 1 : 0, id);
  }
  async setDisabled(id: number, disabled: boolean): Promise<void> {
    await this.setDisabledStmt.run(disabled ? 1 : 0, id);
  }
  async setSshPublicKey(id: number, key: string | null): Promise<void> {
    await this.setSshStmt.run(key, id);
  }
  async setPasswordHash(id: number, hash: string | null): Promise<void> {
    await this.setPasswordStmt.run(hash, id);
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

  constructor(
    private readonly db: Sql,
    private readonly clock: Clock,
    private readonly sealKey: Buffer,
  ) {
    this.insert = db.prepare<[string, number, string, number]>('INSERT INTO api_keys (key_hash, account_id, key_sealed, created_at) VALUES (?, ?, ?, ?)');
    this.deleteStmt = db.prepare<[number]>('DELETE FROM api_keys WHERE account_id = ?');
    this.hashOf = db.prepare<[number], { key_hash: string }>('SELECT key_hash FROM api_keys WHERE account_id = ?');
    this.accountOf = db.prepare<[string], { account_id: number }>('SELECT account_id FROM api_keys WHERE key_hash = ?');
    this.sealedOf = db.prepare<[number], { key_sealed: string }>('SELECT key_sealed FROM api_keys WHERE account_id = ?');
    this.allStmt = db.prepare<[], { key_hash: string; account_id: number }>('SELECT key_hash, account_id FROM api_keys');
  }

  /** Issues a new key for the account, replacing (revoking) its current one in the same transaction. */
  async issue(accountId: number): Promise<IssuedKey> {
    const key = generateKey();
    const keyHash = hashKey(key);
    const revokedHash = await this.db.transaction(async (tx) => {
      const keys = new ApiKeys(tx, this.clock, this.sealKey);
      const old = await keys.drop(accountId);
      await keys.insert.run(keyHash, accountId, seal(this.sealKey, key), this.clock.now());
      return old;
    });
    return { key, keyHash, revokedHash };
  }

  /** Removes the account's key; returns its hash when there was one. */
  revoke(accountId: number): Promise<string | undefined> {
    return this.db.transaction((tx) => new ApiKeys(tx, this.clock, this.sealKey).drop(accountId));
  }

  /** Deletes the account's key (call in a transaction); returns its hash when there was one. */
  private async drop(accountId: number): Promise<string | undefined> {
    const old = (await this.hashOf.get(accountId))?.key_hash;
    await this.deleteStmt.run(accountId);
    return old;
  }

  /** The account a key hash belongs to (primary-key lookup: a rotated key is refused at once). */
  async accountIdFor(keyHash: string): Promise<number | undefined> {
    return (await this.accountOf.get(keyHash))?.account_id;
  }

  /** The account's current key in clear, or null when it has none. */
  async current(accountId: number): Promise<string | null> {
    const row = await this.sealedOf.get(accountId);
    return row ? (unseal(this.sealKey, row.key_sealed) ?? null) : null;
  }

  async all(): Promise<{ keyHash: string; accountId: number }[]> {
    return (await this.allStmt.all()).map((r) => ({ keyHash: r.key_hash, accountId: r.account_id }));
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
  private readonly ofAccount;
  private readonly delAccount;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    this.ofAccount = db.prepare<[number], { token_hash: string }>('SELECT token_hash FROM sessions WHERE account_id = ?');
    this.delAccount = db.prepare<[number]>('DELETE FROM sessions WHERE account_id = ?');
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

  async create(accountId: number, ttlMs: number): Promise<Session & { token: string; csrfToken: string }> {
    const token = randomBytes(32).toString('base64url');
    const csrfToken = csrfTokenFor(token);
    const csrfHash = hashKey(csrfToken);
    const now = this.clock.now();
    await this.insert.run(hashKey(token), accountId, csrfHash, now, now + ttlMs);
    return { token, accountId, csrfToken, csrfHash, expiresAt: now + ttlMs };
  }

  /** The live session for a cookie token; expired sessions are deleted and give undefined. */
  lookup(token: string): Promise<Session | undefined> {
    return this.lookupHash(hashKey(token));
  }

  /** The live session whose token hashes to `hash` (the instance proxy's cookie names its session by hash). */
  async lookupHash(hash: string): Promise<Session | undefined> {
    const r = await this.get.get(hash);
    if (!r) return undefined;
    if (r.expires_at <= this.clock.now()) {
      await this.del.run(hash);
      return undefined;
    }
    return { accountId: r.account_id, csrfHash: r.csrf_hash, expiresAt: r.expires_at };
  }

  async delete(token: string): Promise<void> {
    await this.del.run(hashKey(token));
  }

  /** Every unexpired session, as hashes (for the gateway's in-memory session directory). */
  async live(): Promise<{ tokenHash: string; csrfHash: string; accountId: number; expiresAt: number }[]> {
    return (await this.all.all(this.clock.now())).map((r) => ({
      tokenHash: r.token_hash,
      csrfHash: r.csrf_hash,
      accountId: r.account_id,
      expiresAt: r.expires_at,
    }));
  }

  /** Ends every session of the account (a disabled account); returns their token hashes (for `session.ended`). */
  async endAll(accountId: number): Promise<string[]> {
    const hashes = (await this.ofAccount.all(accountId)).map((r) => r.token_hash);
    await this.delAccount.run(accountId);
    return hashes;
  }

  async purgeExpired(): Promise<number> {
    return (await this.purge.run(this.clock.now())).changes;
  }
}
