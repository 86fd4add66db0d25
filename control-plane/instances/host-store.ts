// The hosts registry (migration 4): the GPU hosts registered with `rc host add`, each the address
// of an agent's gRPC server and its token (sealed at rest). The instance service dials every
// stored host at start, so registered hosts survive control-plane restarts.
import type { Clock } from '../../lib/clock.js';
import type { Sql } from '../sql.js';
import { seal, unseal } from '../secrets.js';

export interface HostRecord {
  name: string;
  address: string;
  /** The agent token in clear; undefined when it cannot be unsealed (seal.key lost: `rc host add` it again). */
  token: string | undefined;
  draining: boolean;
  createdAt: number;
}

interface HostRow {
  name: string;
  address: string;
  token_sealed: string;
  draining: number;
  created_at: number;
}

export class HostStore {
  private readonly listStmt;
  private readonly getStmt;
  private readonly upsertStmt;
  private readonly drainStmt;
  private readonly removeStmt;

  constructor(
    db: Sql,
    private readonly sealKey: Buffer,
    private readonly clock: Clock,
  ) {
    this.listStmt = db.prepare<[], HostRow>('SELECT * FROM hosts ORDER BY name');
    this.getStmt = db.prepare<[string], HostRow>('SELECT * FROM hosts WHERE name = ?');
    this.upsertStmt = db.prepare(
      `INSERT INTO hosts (name, address, token_sealed, draining, created_at, updated_at) VALUES (@name, @address, @token, 0, @now, @now)
       ON CONFLICT (name) DO UPDATE SET address = excluded.address, token_sealed = excluded.token_sealed, updated_at = excluded.updated_at`,
    );
    this.drainStmt = db.prepare<[number, number, string]>('UPDATE hosts SET draining = ?, updated_at = ? WHERE name = ?');
    this.removeStmt = db.prepare<[string]>('DELETE FROM hosts WHERE name = ?');
  }

  private record(r: HostRow): HostRecord {
    return { name: r.name, address: r.address, token: unseal(this.sealKey, r.token_sealed), draining: r.draining === 1, createdAt: r.created_at };
  }

  async list(): Promise<HostRecord[]> {
    return (await this.listStmt.all()).map((r) => this.record(r));
  }

  async get(name: string): Promise<HostRecord | undefined> {
    const r = await this.getStmt.get(name);
    return r && this.record(r);
  }

  /** Registers a host, or changes the address and token of a registered one (its draining flag stays). */
  async put(name: string, address: string, token: string): Promise<HostRecord> {
    await this.upsertStmt.run({ name, address, token: seal(this.sealKey, token), now: this.clock.now() });
    return (await this.get(name))!;
  }

  /** false when no such host is registered. */
  async setDraining(name: string, draining: boolean): Promise<boolean> {
    return (await this.drainStmt.run(draining ? 1 : 0, this.clock.now(), name)).changes === 1;
  }

  async remove(name: string): Promise<boolean> {
    return (await this.removeStmt.run(name)).changes === 1;
  }
}
