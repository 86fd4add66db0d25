// The JSON shapes of the operator API for accounts: the list row (the CLI's summary plus the
// operator and disabled flags and the active instance) and the full view with ledger and usage.
import type { Account } from '../accounts.js';
import type { ModelUsageReader } from '../deps.js';
import { accountSummary } from '../views.js';
import type { Store } from '../store.js';

const LEDGER_ENTRIES = 50;

export async function operatorAccount(store: Store, a: Account) {
  const active = await store.instances.active(a.id);
  return {
    ...(await accountSummary(store, a)),
    is_operator: a.isOperator,
    disabled: a.disabled,
    instance: active ? { instance_id: active.id, state: active.state, host: active.agent_id, gpu_count: active.gpu_count } : null,
  };
}

export async function operatorAccountDetail(store: Store, a: Account, readUsage: ModelUsageReader | undefined) {
  const ledger = (await store.ledger.page(a.id, LEDGER_ENTRIES)).map((e) => ({
    id: e.id,
    kind: e.kind,
    credits: e.credits,
    ref: e.ref,
    created_at: new Date(e.createdAt).toISOString(),
  }));
  const usage = readUsage ? ((await readUsage(a.id)) as { tokens_used: number; requests: number; daily_cap: number }) : null;
  return {
    account: await operatorAccount(store, a),
    ledger,
    usage_today: usage && { tokens_used: usage.tokens_used, requests: usage.requests, daily_cap: usage.daily_cap },
  };
}

/** Coupons newest last, with the e-mails of the account each was issued to and of its redeemer (never the code). */
export async function couponViews(store: Store) {
  const emailOf = async (id: number | null) => (id === null ? null : ((await store.accounts.byId(id))?.email ?? null));
  const coupons = await store.coupons.list();
  return Promise.all(
    coupons.map(async (c) => ({
      id: c.id,
      credits: c.credits,
      issued_to: await emailOf(c.accountId),
      redeemed_by: await emailOf(c.redeemedBy),
      redeemed_at: c.redeemedAt === null ? null : new Date(c.redeemedAt).toISOString(),
    })),
  );
}
