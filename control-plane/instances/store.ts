// The instance tables (migration 2): instances, accepted launches (rate windows) and launch
// verification tokens. Every state change is an UPDATE guarded by the allowed from-states
// (states.ts), so a stale writer can never move an instance along a transition that does not exist.
import { randomBytes } from 'node:crypto';
import { hashKey } from '../../lib/keys.js';
import type { Sql } from '../sql.js';
import type { Template } from '../templates.js';
import { allowedFrom, TERMINAL, type InstanceState } from './states.js';

export interface InstanceRow {
  id: string;
  account_id: number;
  template_id: number | null;
  template: string;
  gpu_count: number;
  disk_gb: number;
  state: InstanceState;
  message: string;
  reason: string | null;
  detail: string | null;
  agent_id: string | null;
  spec: string | null;
  endpoint_host: string | null;
  endpoint_port: number | null;
  ssh_port: number | null;
  micros_per_hour: number;
  period_ms: number;
  billed_periods: number;
  created_at: number;
  placed_at: number | null;
  ready_at: number | null;
  ended_at: number | null;
  expires_at: number | null;
  last_activity_at: number | null;
  updated_at: number;
}

/** What an instance keeps of its template (the snapshot). */
export type TemplateSnapshot = Pick<
  Template,
  | 'id'
  | 'title'
  | 'image'
  | 'instance_type'
  | 'repo_url'
  | 'branch'
  | 'notebook_path'
  | 'start_command'
  | 'app_port'
  | 'ssh_enabled'
  | 'persistent_storage'
  | 'disk_gb'
> & {
  ssh_public_key: string | null;
  /** Whether the image served SSH at launch (its catalog entry); absent in snapshots made before the catalog said so. */
  image_ssh?: boolean;
};

export const snapshotOf = (r: InstanceRow): TemplateSnapshot => JSON.parse(r.template) as TemplateSnapshot;

export interface NewInstance {
  id: string;
  accountId: number;
  templateId: number;
  template: TemplateSnapshot;
  gpuCount: number;
  diskGb: number;
  microsPerHour: number;
  periodMs: number;
  now: number;
}

/** The fields billing reads (live-balance.ts). */
export type BillingRow = Pick<InstanceRow, 'ready_at' | 'micros_per_hour' | 'period_ms' | 'billed_periods'>;

/** Fields a state change may set besides state and message. */
export type Changes = Partial<
  Pick<
    InstanceRow,
    | 'reason'
    | 'detail'
    | 'agent_id'
    | 'spec'
    | 'endpoint_host'
    | 'endpoint_port'
    | 'ssh_port'
    | 'billed_periods'
    | 'placed_at'
    | 'ready_at'
    | 'ended_at'
    | 'expires_at'
    | 'last_activity_at'
  >
>;

export class InstanceStore {
  private readonly insertStmt;
  private readonly getStmt;
  private readonly latestStmt;
  private readonly activeStmt;
  private readonly liveStmt;
  private readonly queueStmt;
  private readonly onAgentStmt;
  private readonly insertLaunch;
  private readonly launchesSince;
  private readonly touchStmt;
  private readonly insertToken;
  private readonly consumeToken;
  private readonly setVerification;
  private readonly volumeHostStmt;
  private readonly billedStmt;
  private readonly activeBillingStmt;
  constructor(readonly db: Sql) {
    this.insertStmt = db.prepare(
      `INSERT INTO instances (id, account_id, template_id, template, gpu_count, disk_gb, state, message, micros_per_hour, period_ms, created_at, updated_at)
       VALUES (@id, @accountId, @templateId, @template, @gpuCount, @diskGb, 'pending', 'waiting for capacity', @microsPerHour, @periodMs, @now, @now)`,
    );
    this.getStmt = db.prepare<[string], InstanceRow>('SELECT * FROM instances WHERE id = ?');
    this.latestStmt = db.prepare<[number], InstanceRow>('SELECT * FROM instances WHERE account_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1');
    this.activeStmt = db.prepare<[number], InstanceRow>("SELECT * FROM instances WHERE account_id = ? AND state IN ('pending', 'ready')");
    this.liveStmt = db.prepare<[], InstanceRow>("SELECT * FROM instances WHERE state IN ('pending', 'ready', 'stopping') ORDER BY created_at, rowid");
    this.queueStmt = db.prepare<[], InstanceRow>("SELECT * FROM instances WHERE state = 'pending' AND agent_id IS NULL ORDER BY created_at, rowid");
    this.onAgentStmt = db.prepare<[string], InstanceRow>("SELECT * FROM instances WHERE agent_id = ? AND state IN ('pending', 'ready', 'stopping')");
    this.insertLaunch = db.prepare<[number, number]>('INSERT INTO instance_launches (account_id, at) VALUES (?, ?)');
    this.launchesSince = db.prepare<[number, number], { at: number }>('SELECT at FROM instance_launches WHERE account_id = ? AND at > ? ORDER BY at DESC');
    this.touchStmt = db.prepare<[number, string, number]>(
      "UPDATE instances SET last_activity_at = ? WHERE id = ? AND state = 'ready' AND (last_activity_at IS NULL OR last_activity_at < ?)",
    );
    this.insertToken = db.prepare<[string, number, number, number]>(
      'INSERT INTO launch_tokens (token_hash, account_id, expires_at, created_at) VALUES (?, ?, ?, ?)',
    );
    this.consumeToken = db.prepare<[string, number, number]>('DELETE FROM launch_tokens WHERE token_hash = ? AND account_id = ? AND expires_at > ?');
    this.setVerification = db.prepare<[number, number]>('UPDATE accounts SET launch_verification = ? WHERE id = ?');
    this.billedStmt = db.prepare<[number, string, number]>('UPDATE instances SET billed_periods = ? WHERE id = ? AND billed_periods = ?');
    this.activeBillingStmt = db.prepare<[number], BillingRow>(
      "SELECT ready_at, micros_per_hour, period_ms, billed_periods FROM instances WHERE account_id = ? AND state IN ('pending', 'ready')",
    );
    // The snapshot is JSON text on both engines; each has its own way into it.
    const persistent = db.engine === 'postgres' ? "(template::jsonb ->> 'persistent_storage') = 'true'" : "json_extract(template, '$.persistent_storage') = 1";
    this.volumeHostStmt = db.prepare<[number], { agent_id: string }>(
      `SELECT agent_id FROM instances WHERE account_id = ? AND agent_id IS NOT NULL AND ${persistent} ORDER BY created_at DESC LIMIT 1`,
    );
  }

  /** Inserts a pending instance; rejects with a unique violation (sql.ts isUniqueViolation) when the account already has an active one. */
  async insert(n: NewInstance): Promise<void> {
    await this.insertStmt.run({ ...n, template: JSON.stringify(n.template) });
  }

  get(id: string): Promise<InstanceRow | undefined> {
    return this.getStmt.get(id);
  }

  /** The account's most recent instance, whatever its state. */
  latest(accountId: number): Promise<InstanceRow | undefined> {
    return this.latestStmt.get(accountId);
  }

  active(accountId: number): Promise<InstanceRow | undefined> {
    return this.activeStmt.get(accountId);
  }

  /** Instances that are pending, ready or stopping, oldest first. */
  live(): Promise<InstanceRow[]> {
    return this.liveStmt.all();
  }

  /** Pending instances not yet placed, first come first served. */
  queue(): Promise<InstanceRow[]> {
    return this.queueStmt.all();
  }

  /** Instances placed on `agentId` that still hold GPUs there. */
  onAgent(agentId: string): Promise<InstanceRow[]> {
    return this.onAgentStmt.all(agentId);
  }

  /**
   * Moves an instance to `state` (or keeps it there with a new message) with the given changes,
   * only along an allowed transition. Returns the updated row, or undefined when the instance
   * was not in a state `state` can be reached from.
   */
  /**
   * @param onlyFrom narrows the states it may come from (say only `pending` for the move to
   *   `ready`, so that a second control plane folding the same report does not move `ready_at`).
   */
  async transition(
    id: string,
    state: InstanceState,
    message: string,
    now: number,
    changes: Changes = {},
    onlyFrom?: readonly InstanceState[],
  ): Promise<InstanceRow | undefined> {
    // A live state may also stay itself with a new message; a terminal one never changes again.
    const allowed = TERMINAL.includes(state) ? allowedFrom(state) : [state, ...allowedFrom(state)];
    const from = onlyFrom ? allowed.filter((s) => onlyFrom.includes(s)) : allowed;
    const cols = (Object.keys(changes) as (keyof Changes)[]).filter((c) => changes[c] !== undefined).sort();
    const set = ['state = @state', 'message = @message', 'updated_at = @now', ...cols.map((c) => `${c} = @${c}`)].join(', ');
    const sql = `UPDATE instances SET ${set} WHERE id = @id AND state IN (${from.map((s) => `'${s}'`).join(', ')})`;
    const params: Record<string, unknown> = { id, state, message, now };
    for (const c of cols) params[c] = changes[c];
    // Prepared once per combination of changed columns (the executor keeps them by their SQL).
    const r = await this.db.prepare(sql).run(params);
    return r.changes === 1 ? this.get(id) : undefined;
  }

  /** The billing fields of the account's active (pending or ready) instances; stopping ones are billed in full already. */
  activeBilling(accountId: number): Promise<BillingRow[]> {
    return this.activeBillingStmt.all(accountId);
  }

  /** Advances the count of billed periods (from `from`; call in the transaction that wrote the charges). */
  async setBilledPeriods(id: string, from: number, to: number): Promise<void> {
    await this.billedStmt.run(to, id, from);
  }

  /** Records an accepted launch (rate windows). */
  async recordLaunch(accountId: number, at: number): Promise<void> {
    await this.insertLaunch.run(accountId, at);
  }

  /** Times of the account's launches after `since`, newest first. */
  async launchTimes(accountId: number, since: number): Promise<number[]> {
    return (await this.launchesSince.all(accountId, since)).map((r) => r.at);
  }

  /** Idle tracking: moves last_activity_at forward (never back). */
  async touch(id: string, at: number): Promise<void> {
    await this.touchStmt.run(at, id, at);
  }

  /** The host that holds the account's persistent volume (where its last persistent instance ran). */
  async volumeHost(accountId: number): Promise<string | undefined> {
    return (await this.volumeHostStmt.get(accountId))?.agent_id;
  }

  async setLaunchVerification(accountId: number, enabled: boolean): Promise<void> {
    await this.setVerification.run(enabled ? 1 : 0, accountId);
  }

  /** A new single-use launch verification token for the account. */
  async issueLaunchToken(accountId: number, now: number, ttlMs: number): Promise<{ token: string; expiresAt: number }> {
    const token = `lvt_${randomBytes(24).toString('base64url')}`;
    await this.insertToken.run(hashKey(token), accountId, now + ttlMs, now);
    return { token, expiresAt: now + ttlMs };
  }

  /** Consumes a token (call inside the launch transaction); false when unknown, expired or another account's. */
  async consumeLaunchToken(accountId: number, token: string, now: number): Promise<boolean> {
    return (await this.consumeToken.run(hashKey(token), accountId, now)).changes === 1;
  }
}
