// GET /api/credits/ledger: the caller's ledger entries, newest first, a page at a time.
import { z } from 'zod';
import type { Caller } from './auth.js';
import type { ApiDeps } from './deps.js';
import { snapshotOf } from './instances/store.js';
import type { Store } from './store.js';
import { route, type Route } from './router.js';

export const LEDGER_DEFAULT_LIMIT = 50;
export const LEDGER_MAX_LIMIT = 200;

/** A decimal integer query value within [min, max]. */
const intParam = (name: string, min: number, max: number) =>
  z
    .string()
    .regex(/^[0-9]{1,16}$/, `${name} must be a whole number`)
    .transform(Number)
    .pipe(z.number().int().min(min, `${name} must be at least ${min}`).max(max, `${name} must be at most ${max}`));

export const ledgerQuery = z.object({
  /** Entries per page: 1..200, default 50. */
  limit: intParam('limit', 1, LEDGER_MAX_LIMIT).optional(),
  /** Only entries with an id below this one (the previous page's `next_before`). */
  before: intParam('before', 1, Number.MAX_SAFE_INTEGER).optional(),
});

/**
 * What the page's instance references are (the template each was launched from), so a ledger
 * names templates, not bare instance ids: only the caller's own instances.
 */
async function instanceLabels(
  store: Store,
  accountId: number,
  refs: (string | null)[],
): Promise<Record<string, { template_title: string; gpu_count: number }>> {
  const out: Record<string, { template_title: string; gpu_count: number }> = {};
  for (const ref of new Set(refs)) {
    const r = ref ? await store.instances.get(ref) : undefined;
    if (r && r.account_id === accountId) out[r.id] = { template_title: snapshotOf(r).title, gpu_count: r.gpu_count };
  }
  return out;
}

export function creditRoutes(deps: ApiDeps): Route[] {
  const { store } = deps;
  return [
    route({
      method: 'get',
      path: '/api/credits/ledger',
      access: 'required',
      query: ledgerQuery,
      summary: "The caller's credit ledger, newest first; page with `before` = the previous page's `next_before`",
      async handle({ query }, caller: Caller) {
        const limit = query.limit ?? LEDGER_DEFAULT_LIMIT;
        // One more than asked tells whether another page exists.
        const rows = await store.ledger.page(caller.account.id, limit + 1, query.before);
        const page = rows.slice(0, limit);
        return {
          body: {
            entries: page.map((e) => ({ id: e.id, kind: e.kind, credits: e.credits, ref: e.ref, created_at: new Date(e.createdAt).toISOString() })),
            next_before: rows.length > limit ? page[page.length - 1]!.id : null,
            instances: await instanceLabels(
              store,
              caller.account.id,
              page.map((e) => e.ref),
            ),
          },
        };
      },
    }),
  ];
}
