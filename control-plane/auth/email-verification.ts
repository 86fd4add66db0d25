// E-mail verification (issue 14; SPEC lists 409 "e-mail verification required first"). With
// RC_EMAIL_VERIFICATION=required, an account made by open sign-up starts with an unverified
// e-mail address: sign-up sends a single-use link instead of signing in, and sign-in answers 409
// `email_verification_required` until the link was opened. Accounts the operator creates, and
// every account from before the setting, count as verified. Links are random tokens stored only
// as SHA-256 hashes, valid `LINK_TTL_MS`.
import { randomBytes } from 'node:crypto';
import type { Clock } from '../../lib/clock.js';
import { hashKey } from '../../lib/keys.js';
import type { Sql } from '../sql.js';

export const LINK_TTL_MS = 24 * 3_600_000;
export const VERIFY_PATH = '/api/auth/verify-email';

export class EmailVerifications {
  private readonly isVerifiedStmt;
  private readonly setStmt;
  private readonly insert;
  private readonly find;
  private readonly dropForAccount;

  constructor(
    private readonly db: Sql,
    private readonly clock: Clock,
  ) {
    this.isVerifiedStmt = db.prepare<[number], { email_verified: number }>('SELECT email_verified FROM accounts WHERE id = ?');
    this.setStmt = db.prepare<[number, number]>('UPDATE accounts SET email_verified = ? WHERE id = ?');
    this.insert = db.prepare<[string, number, number, number]>(
      'INSERT INTO email_verifications (token_hash, account_id, expires_at, created_at) VALUES (?, ?, ?, ?)',
    );
    this.find = db.prepare<[string], { account_id: number; expires_at: number }>('SELECT account_id, expires_at FROM email_verifications WHERE token_hash = ?');
    this.dropForAccount = db.prepare<[number]>('DELETE FROM email_verifications WHERE account_id = ?');
  }

  async isVerified(accountId: number): Promise<boolean> {
    return (await this.isVerifiedStmt.get(accountId))?.email_verified !== 0;
  }

  async markUnverified(accountId: number): Promise<void> {
    await this.setStmt.run(0, accountId);
  }

  /** A new link token for the account (earlier ones stay valid until they expire). */
  async issue(accountId: number): Promise<string> {
    const token = randomBytes(32).toString('base64url');
    const now = this.clock.now();
    await this.insert.run(hashKey(token), accountId, now + LINK_TTL_MS, now);
    return token;
  }

  /** Verifies the account of a valid token (single use: every token of the account is dropped); undefined otherwise. */
  consume(token: string): Promise<number | undefined> {
    return this.db.transaction((tx) => new EmailVerifications(tx, this.clock).consumeIn(hashKey(token)));
  }

  /** The consumption itself (in the transaction). */
  private async consumeIn(tokenHash: string): Promise<number | undefined> {
    const r = await this.find.get(tokenHash);
    if (!r || r.expires_at <= this.clock.now()) return undefined;
    await this.setStmt.run(1, r.account_id);
    await this.dropForAccount.run(r.account_id);
    return r.account_id;
  }
}
