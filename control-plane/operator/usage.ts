// The operator's usage page: shared-model tokens (today by hour and model; by day for the days the
// gates keep), GPU hours and credits consumed by day over 30 days, and the top accounts.
import type { ModelUsageReader } from '../deps.js';
import { toCredits } from '../ledger.js';
import type { Store } from '../store.js';
import type { OperatorReads } from './reads.js';

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

const dayString = (day: number) => new Date(day * DAY_MS).toISOString().slice(0, 10);

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

/** Today's shared-model usage of every account, summed: by hour and model, and per account. */
async function sharedModelsToday(store: Store, read: ModelUsageReader) {
  const byHour = Array.from({ length: 24 }, (_, hour) => ({
    hour,
    tokens: 0,
    requests: 0,
    by_model: {} as Record<string, { tokens: number; requests: number }>,
  }));
  const perAccount: { email: string; tokens: number; requests: number }[] = [];
  for (const a of store.accounts.list()) {
    const u = (await read(a.id)) as DayUsage;
    if (u.requests === 0 && u.tokens_used === 0) continue;
    perAccount.push({ email: a.email, tokens: u.tokens_used, requests: u.requests });
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
  perAccount.sort((x, y) => y.tokens - x.tokens);
  return { by_hour: byHour, top_accounts: perAccount.slice(0, TOP) };
}

/** Shared-model tokens by day and model for the last `days` days (days the gates no longer keep read as zero). */
async function sharedModelsByDay(store: Store, read: ModelUsageReader, today: number, days: number) {
  const out: { day: string; tokens: number; requests: number; by_model: Record<string, number> }[] = [];
  const accounts = store.accounts.list();
  for (let d = today - days + 1; d <= today; d++) {
    const row = { day: dayString(d), tokens: 0, requests: 0, by_model: {} as Record<string, number> };
    for (const a of accounts) {
      const u = (await read(a.id, dayString(d))) as DayUsage;
      row.tokens += u.tokens_used;
      row.requests += u.requests;
      for (const [m, x] of Object.entries(u.by_model)) row.by_model[m] = (row.by_model[m] ?? 0) + x.input_tokens + x.output_tokens;
    }
    out.push(row);
  }
  return out;
}

export async function operatorUsage(store: Store, reads: OperatorReads, read: ModelUsageReader | undefined) {
  const now = store.clock.now();
  const today = Math.floor(now / DAY_MS);
  const from = (today - USAGE_DAYS + 1) * DAY_MS;
  const credits = new Map(reads.creditsByDay(from).map((r) => [r.day, r.micros]));
  const gpuHours = gpuHoursByDay(reads.gpuSpans(from), from, now);
  const days = Array.from({ length: USAGE_DAYS }, (_, i) => today - USAGE_DAYS + 1 + i).map((d) => ({
    day: dayString(d),
    gpu_hours: Math.round((gpuHours.get(d) ?? 0) * 1e6) / 1e6, // an instance of a few seconds still shows
    credits: toCredits(credits.get(d) ?? 0),
  }));
  return {
    day: dayString(today),
    shared_models: read ? { today: await sharedModelsToday(store, read), by_day: await sharedModelsByDay(store, read, today, USAGE_DAYS) } : null,
    instances_by_day: days,
    top_accounts_by_credits: reads.topSpenders(from, TOP).map((r) => ({ account_id: r.account_id, email: r.email, credits: toCredits(r.micros) })),
  };
}
