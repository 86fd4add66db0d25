// The image catalog (what templates may launch), the shared model catalog entries added with
// `rc model add`, and per-account model API limit overrides.
import type { Clock } from '../lib/clock.js';
import { modelEntrySchema, type ModelEntry } from '../lib/config.js';
import type { Sql } from './sql.js';

export interface ImageEntry {
  name: string;
  image: string;
  enabled: boolean;
  /** Whether the image serves SSH (an SSH server on port 22 taking root's authorized_keys): SSH is offered only then. */
  ssh: boolean;
}

interface ImageRow {
  name: string;
  image: string;
  enabled: number;
  ssh: number;
}

const toEntry = (r: ImageRow): ImageEntry => ({ name: r.name, image: r.image, enabled: r.enabled === 1, ssh: r.ssh === 1 });

export class Images {
  private readonly upsert;
  private readonly setEnabled;
  private readonly setSshStmt;
  private readonly listStmt;
  private readonly enabledStmt;
  private readonly getStmt;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    // `ssh` NULL keeps what an image already in the catalog says (a new one: no SSH).
    this.upsert = db.prepare<[{ name: string; image: string; ssh: number | null; now: number }]>(
      'INSERT INTO images (name, image, enabled, ssh, created_at) VALUES (@name, @image, 1, COALESCE(@ssh, 0), @now) ' +
        'ON CONFLICT (image) DO UPDATE SET name = excluded.name, enabled = 1, ssh = COALESCE(@ssh, images.ssh)',
    );
    this.setEnabled = db.prepare<[number, string]>('UPDATE images SET enabled = ? WHERE image = ?');
    this.setSshStmt = db.prepare<[number, string]>('UPDATE images SET ssh = ? WHERE image = ?');
    this.listStmt = db.prepare<[], ImageRow>('SELECT name, image, enabled, ssh FROM images ORDER BY id');
    this.enabledStmt = db.prepare<[], ImageRow>('SELECT name, image, enabled, ssh FROM images WHERE enabled = 1 ORDER BY id');
    this.getStmt = db.prepare<[string], ImageRow>('SELECT name, image, enabled, ssh FROM images WHERE image = ?');
  }

  /**
   * Adds the image, or renames and re-enables it when it is already in the catalog. `ssh`: whether
   * it serves SSH; left out, an image already in the catalog keeps what it said (a new one: no).
   */
  async add(name: string, image: string, ssh?: boolean): Promise<ImageEntry> {
    await this.upsert.run({ name, image, ssh: ssh === undefined ? null : ssh ? 1 : 0, now: this.clock.now() });
    return (await this.get(image))!;
  }

  /** Disables the image; false when it is not in the catalog. */
  async disable(image: string): Promise<boolean> {
    return (await this.setEnabled.run(0, image)).changes === 1;
  }

  /** Says whether the image serves SSH; false when it is not in the catalog. */
  async setSsh(image: string, ssh: boolean): Promise<boolean> {
    return (await this.setSshStmt.run(ssh ? 1 : 0, image)).changes === 1;
  }

  async get(image: string): Promise<ImageEntry | undefined> {
    const r = await this.getStmt.get(image);
    return r && toEntry(r);
  }

  async isEnabled(image: string): Promise<boolean> {
    return (await this.getStmt.get(image))?.enabled === 1;
  }

  async list(): Promise<ImageEntry[]> {
    return (await this.listStmt.all()).map(toEntry);
  }

  /** The selectable images (enabled ones). */
  async enabled(): Promise<ImageEntry[]> {
    return (await this.enabledStmt.all()).map(toEntry);
  }
}

/** Shared model catalog entries kept in the database (validated with modelEntrySchema). */
export class Models {
  private readonly upsert;
  private readonly del;
  private readonly listStmt;

  constructor(
    db: Sql,
    private readonly clock: Clock,
  ) {
    this.upsert = db.prepare<[string, string, number]>(
      'INSERT INTO models (name, entry, created_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET entry = excluded.entry',
    );
    this.del = db.prepare<[string]>('DELETE FROM models WHERE name = ?');
    this.listStmt = db.prepare<[], { entry: string }>('SELECT entry FROM models ORDER BY name');
  }

  /** Adds or replaces the entry of that name. */
  async put(entry: ModelEntry): Promise<ModelEntry> {
    const e = modelEntrySchema.parse(entry);
    await this.upsert.run(e.name, JSON.stringify(e), this.clock.now());
    return e;
  }

  async remove(name: string): Promise<boolean> {
    return (await this.del.run(name)).changes === 1;
  }

  /** Every stored entry; one that no longer validates (schema changed) is skipped. */
  async list(): Promise<ModelEntry[]> {
    const out: ModelEntry[] = [];
    for (const r of await this.listStmt.all()) {
      const p = modelEntrySchema.safeParse(JSON.parse(r.entry));
      if (p.success) out.push(p.data);
    }
    return out;
  }
}

/** Per-account overrides of the model API gates; a null field means "the configured default". */
export interface AccountLimits {
  accountId: number;
  rpm: number | null;
  tpm: number | null;
  dailyTokens: number | null;
}

export class Limits {
  private readonly upsert;
  private readonly getStmt;
  private readonly allStmt;

  constructor(db: Sql) {
    this.upsert = db.prepare<[number, number | null, number | null, number | null]>(
      'INSERT INTO account_limits (account_id, rpm, tpm, daily_tokens) VALUES (?, ?, ?, ?) ' +
        'ON CONFLICT (account_id) DO UPDATE SET rpm = excluded.rpm, tpm = excluded.tpm, daily_tokens = excluded.daily_tokens',
    );
    this.getStmt = db.prepare<[number], { account_id: number; rpm: number | null; tpm: number | null; daily_tokens: number | null }>(
      'SELECT account_id, rpm, tpm, daily_tokens FROM account_limits WHERE account_id = ?',
    );
    this.allStmt = db.prepare<[], { account_id: number; rpm: number | null; tpm: number | null; daily_tokens: number | null }>(
      'SELECT account_id, rpm, tpm, daily_tokens FROM account_limits ORDER BY account_id',
    );
  }

  async set(l: AccountLimits): Promise<AccountLimits> {
    await this.upsert.run(l.accountId, l.rpm, l.tpm, l.dailyTokens);
    return l;
  }

  async get(accountId: number): Promise<AccountLimits | undefined> {
    const r = await this.getStmt.get(accountId);
    return r && { accountId: r.account_id, rpm: r.rpm, tpm: r.tpm, dailyTokens: r.daily_tokens };
  }

  async all(): Promise<AccountLimits[]> {
    return (await this.allStmt.all()).map((r) => ({ accountId: r.account_id, rpm: r.rpm, tpm: r.tpm, dailyTokens: r.daily_tokens }));
  }
}
