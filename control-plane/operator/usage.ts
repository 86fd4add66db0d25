// The operator's usage page: shared-model tokens (today by hour and model, from the gates; by day
// and model over 30 days and the top accounts, from the daily roll-up in model_usage_days), GPU
// hours and credits consumed by day over 30 days, and the top accounts by credits.
import type { ModelUsageReader } from '../deps.js';
import { toCredits } from '../ledger.js';
import type { Store } from '../store.js';
import type { OperatorReads } from './reads.js';
import { dayString } from './usage-days.js';

export const USAGE_DAYS = 30;
const DAY_MS = 86_400_000;
const TOP = 10;

/** The fields of the gates' ModelUsage (gateway/gates) this page reads. */
interface DayUsage {
  tokens_used: number;
  requests: number;
  by_model: Record<string, { input_tokens: number; output_tokens: number; requests: number }>;
  by_hour: { hour: number; tokens: number; requests: number; by_model: Record<string, { tokens: number; requests: number }> }[];
}

/** GPU hours per UTC day: each ready span cut at day boundaries, times its GPUs. */
export function gpuHoursByDay(spans: { gpu_count: number; ready_at: number; ended_at: number | null }[], from: number, now: number): Map<number, number> {
  const out = new Map<number, number>();
  for (const s of spans) {
    let t = Math.max(s.ready_at, from);
    const end = s.ended_at ?? now;
    while (t < end) {
      const day = Math.floor(t / DAY_MS);
      const cut = Math.min(end, (day + 1) * DAY_MS);
      out.set(day, (out.get(day) ?? 0) + ((cut - t) / 3_600_000) * s.gpu_count);
      t = cut;
    }
  }
  return out;
}

/** Today's shared-model usage of every account, summed by hour and model (the gates have today's hours). */
async function sharedModelsToday(store: Store, read: ModelUsageReader) {
  const byHour = Array.from({ length: 24 }, (_, hour) => ({
    hour,
    tokens: 0,
    requests: 0,
    by_model: {} as Record<string, { tokens: number; requests: number }>,
  }));
  for (const a of await store.accounts.list()) {
    const u = (await read(a.id)) as DayUsage;
    if (u.requests === 0 && u.tokens_used === 0) continue;
    for (const hr of u.by_hour) {
      const into = byHour[hr.hour]!;
      into.tokens += hr.tokens;
      into.requests += hr.requests;
      for (const [m, x] of Object.entries(hr.by_model)) {
        const t = (into.by_model[m] ??= { tokens: 0, requests: 0 });
        t.tokens += x.tokens;
        t.requests += x.requests;
      }
    }
  }
  return { by_hour: byHour };
}

/** Shared-model tokens by day and model for the last `days` days, and the top accounts, from the daily roll-up (one query each). */
async function sharedModelsByDay(store: Store, today: number, days: number) {
  const from = dayString(today - days + 1);
  const to = dayString(today);
  const out = Array.from({ length: days }, (_, i) => ({
    day: dayString(today - days + 1 + i),
    tokens: 0,
    requests: 0,
    by_model: {} as Record<string, number>,
  }));
  const index = new Map(out.map((r) => [r.day, r]));
  for (const r of await store.modelUsageDays.byDay(from, to)) {
    const row = index.get(r.day)!;
    row.tokens += r.tokens;
    row.requests += r.requests;
    row.by_model[r.model] = r.tokens;
  }
  const top = (await store.modelUsageDays.topAccounts(from, to, TOP)).map((r) => ({
    account_id: r.account_id,
    email: r.email,
    tokens: r.tokens,
    requests: r.requests,
  }));
  return { by_day: out, top_accounts: top };
}

async function sharedModels(store: Store, read: ModelUsageReader, today: number) {
  const { by_day, top_accounts } = await sharedModelsByDay(store, today, USAGE_DAYS);
  return { today: await sharedModelsToday(store, read), by_day, top_accounts };
}

export async function operatorUsage(store: Store, reads: OperatorReads, read: ModelUsageReader | undefined) {
  const now = store.clock.now();
  const today = Math.floor(now / DAY_MS);
  const from = (today - USAGE_DAYS + 1) * DAY_MS;
  const credits = new Map((await reads.creditsByDay(from)).map((r) => [r.day, r.micros]));
  const gpuHours = gpuHoursByDay(await reads.gpuSpans(from), from, now);
  const days = Array.from({ length: USAGE_DAYS }, (_, i) => today - USAGE_DAYS + 1 + i).map((d) => ({
    day: dayString(d),
    gpu_hours: Math.round((gpuHours.get(d) ?? 0) * 1e6) / 1e6, // an instance of a few seconds still shows
    credits: toCredits(credits.get(d) ?? 0),
  }));
  return {
    day: dayString(today),
    shared_models: read ? await sharedModels(store, read, today) : null,
    instances_by_day: days,
    top_accounts_by_credits: (await reads.topSpenders(from, TOP)).map((r) => ({ account_id: r.account_id, email: r.email, credits: toCredits(r.micros) })),
  };
}
