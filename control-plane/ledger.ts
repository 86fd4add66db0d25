// Credits: an append-only ledger (the truth) and coupons. The balance is SUM(amount) over an
// account's entries. Every entry carries a unique idempotency key, so a retried grant, coupon
// or instance-usage charge is recorded once.
import { randomBytes } from 'node:crypto';
import type { Clock } from '../lib/clock.js';
import { isUniqueViolation, type Sql } from './sql.js';
import { API_ERRORS } from './errors.js';
import { hashKey } from '../lib/keys.js';

export const MICROS = 1_000_000;
/** Credits (a number) to integer micro-credits. */
export const toMicros = (credits: number): number => Math.round(credits * MICROS);
export const toCredits = (micros: number): number => micros / MICROS;

export type LedgerKind = 'coupon' | 'grant' | 'instance_usage';

export interface LedgerEntryInput {
  accountId: number;
  kind: LedgerKind;
  /** Credits; negative for a charge (instance usage). */
  credits: number;
  /** Unique across the ledger: `coupon:<code>`, `grant:<...>`, `usage:<instance>:<period>`. */
  idempotencyKey: string;
  /** Free-form reference (coupon code, instance id, reason). */
  ref?: string | null;
}

export interface LedgerEntry {
  id: number;
  accountId: number;
  kind: LedgerKind;
  credits: number;
  idempotencyKey: string;
  ref: string | null;
  createdAt: number;
}

type LedgerRow = { id: number; account_id: number; kind: LedgerKind; amount_micros: number; idempotency_key: string; ref: string | null; created_at: number };

const entryOf = (r: LedgerRow): LedgerEntry => ({
  id: r.id,
  accountId: r.account_id,
  kind: r.kind,
  credits: toCredits(r.amount_micros),
  idempotencyKey: r.idempotency_key,
  ref: r.ref,
  createdAt: r.created_at,
});

export class Ledger {
  private readonly insert;
  private readonly sum;
  private readonly list;
  private readonly pageStmt;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    this.insert = db.prepare<[number, string, number, string, string | null, number]>(
      'INSERT INTO ledger (account_id, kind, amount_micros, idempotency_key, ref, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (idempotency_key) DO NOTHING',
    );
    this.sum = db.prepare<[number], { micros: number }>('SELECT CAST(COALESCE(SUM(amount_micros), 0) AS BIGINT) AS micros FROM ledger WHERE account_id = ?');
    this.list = db.prepare<[number], LedgerRow>(
      'SELECT id, account_id, kind, amount_micros, idempotency_key, ref, created_at FROM ledger WHERE account_id = ? ORDER BY id',
    );
    this.pageStmt = db.prepare<[number, number, number], LedgerRow>(
      'SELECT id, account_id, kind, amount_micros, idempotency_key, ref, created_at FROM ledger WHERE account_id = ? AND id < ? ORDER BY id DESC LIMIT ?',
    );
  }

  /**
   * Appends an entry unless one with the same idempotency key exists. Call inside a transaction
   * to make it part of a larger change. Returns whether it was applied and the new balance.
   */
  async append(e: LedgerEntryInput): Promise<{ applied: boolean; credits: number }> {
    const r = await this.insert.run(e.accountId, e.kind, toMicros(e.credits), e.idempotencyKey, e.ref ?? null, this.clock.now());
    return { applied: r.changes === 1, credits: await this.balance(e.accountId) };
  }

  /** The account's balance in credits. */
  async balance(accountId: number): Promise<number> {
    return toCredits((await this.sum.get(accountId))!.micros);
  }

  async entries(accountId: number): Promise<LedgerEntry[]> {
    return (await this.list.all(accountId)).map(entryOf);
  }

  /** Up to `limit` entries with an id below `beforeId`, newest first (ids grow with time: append-only). */
  async page(accountId: number, limit: number, beforeId = Number.MAX_SAFE_INTEGER): Promise<LedgerEntry[]> {
    return (await this.pageStmt.all(accountId, beforeId, limit)).map(entryOf);
  }
}

/** A coupon as listed: the code itself is a bearer secret, shown only at creation; `id` is a prefix of its hash. */
export interface Coupon {
  id: string;
  credits: number;
  accountId: number | null;
  redeemedBy: number | null;
  redeemedAt: number | null;
}

/** A coupon code: `RC-` and 16 characters from an alphabet without look-alikes. */
export function newCouponCode(): string {
  const alphabet = 'ABCDEFGHJKLMNPQRSTUVWXYZ23456789';
  const bytes = randomBytes(16);
  let s = '';
  for (const b of bytes) s += alphabet[b % 32];
  return `RC-${s.slice(0, 4)}-${s.slice(4, 8)}-${s.slice(8, 12)}-${s.slice(12)}`;
}

/** The least entropy a custom coupon code must have (a generated one has about 80 bits). */
export const MIN_CUSTOM_CODE_BITS = 64;

/**
 * A conservative estimate of a code's entropy in bits: each character drawn from the classes the
 * code uses (lower case 26, upper case 26, digits 10, `-` and `_` 2), not counting a character
 * that repeats the one before or continues a run (`aaaa`, `abcd`, `4321`). A guess list tries
 * such codes first, so they add nothing. Words are not recognised: the floor is set high enough
 * that a code people would pick (`WELCOME2026`, 52 bits by this count) is refused anyway.
 */
export function codeEntropyBits(code: string): number {
  let pool = 0;
  if (/[a-z]/.test(code)) pool += 26;
  if (/[A-Z]/.test(code)) pool += 26;
  if (/[0-9]/.test(code)) pool += 10;
  if (/[^A-Za-z0-9]/.test(code)) pool += 2;
  let counted = 0;
  for (let i = 0; i < code.length; i++) {
    const d = i === 0 ? Number.NaN : code.charCodeAt(i) - code.charCodeAt(i - 1);
    if (d !== 0 && d !== 1 && d !== -1) counted++;
  }
  return pool === 0 ? 0 : counted * Math.log2(pool);
}

/** How a coupon is named once its code is gone: the first 12 hex digits of the code's hash. */
export const couponId = (codeHash: string): string => codeHash.slice(0, 12);

export class Coupons {
  private readonly insert;
  private readonly get;
  private readonly claim;
  private readonly listStmt;

  constructor(
    private readonly db: Sql,
    private readonly clock: Clock,
    private readonly ledger: Ledger,
  ) {
    // Codes are stored only as SHA-256 hex (like keys): the database alone redeems nothing.
    this.insert = db.prepare<[string, number, number | null, number]>(
      'INSERT INTO coupons (code_hash, credits_micros, account_id, created_at) VALUES (?, ?, ?, ?)',
    );
    type Row = { code_hash: string; credits_micros: number; account_id: number | null; redeemed_by: number | null; redeemed_at: number | null };
    this.get = db.prepare<[string], Row>('SELECT code_hash, credits_micros, account_id, redeemed_by, redeemed_at FROM coupons WHERE code_hash = ?');
    this.listStmt = db.prepare<[], Row>('SELECT code_hash, credits_micros, account_id, redeemed_by, redeemed_at FROM coupons ORDER BY created_at, code_hash');
    // The WHERE redeemed_by IS NULL makes the claim itself exactly-once, whatever the caller does.
    this.claim = db.prepare<[number, number, string]>('UPDATE coupons SET redeemed_by = ?, redeemed_at = ? WHERE code_hash = ? AND redeemed_by IS NULL');
  }

  /** Creates a coupon; a 400 when `code` is taken. The returned `code` is the only time it is seen. */
  async create(credits: number, accountId: number | null = null, code = newCouponCode()): Promise<Coupon & { code: string }> {
    const codeHash = hashKey(code);
    try {
      await this.insert.run(codeHash, toMicros(credits), accountId, this.clock.now());
    } catch (err) {
      if (isUniqueViolation(err)) throw API_ERRORS.couponExists(code);
      throw err;
    }
    return { code, id: couponId(codeHash), credits: toCredits(toMicros(credits)), accountId, redeemedBy: null, redeemedAt: null };
  }

  /** Redeems once, in one immediate transaction; throws a 400 ApiError for invalid, redeemed or another account's coupon. */
  redeem(accountId: number, code: string): Promise<{ credits_added: number; credits: number }> {
    const codeHash = hashKey(code.trim());
    return this.db.transaction((tx) => new Coupons(tx, this.clock, new Ledger(tx, this.clock)).claimFor(accountId, codeHash));
  }

  /**
   * The redemption itself (in the transaction). A wrong guess learns nothing and costs the same
   * whatever made it wrong (issue 44): the code is looked up by its SHA-256 (no comparison of the
   * code's bytes to time), and an unknown code, another account's coupon and one redeemed by
   * someone else all get the same couponInvalid answer. Only the account that redeemed a coupon hears
   * that it was redeemed.
   */
  private async claimFor(accountId: number, codeHash: string): Promise<{ credits_added: number; credits: number }> {
    const c = await this.get.get(codeHash);
    if (c?.redeemed_by === accountId) throw API_ERRORS.couponRedeemed();
    if (!c || (c.account_id !== null && c.account_id !== accountId) || c.redeemed_by !== null) throw API_ERRORS.couponInvalid();
    if ((await this.claim.run(accountId, this.clock.now(), codeHash)).changes !== 1) throw API_ERRORS.couponInvalid();
    const credits = toCredits(c.credits_micros);
    const r = await this.ledger.append({ accountId, kind: 'coupon', credits, idempotencyKey: `coupon:${codeHash}`, ref: `coupon ${couponId(codeHash)}` });
    return { credits_added: credits, credits: r.credits };
  }

  async list(): Promise<Coupon[]> {
    return (await this.listStmt.all()).map((c) => ({
      id: couponId(c.code_hash),
      credits: toCredits(c.credits_micros),
      accountId: c.account_id,
      redeemedBy: c.redeemed_by,
      redeemedAt: c.redeemed_at,
    }));
  }
}
