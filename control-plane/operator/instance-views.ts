// Every account's live instances (pending, queued or placed, ready, stopping) as the operator's
// instances page and `instance.list` show them: owner, host, age, GPUs, price and spend.
import { accruedMicros, MICROS_PER_CREDIT } from '../instances/billing.js';
import { snapshotOf } from '../instances/store.js';
import type { Store } from '../store.js';

export interface LiveInstanceView {
  instance_id: string;
  account_id: number;
  email: string | null;
  template_title: string;
  state: string;
  message: string;
  /** The host it runs on; null while it waits in the queue. */
  host: string | null;
  queued: boolean;
  gpu_count: number;
  created_at: string;
  age_sec: number;
  credits_per_hour: number;
  credits_spent: number;
}

export async function liveInstances(store: Store): Promise<LiveInstanceView[]> {
  const now = store.clock.now();
  const rows = await store.instances.live();
  const emails = new Map<number, string | null>();
  for (const r of rows) if (!emails.has(r.account_id)) emails.set(r.account_id, (await store.accounts.byId(r.account_id))?.email ?? null);
  return rows.map((r) => ({
    instance_id: r.id,
    account_id: r.account_id,
    email: emails.get(r.account_id) ?? null,
    template_title: snapshotOf(r).title,
    state: r.state,
    message: r.message,
    host: r.agent_id,
    queued: r.agent_id === null && r.state === 'pending',
    gpu_count: r.gpu_count,
    created_at: new Date(r.created_at).toISOString(),
    age_sec: Math.max(0, Math.floor((now - r.created_at) / 1000)),
    credits_per_hour: r.micros_per_hour / MICROS_PER_CREDIT,
    credits_spent: r.ready_at === null ? 0 : accruedMicros(r.micros_per_hour, (r.ended_at ?? now) - r.ready_at) / MICROS_PER_CREDIT,
  }));
}
